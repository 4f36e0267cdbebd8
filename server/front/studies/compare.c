/* compare.c — GET /v1/compare's answer (compare.h): each side's runs read from the store,
 * summarized (study_stats.h), compared, and what differs between them named.
 */
#include "server/front/studies/compare.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_text.h"
#include "common/parse_int.h"
#include "server/front/store/store.h"
#include "server/front/studies/study_stats.h"

/* The clocks of two runs differ when their highest SM clocks do by more than this. */
#define COMPARE_CLOCK_TOLERANCE 0.02

/* One side as named: runs (ids), a study's variant, or a whole study. */
typedef struct compare_spec {
    const char *name;  /* "base" or "run": the parameter, for messages */
    long long ids[COMPARE_MAX_RUNS];
    int n_ids;
    long long study;   /* > 0: a study */
    char variant[64];  /* with study: one variant ("" : the whole study) */
} compare_spec;

/* A set of run records of one side (or one variant of a study side). */
typedef struct compare_group {
    cJSON *records[1000];
    int n;
} compare_group;

static const cJSON *member(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static double number_or(const cJSON *o, const char *key, double otherwise)
{
    const cJSON *v = member(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : otherwise;
}

static const char *string_or(const cJSON *o, const char *key, const char *otherwise)
{
    const cJSON *v = member(o, key);
    return cJSON_IsString(v) ? v->valuestring : otherwise;
}

static void group_free(compare_group *g)
{
    int i;
    for (i = 0; i < g->n; i++) cJSON_Delete(g->records[i]);
    g->n = 0;
}

/* ---------------------------------------------------------------- the parameters -- */

/* "17", "17,18", "study:3", "study:3:flash" into spec. 0, or -1 with e. */
static int compare_parse_spec(const char *name, const char *text, compare_spec *spec, api_error *e)
{
    memset(spec, 0, sizeof *spec);
    spec->name = name;
    if (!strncmp(text, "study:", 6)) {
        const char *id = text + 6, *colon = strchr(id, ':');
        char digits[24];
        size_t n = colon ? (size_t)(colon - id) : strlen(id);
        if (n == 0 || n >= sizeof digits) goto bad;
        memcpy(digits, id, n);
        digits[n] = '\0';
        if (parse_int_in(digits, 1, LLONG_MAX, &spec->study) != 0) goto bad;
        if (colon) {
            if (!colon[1] || strlen(colon + 1) >= sizeof spec->variant) goto bad;
            snprintf(spec->variant, sizeof spec->variant, "%s", colon + 1);
        }
        return 0;
    }
    for (;;) {
        const char *comma = strchr(text, ',');
        char digits[24];
        size_t n = comma ? (size_t)(comma - text) : strlen(text);
        if (n == 0 || n >= sizeof digits) goto bad;
        if (spec->n_ids == COMPARE_MAX_RUNS)
            return api_fail(e, 400, "out_of_range", name, "%s names more than %d runs", name, COMPARE_MAX_RUNS);
        memcpy(digits, text, n);
        digits[n] = '\0';
        if (parse_int_in(digits, 1, LLONG_MAX, &spec->ids[spec->n_ids++]) != 0) goto bad;
        if (!comma) return 0;
        text = comma + 1;
    }
bad:
    return api_fail(e, 400, "bad_value", name,
                    "%s is a run id (17), run ids (17,18,19), a study (study:3) or a study's variant (study:3:flash); "
                    "got '%.60s'",
                    name, text);
}

/* A number parameter in [lo, hi] as a query string spells it. 0, or -1 with e. */
static int compare_number(const cJSON *query, const char *key, double lo, double hi, double *out, api_error *e)
{
    const cJSON *v = member(query, key);
    char *end;

    if (!v) return 0;
    if (!cJSON_IsString(v) || !json_text_is_number(v->valuestring, strlen(v->valuestring)))
        return api_fail(e, 400, "bad_value", key, "%s must be a number", key);
    *out = strtod(v->valuestring, &end);
    if (!(*out >= lo && *out <= hi))
        return api_fail(e, 400, "out_of_range", key, "%s %.40s is out of range (%g..%g)", key, v->valuestring, lo, hi);
    return 0;
}

/* ------------------------------------------------------------------- the records -- */

/* The record of run id, parsed: 0; 404 or 409 (not done) with e, or 500/503. */
static int compare_load_run(const char *side, long long id, cJSON **out, api_error *e)
{
    char *text = store_get_run(id);
    const char *status;

    *out = NULL;
    if (!text) {
        if (!store_available())
            return api_fail(e, 503, "store_unavailable", "", "the fleet's database is away; retry later");
        return api_fail(e, 404, "not_found", side, "there is no run %lld", id);
    }
    *out = cJSON_Parse(text);
    free(text);
    if (!*out) return api_fail(e, 500, "internal", "", "run %lld's record cannot be read", id);
    status = string_or(*out, "status", "?");
    if (strcmp(status, "done") != 0) {
        cJSON_Delete(*out);
        *out = NULL;
        return api_fail(e, 409, "not_done", side, "run %lld is %s: only done runs have timings to compare", id, status);
    }
    return 0;
}

/* The study record of id, parsed; NULL with e (404, 500, 503). */
static cJSON *compare_load_study(const char *side, long long id, api_error *e)
{
    char *text = store_get_study(id);
    cJSON *json;

    if (!text) {
        if (!store_available()) api_fail(e, 503, "store_unavailable", "", "the fleet's database is away; retry later");
        else api_fail(e, 404, "not_found", side, "there is no study %lld", id);
        return NULL;
    }
    json = cJSON_Parse(text);
    free(text);
    if (!json) api_fail(e, 500, "internal", "", "study %lld's record cannot be read", id);
    return json;
}

/* The done runs of variant of study (its record) into g. 0, or -1 with e (409 none done). */
static int compare_study_variant(const char *side, const cJSON *study, const char *variant, compare_group *g,
                                 api_error *e)
{
    const cJSON *run;
    int known = 0;

    cJSON_ArrayForEach(run, member(study, "variants")) known |= cJSON_IsString(run) && !strcmp(run->valuestring, variant);
    if (!known)
        return api_fail(e, 404, "not_found", side, "study %.0f has no variant %.40s", number_or(study, "id", 0), variant);
    cJSON_ArrayForEach(run, member(study, "runs")) {
        cJSON *record;
        if (strcmp(string_or(run, "variant", ""), variant) || strcmp(string_or(run, "status", ""), "done")) continue;
        if (g->n == (int)(sizeof g->records / sizeof g->records[0])) break;
        if (compare_load_run(side, (long long)number_or(run, "id", 0), &record, e) != 0) return -1;
        g->records[g->n++] = record;
    }
    if (g->n == 0)
        return api_fail(e, 409, "not_done", side, "study %.0f has no done run of %.40s yet", number_or(study, "id", 0),
                        variant);
    return 0;
}

/* -------------------------------------------------------------------- the numbers -- */

/* The side of g: its runs' medians (several: their spread; one: its samples and the floor). */
static int compare_side(const compare_group *g, double noise_floor, stats_side *side)
{
    double medians[1000];
    int i;

    if (g->n == 1) {
        const cJSON *t = member(g->records[0], "timing");
        return stats_side_of_run(number_or(t, "median_us", -1), number_or(t, "p10_us", NAN), number_or(t, "p90_us", NAN),
                                 (long long)number_or(t, "iters", 0), noise_floor, side);
    }
    for (i = 0; i < g->n; i++) medians[i] = number_or(member(g->records[i], "timing"), "median_us", -1);
    return stats_side_of_runs(medians, g->n, side);
}

static void add_number_or_null(cJSON *o, const char *key, double x)
{
    if (isfinite(x))
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *compare_side_json(const compare_group *g, const stats_side *side)
{
    cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
    int i;

    for (i = 0; i < g->n; i++) cJSON_AddItemToArray(runs, cJSON_CreateNumber(number_or(g->records[i], "id", 0)));
    cJSON_AddStringToObject(o, "backend", string_or(g->records[0], "backend", ""));
    if (cJSON_IsString(member(g->records[0], "impl_used")))
        cJSON_AddStringToObject(o, "impl_used", string_or(g->records[0], "impl_used", ""));
    else
        cJSON_AddNullToObject(o, "impl_used");
    cJSON_AddNumberToObject(o, "median_us", side->center_us);
    add_number_or_null(o, "se", side->se);
    add_number_or_null(o, "df", side->df);
    return o;
}

/* One row: base against run. NULL with e when a side has no timing. */
static cJSON *compare_row(const char *variant, const compare_group *base, const compare_group *run,
                          double confidence, double noise_floor, api_error *e)
{
    stats_side a, b;
    stats_ratio r;
    cJSON *row;

    if (compare_side(base, noise_floor, &a) != 0 || compare_side(run, noise_floor, &b) != 0) {
        api_fail(e, 409, "not_done", "", "a run to compare has no median time");
        return NULL;
    }
    stats_compare(&a, &b, confidence, &r);
    row = cJSON_CreateObject();
    if (variant)
        cJSON_AddStringToObject(row, "variant", variant);
    else
        cJSON_AddNullToObject(row, "variant");
    cJSON_AddItemToObject(row, "base", compare_side_json(base, &a));
    cJSON_AddItemToObject(row, "run", compare_side_json(run, &b));
    cJSON_AddNumberToObject(row, "ratio", r.ratio);
    add_number_or_null(row, "low", r.low);
    add_number_or_null(row, "high", r.high);
    cJSON_AddBoolToObject(row, "significant", r.significant);
    cJSON_AddStringToObject(row, "verdict", !isfinite(r.low)   ? "unknown"
                                            : !r.significant   ? "no significant difference"
                                            : r.ratio > 1.0    ? "slower"
                                                               : "faster");
    return row;
}

/* ------------------------------------------------------------------- the warnings -- */

/* A copy of v, or null when v is NULL. */
static cJSON *dup_or_null(const cJSON *v) { return v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull(); }

static void warn(cJSON *warnings, const char *field, const cJSON *base, const cJSON *run, const char *message)
{
    cJSON *w = cJSON_CreateObject();

    cJSON_AddStringToObject(w, "field", field);
    cJSON_AddItemToObject(w, "base", dup_or_null(base));
    cJSON_AddItemToObject(w, "run", dup_or_null(run));
    cJSON_AddStringToObject(w, "message", message);
    cJSON_AddItemToArray(warnings, w);
}

/* Warn when the value at path (an object chain, "a.b") differs between the two records. */
static void warn_if_differs(cJSON *warnings, const cJSON *a, const cJSON *b, const char *field, const char *path,
                            const char *message)
{
    char key[64], *dot, *rest = key;
    const cJSON *va = a, *vb = b;

    snprintf(key, sizeof key, "%s", path);
    for (;;) {
        dot = strchr(rest, '.');
        if (dot) *dot = '\0';
        va = member(va, rest);
        vb = member(vb, rest);
        if (!dot) break;
        rest = dot + 1;
    }
    /* Absent and null say the same: nothing known. */
    if (va && cJSON_IsNull(va)) va = NULL;
    if (vb && cJSON_IsNull(vb)) vb = NULL;
    if ((va || vb) && !(va && vb && cJSON_Compare(va, vb, 1))) warn(warnings, field, va, vb, message);
}

/* A resident tensor's id as params keeps it ("t4"). */
static int is_tensor_id(const cJSON *v)
{
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    return s && s[0] == 't' && s[1] && strspn(s + 1, "0123456789") == strlen(s + 1);
}

/* The parameters whose difference is not the point of a comparison: which variant, device
 * and checks ran, and where the inputs came from. An uploaded input (q, k, v, block_table: a
 * tensor id) may hold exactly what the other run generated, so its id says nothing about the
 * problem; lengths given as a tensor (seqlens_q=t2) likewise, while two lists of lengths
 * that differ are two problems. a and b: the parameter's value on each side (NULL: absent). */
static int compare_param_ignored(const char *name, const cJSON *a, const cJSON *b)
{
    static const char *const ignored[] = {"backend", "impl", "device", "tags", "verify", "profile",
                                          "verify_cpu_max_macs", "output_tensor", "q", "k", "v", "block_table"};
    size_t i;
    for (i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        if (!strcmp(name, ignored[i])) return 1;
    if (!strcmp(name, "seqlens_q") || !strcmp(name, "seqlens_kv")) return is_tensor_id(a) || is_tensor_id(b);
    return 0;
}

/* Parameter name of params, or its default where params leaves it out because it is another
 * parameter's value (kv_heads: heads; head_dim_v: head_dim), as a run over uploaded tensors
 * writes it out and a generated one does not. NULL when absent. */
static const cJSON *param_or_default(const cJSON *params, const char *name)
{
    const cJSON *v = member(params, name);
    if (v) return v;
    if (!strcmp(name, "kv_heads")) return member(params, "heads");
    if (!strcmp(name, "head_dim_v")) return member(params, "head_dim");
    return NULL;
}

/* One warning naming every problem or measurement parameter that differs. */
static void warn_problem(cJSON *warnings, const cJSON *a, const cJSON *b)
{
    const cJSON *pa = member(a, "params"), *pb = member(b, "params"), *item;
    cJSON *da = cJSON_CreateObject(), *db = cJSON_CreateObject();
    char names[400] = "";
    size_t len = 0;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? pb : pa, *other = pass ? pa : pb;
        cJSON_ArrayForEach(item, from) {
            const cJSON *twin = param_or_default(other, item->string);
            if (compare_param_ignored(item->string, item, twin) || (twin && cJSON_Compare(item, twin, 1))) continue;
            if (member(da, item->string) || member(db, item->string)) continue;
            cJSON_AddItemToObject(da, item->string, dup_or_null(param_or_default(pa, item->string)));
            cJSON_AddItemToObject(db, item->string, dup_or_null(param_or_default(pb, item->string)));
            if (len < sizeof names)
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", item->string);
        }
    }
    if (len) {
        char message[480];
        snprintf(message, sizeof message, "the runs differ in the problem or the measurement: %s", names);
        warn(warnings, "problem", da, db, message);
    }
    cJSON_Delete(da);
    cJSON_Delete(db);
}

/* Warn when the clocks differ: the highest SM clock by more than the tolerance, or one side
 * throttled. */
static void warn_clocks(cJSON *warnings, const cJSON *a, const cJSON *b)
{
    const cJSON *ca = member(member(a, "timing"), "clocks"), *cb = member(member(b, "timing"), "clocks");
    double ma = number_or(ca, "sm_max_mhz", -1), mb = number_or(cb, "sm_max_mhz", -1);
    int ta = cJSON_IsTrue(member(ca, "throttled")), tb = cJSON_IsTrue(member(cb, "throttled"));

    if ((ma > 0 && mb > 0 && fabs(ma - mb) > COMPARE_CLOCK_TOLERANCE * (ma > mb ? ma : mb)) || ta != tb)
        warn(warnings, "clocks", ca, cb,
             ta != tb ? "one side was throttled (its SM clock fell below 75% of the maximum while timing)"
                      : "the highest SM clocks while timing differ by more than 2%");
}

/* Whether a run's stopping rule missed its noise target: it stopped on a limit (max_iters,
 * max_time) with rse above target_noise. A run of fixed iters had no target. */
static int compare_noise_missed(const cJSON *record)
{
    const cJSON *t = member(record, "timing");
    double rse = number_or(t, "rse", -1), target = number_or(member(record, "params"), "target_noise", -1);

    return rse >= 0 && target > 0 && rse > target && strcmp(string_or(t, "stop_reason", "iters"), "iters") != 0;
}

/* One warning naming the runs of g that missed their noise target, when any did. */
static void warn_noise(cJSON *warnings, const char *side, const compare_group *g)
{
    cJSON *ids = cJSON_CreateArray();
    char message[200];
    int i, n = 0;

    for (i = 0; i < g->n; i++)
        if (compare_noise_missed(g->records[i])) {
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(number_or(g->records[i], "id", 0)));
            n++;
        }
    if (n) {
        snprintf(message, sizeof message,
                 "%s: %d of %d runs stopped on a limit (max_iters, max_time) with timing.rse above their target_noise",
                 side, n, g->n);
        warn(warnings, "noise", !strcmp(side, "base") ? ids : NULL, !strcmp(side, "run") ? ids : NULL, message);
    }
    cJSON_Delete(ids);
}

/* What differs between the first records of the two sides, and the runs that missed their
 * noise target. */
static void compare_warnings(cJSON *warnings, const compare_group *base, const compare_group *run)
{
    const cJSON *a = base->records[0], *b = run->records[0];
    const cJSON *la = member(a, "library"), *lb = member(b, "library");

    warn_problem(warnings, a, b);
    warn_if_differs(warnings, a, b, "commit", "build.commit", "built from different commits");
    warn_if_differs(warnings, a, b, "commit", "build.dirty", "one build had local changes (build.dirty)");
    warn_if_differs(warnings, a, b, "node", "node", "made on different nodes");
    warn_if_differs(warnings, a, b, "gpu", "device.name", "made on different devices");
    warn_if_differs(warnings, a, b, "driver", "device.driver", "made under different drivers");
    warn_if_differs(warnings, a, b, "cuda", "device.cuda_runtime", "made with different CUDA runtimes");
    if (la && lb) warn_if_differs(warnings, a, b, "library", "library.version", "made with different cuDNN versions");
    warn_clocks(warnings, a, b);
    warn_noise(warnings, "base", base);
    warn_noise(warnings, "run", run);
}

/* ------------------------------------------------------------------ the answer -- */

/* Load spec's runs (a list, or a study's variant) into g. 0, or -1 with e. */
static int compare_load_group(const compare_spec *spec, const cJSON *study, compare_group *g, api_error *e)
{
    int i;

    if (spec->study) return compare_study_variant(spec->name, study, spec->variant, g, e);
    for (i = 0; i < spec->n_ids; i++) {
        if (compare_load_run(spec->name, spec->ids[i], &g->records[g->n], e) != 0) return -1;
        g->n++;
    }
    return 0;
}

cJSON *compare_answer(const cJSON *query, api_error *e)
{
    const cJSON *item, *base_text = member(query, "base"), *run_text = member(query, "run");
    double confidence = COMPARE_DEFAULT_CONFIDENCE, noise_floor = COMPARE_DEFAULT_NOISE_FLOOR;
    compare_spec base, run;
    compare_group *gb = NULL, *gr = NULL;
    cJSON *sb = NULL, *sr = NULL, *out = NULL, *rows, *warnings;

    cJSON_ArrayForEach(item, query) {
        if (strcmp(item->string, "base") && strcmp(item->string, "run") && strcmp(item->string, "confidence") &&
            strcmp(item->string, "noise_floor")) {
            api_fail(e, 400, "unknown_parameter", item->string,
                     "unknown parameter '%.40s': compare takes base, run, confidence and noise_floor", item->string);
            return NULL;
        }
    }
    if (!base_text || !run_text) {
        api_fail(e, 400, "missing_parameter", base_text ? "run" : "base", "compare needs base and run (run ids or study:ID)");
        return NULL;
    }
    if (compare_parse_spec("base", base_text->valuestring, &base, e) != 0 ||
        compare_parse_spec("run", run_text->valuestring, &run, e) != 0 ||
        compare_number(query, "confidence", 0.5, 0.999, &confidence, e) != 0 ||
        compare_number(query, "noise_floor", 0, 1, &noise_floor, e) != 0)
        return NULL;
    if ((base.study && !base.variant[0]) != (run.study && !run.variant[0])) {
        api_fail(e, 400, "bad_value", base.study && !base.variant[0] ? "base" : "run",
                 "a whole study compares with a whole study only (or name a variant: study:ID:VARIANT)");
        return NULL;
    }
    if ((base.study && !(sb = compare_load_study("base", base.study, e))) ||
        (run.study && !(sr = compare_load_study("run", run.study, e))))
        goto out;
    gb = calloc(1, sizeof *gb);
    gr = calloc(1, sizeof *gr);
    out = cJSON_CreateObject();
    if (!gb || !gr || !out) {
        api_fail(e, 500, "internal", "", "out of memory");
        goto fail;
    }
    cJSON_AddStringToObject(out, "base", base_text->valuestring);
    cJSON_AddStringToObject(out, "run", run_text->valuestring);
    cJSON_AddNumberToObject(out, "confidence", confidence);
    cJSON_AddNumberToObject(out, "noise_floor", noise_floor);
    rows = cJSON_AddArrayToObject(out, "rows");
    warnings = cJSON_AddArrayToObject(out, "warnings");

    if (base.study && !base.variant[0]) { /* study against study: every variant both have */
        const cJSON *v;
        int warned = 0;
        cJSON_ArrayForEach(v, member(sb, "variants")) {
            const cJSON *w;
            int shared = 0;
            cJSON *row;
            cJSON_ArrayForEach(w, member(sr, "variants")) shared |= !strcmp(w->valuestring, v->valuestring);
            if (!shared) continue;
            group_free(gb);
            group_free(gr);
            snprintf(base.variant, sizeof base.variant, "%s", v->valuestring);
            snprintf(run.variant, sizeof run.variant, "%s", v->valuestring);
            if (compare_load_group(&base, sb, gb, e) != 0 || compare_load_group(&run, sr, gr, e) != 0 ||
                !(row = compare_row(v->valuestring, gb, gr, confidence, noise_floor, e)))
                goto fail;
            cJSON_AddItemToArray(rows, row);
            if (!warned++) compare_warnings(warnings, gb, gr);
        }
        if (cJSON_GetArraySize(rows) == 0) {
            api_fail(e, 409, "not_done", "run", "the two studies share no variant");
            goto fail;
        }
    } else {
        cJSON *row;
        if (compare_load_group(&base, sb, gb, e) != 0 || compare_load_group(&run, sr, gr, e) != 0 ||
            !(row = compare_row(NULL, gb, gr, confidence, noise_floor, e)))
            goto fail;
        cJSON_AddItemToArray(rows, row);
        compare_warnings(warnings, gb, gr);
    }
    goto out;
fail:
    cJSON_Delete(out);
    out = NULL;
out:
    if (gb) group_free(gb);
    if (gr) group_free(gr);
    free(gb);
    free(gr);
    cJSON_Delete(sb);
    cJSON_Delete(sr);
    return out;
}
