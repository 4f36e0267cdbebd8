/* batch_plan.c — read, check and expand a plan file (batch_plan.h, docs/plan.md).
 *
 * Strict on purpose: a CI job that misspells "heads" should stop before it spends an hour of
 * GPU time on the wrong grid, so the file is read as request bodies are (json_text_parse: no
 * key twice, nothing after the JSON, no \u0000), every unknown key is an error, and every run
 * of the grid is parsed (run_request_parse) before the first one starts.
 */
#include "server/front/batch/batch_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_text.h"
#include "server/front/studies/study.h" /* a study's limits */

#define PLAN_MAX_BYTES (4 << 20) /* a plan is a few lines; anything larger is the wrong file */

/* What an axis's values are. */
typedef enum plan_axis_kind {
    AXIS_INTEGERS,
    AXIS_STRINGS,
    AXIS_BOOLEANS,
    AXIS_PAIRS /* seq_q_kv: [seq_q, seq_kv] pairs of integers */
} plan_axis_kind;

/* The grid's axes in expansion order after backends: the plan key is the run parameter
 * (seq_q_kv sets seq_q and seq_kv). Old plans' axes keep their order among themselves. */
static const struct {
    const char *key;
    plan_axis_kind kind;
} plan_axes[] = {
    {"model", AXIS_STRINGS},  {"batch", AXIS_INTEGERS},    {"heads", AXIS_INTEGERS},  {"kv_heads", AXIS_INTEGERS},
    {"seq", AXIS_INTEGERS},   {"seq_q_kv", AXIS_PAIRS},    {"head_dim", AXIS_INTEGERS}, {"dtype", AXIS_STRINGS},
    {"mask", AXIS_STRINGS},   {"window", AXIS_INTEGERS},   {"page_size", AXIS_INTEGERS}, {"impl", AXIS_STRINGS},
    {"cache", AXIS_STRINGS},  {"graph", AXIS_BOOLEANS},
};
#define PLAN_AXIS_COUNT (sizeof plan_axes / sizeof plan_axes[0])

/* Run parameters a plan cannot hold: resident tensors belong to one server's memory, and
 * a batch waits for every run anyway. */
static const char *const plan_refused_params[] = {"q", "k", "v", "block_table", "keep_output", "async"};

/* The whole file, NUL-terminated and malloc'd (caller frees); NULL with err. */
static char *plan_read_file(const char *path, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *text;
    size_t n;

    if (!f) {
        snprintf(err, err_len, "cannot read plan %s: %s", path, strerror(errno));
        return NULL;
    }
    text = malloc(PLAN_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        snprintf(err, err_len, "out of memory reading plan %s", path);
        return NULL;
    }
    n = fread(text, 1, PLAN_MAX_BYTES + 1, f);
    if (ferror(f) || n > PLAN_MAX_BYTES) {
        snprintf(err, err_len, "plan %s: %s", path, ferror(f) ? strerror(errno) : "larger than 4 MiB");
        fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[n] = '\0';
    *len = n;
    return text;
}

/* 1-based line of position at in text, for "not JSON" messages. */
static int plan_line_of(const char *text, const char *at)
{
    int line = 1;
    for (; text < at && *text; text++)
        if (*text == '\n') line++;
    return line;
}

/* An integer as a plan spells one: a JSON number written without a fraction, an exponent or
 * a leading zero (json_text_parse kept its text), as a run parameter must be. */
static int plan_is_integer(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuestring && json_text_is_integer(v->valuestring, strlen(v->valuestring)) &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* One value of an axis of kind k. */
static int plan_axis_value_ok(const cJSON *v, plan_axis_kind k)
{
    switch (k) {
    case AXIS_INTEGERS: return plan_is_integer(v);
    case AXIS_STRINGS: return cJSON_IsString(v) && v->valuestring[0];
    case AXIS_BOOLEANS: return cJSON_IsBool(v);
    case AXIS_PAIRS:
        return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && plan_is_integer(cJSON_GetArrayItem(v, 0)) &&
               plan_is_integer(cJSON_GetArrayItem(v, 1));
    }
    return 0;
}

static const char *plan_axis_kind_name(plan_axis_kind k)
{
    switch (k) {
    case AXIS_INTEGERS: return "integers";
    case AXIS_STRINGS: return "non-empty strings";
    case AXIS_BOOLEANS: return "booleans";
    case AXIS_PAIRS: return "[seq_q, seq_kv] pairs of integers";
    }
    return "?";
}

/* Check that axis `key` of the plan, when present, is a non-empty array of values of kind k.
 * 0, or -1 with err. */
static int plan_check_axis(const char *path, const cJSON *plan, const char *key, plan_axis_kind k, char *err,
                           size_t err_len)
{
    const cJSON *axis = cJSON_GetObjectItemCaseSensitive(plan, key), *v;
    int i = 0;

    if (!axis) return 0;
    if (!cJSON_IsArray(axis) || cJSON_GetArraySize(axis) == 0) {
        snprintf(err, err_len, "plan %s: \"%s\" must be a non-empty array of %s", path, key, plan_axis_kind_name(k));
        return -1;
    }
    cJSON_ArrayForEach(v, axis) {
        if (!plan_axis_value_ok(v, k)) {
            char *shown = cJSON_PrintUnformatted(v);
            snprintf(err, err_len, "plan %s: \"%s\"[%d] is %.60s, not one of %s", path, key, i, shown ? shown : "?",
                     plan_axis_kind_name(k));
            free(shown);
            return -1;
        }
        i++;
    }
    return 0;
}

/* Whether run parameter name is set by an axis the plan has: its own, or seq_q_kv's. */
static int plan_axis_sets(const cJSON *plan, const char *name)
{
    size_t k;

    for (k = 0; k < PLAN_AXIS_COUNT; k++)
        if (!strcmp(name, plan_axes[k].key) && cJSON_GetObjectItemCaseSensitive(plan, plan_axes[k].key)) return 1;
    return cJSON_GetObjectItemCaseSensitive(plan, "seq_q_kv") &&
           (!strcmp(name, "seq") || !strcmp(name, "seq_q") || !strcmp(name, "seq_kv"));
}

/* "study": true, false or {"rounds": N, "baseline": "a backend of the plan"}. 0, or -1. */
static int plan_check_study(const char *path, const cJSON *plan, char *err, size_t err_len)
{
    const cJSON *study = cJSON_GetObjectItemCaseSensitive(plan, "study"), *item, *backends, *b;
    int found = 0;

    if (!study || cJSON_IsBool(study)) return 0;
    if (!cJSON_IsObject(study)) {
        snprintf(err, err_len, "plan %s: \"study\" is true, false or {\"rounds\": N, \"baseline\": \"BACKEND\"}", path);
        return -1;
    }
    cJSON_ArrayForEach(item, study) {
        if (strcmp(item->string, "rounds") && strcmp(item->string, "baseline")) {
            snprintf(err, err_len, "plan %s: study.%.40s: a study takes rounds and baseline", path, item->string);
            return -1;
        }
    }
    item = cJSON_GetObjectItemCaseSensitive(study, "rounds");
    if (item && !(plan_is_integer(item) && item->valuedouble >= 1 && item->valuedouble <= STUDY_MAX_ROUNDS)) {
        snprintf(err, err_len, "plan %s: study.rounds must be an integer from 1 to %d", path, STUDY_MAX_ROUNDS);
        return -1;
    }
    item = cJSON_GetObjectItemCaseSensitive(study, "baseline");
    if (!item) return 0;
    backends = cJSON_GetObjectItemCaseSensitive(plan, "backends");
    cJSON_ArrayForEach(b, backends) found |= cJSON_IsString(item) && !strcmp(b->valuestring, item->valuestring);
    if (!found) {
        snprintf(err, err_len, "plan %s: study.baseline must be one of the plan's backends", path);
        return -1;
    }
    return 0;
}

/* Check the plan's keys and the shape of each value. 0, or -1 with err. */
static int plan_check_keys(const char *path, const cJSON *plan, char *err, size_t err_len)
{
    const cJSON *item, *params, *repeat;
    size_t k;

    if (!cJSON_IsObject(plan)) {
        snprintf(err, err_len, "plan %s: must be a JSON object {\"backends\": [...], ...}", path);
        return -1;
    }
    cJSON_ArrayForEach(item, plan) {
        int known = !strcmp(item->string, "backends") || !strcmp(item->string, "params") ||
                    !strcmp(item->string, "repeat") || !strcmp(item->string, "description") ||
                    !strcmp(item->string, "study");
        for (k = 0; k < PLAN_AXIS_COUNT && !known; k++) known = !strcmp(item->string, plan_axes[k].key);
        if (!known) {
            char axes[256];
            size_t n = 0;
            for (k = 0; k < PLAN_AXIS_COUNT && n < sizeof axes; k++) /* the table's names: a new axis is named */
                n += (size_t)snprintf(axes + n, sizeof axes - n, "%s%s", k ? ", " : "", plan_axes[k].key);
            snprintf(err, err_len,
                     "plan %s: unknown key \"%.40s\"; a plan has backends, the axes (%s), params, repeat, study and "
                     "description (docs/plan.md)",
                     path, item->string, axes);
            return -1;
        }
    }
    if (!cJSON_GetObjectItemCaseSensitive(plan, "backends")) {
        snprintf(err, err_len, "plan %s: \"backends\" is missing (a non-empty array of backend names)", path);
        return -1;
    }
    if (plan_check_axis(path, plan, "backends", AXIS_STRINGS, err, err_len) != 0) return -1;
    for (k = 0; k < PLAN_AXIS_COUNT; k++)
        if (plan_check_axis(path, plan, plan_axes[k].key, plan_axes[k].kind, err, err_len) != 0) return -1;
    if (cJSON_GetObjectItemCaseSensitive(plan, "seq") && cJSON_GetObjectItemCaseSensitive(plan, "seq_q_kv")) {
        snprintf(err, err_len, "plan %s: \"seq\" and \"seq_q_kv\" are both axes of the lengths; give one", path);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(plan, "impl")) {
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(plan, "backends"))
            if (strchr(b->valuestring, ':')) {
                snprintf(err, err_len, "plan %s: backend %.40s names its impl, and impl is an axis; give it in one place",
                         path, b->valuestring);
                return -1;
            }
    }
    if (plan_check_study(path, plan, err, err_len) != 0) return -1;

    item = cJSON_GetObjectItemCaseSensitive(plan, "description");
    if (item && !cJSON_IsString(item)) {
        snprintf(err, err_len, "plan %s: \"description\" must be a string", path);
        return -1;
    }
    repeat = cJSON_GetObjectItemCaseSensitive(plan, "repeat");
    if (repeat && !(plan_is_integer(repeat) && repeat->valuedouble >= 1 && repeat->valuedouble <= BATCH_PLAN_MAX_REPEAT)) {
        snprintf(err, err_len, "plan %s: \"repeat\" must be an integer from 1 to %d", path, BATCH_PLAN_MAX_REPEAT);
        return -1;
    }

    params = cJSON_GetObjectItemCaseSensitive(plan, "params");
    if (!params) return 0;
    if (!cJSON_IsObject(params)) {
        snprintf(err, err_len, "plan %s: \"params\" must be an object of run parameters", path);
        return -1;
    }
    cJSON_ArrayForEach(item, params) {
        if (!strcmp(item->string, "backend")) {
            snprintf(err, err_len, "plan %s: params.backend: backends are an axis; list them in \"backends\"", path);
            return -1;
        }
        if (plan_axis_sets(plan, item->string)) {
            snprintf(err, err_len, "plan %s: params.%s: %s is also an axis of the plan; give it in one place", path,
                     item->string, item->string);
            return -1;
        }
        for (k = 0; k < sizeof plan_refused_params / sizeof plan_refused_params[0]; k++)
            if (!strcmp(item->string, plan_refused_params[k])) {
                snprintf(err, err_len,
                         "plan %s: params.%s: not in a plan (resident tensors, keep_output and async belong to a "
                         "server's session; a batch runs generated inputs and waits for each run)",
                         path, item->string);
                return -1;
            }
    }
    return 0;
}

/* Where the plan sets parameter field, for messages: "params.iters", "backends", "seq". */
static const char *plan_key_of_field(const cJSON *doc, const char *field, char *key, size_t key_len)
{
    if (!field[0]) return "params";
    if (!strcmp(field, "backend")) return "backends";
    if (cJSON_GetObjectItemCaseSensitive(doc, field)) return field; /* an axis */
    if (plan_axis_sets(doc, field)) return "seq_q_kv";
    snprintf(key, key_len, "params.%.40s", field);
    return key;
}

/* The run at one point of the grid: params, the backend and the axes' values at[k], parsed
 * as a POST /v1/runs body. 0, or -1 with err. */
static int plan_parse_point(const char *path, const cJSON *doc, const cJSON *backend, const cJSON *const *axes,
                            const int *at, int allow_faults, int index, run_request *r, char *err, size_t err_len)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(doc, "params");
    cJSON *body = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
    char key[64];
    api_error e;
    size_t k;
    int rc;

    if (!body) {
        snprintf(err, err_len, "out of memory expanding plan %s", path);
        return -1;
    }
    /* A study says how its variants' outputs agree with the reference unless told not to,
     * as POST /v1/studies does. */
    if (cJSON_GetObjectItemCaseSensitive(doc, "study") && !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(doc, "study")) &&
        !cJSON_GetObjectItemCaseSensitive(body, "verify"))
        cJSON_AddTrueToObject(body, "verify");
    {
        /* "flash:tma" names the backend and its impl, as a study's variant does */
        const char *colon = strchr(backend->valuestring, ':');
        char name[64];
        snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - backend->valuestring) : 63, backend->valuestring);
        cJSON_AddStringToObject(body, "backend", name);
        if (colon) cJSON_AddStringToObject(body, "impl", colon + 1);
    }
    for (k = 0; k < PLAN_AXIS_COUNT; k++) {
        const cJSON *value = axes[k] ? cJSON_GetArrayItem(axes[k], at[k]) : NULL;
        if (!value) continue;
        if (plan_axes[k].kind == AXIS_PAIRS) {
            cJSON_AddItemToObject(body, "seq_q", cJSON_Duplicate(cJSON_GetArrayItem(value, 0), 0));
            cJSON_AddItemToObject(body, "seq_kv", cJSON_Duplicate(cJSON_GetArrayItem(value, 1), 0));
        } else {
            cJSON_AddItemToObject(body, plan_axes[k].key, cJSON_Duplicate(value, 0));
        }
    }
    rc = run_request_parse(r, NULL, body, allow_faults, &e);
    if (rc == 0 && run_request_lengths_pending(r)) /* lengths in a resident tensor: one server's memory */
        rc = api_fail(&e, 400, "bad_value", r->seqlens_q.kind == RUN_SEQLENS_TENSOR ? "seqlens_q" : "seqlens_kv",
                      "lengths in a resident tensor are not in a plan (a batch runs generated inputs)");
    cJSON_Delete(body);
    if (rc != 0)
        snprintf(err, err_len, "plan %s: %s: %s (run %d of the grid, backend %s)", path,
                 plan_key_of_field(doc, e.field, key, sizeof key), e.message, index + 1, backend->valuestring);
    return rc;
}

/* Expand the checked plan into plan->runs: one pass of the grid, parsed, then copied for
 * each further repeat. 0, or -1 with err naming the run at fault. */
static int plan_expand(const char *path, const cJSON *doc, int allow_faults, batch_plan *plan, char *err,
                       size_t err_len)
{
    const cJSON *backends = cJSON_GetObjectItemCaseSensitive(doc, "backends"), *backend;
    const cJSON *repeat = cJSON_GetObjectItemCaseSensitive(doc, "repeat");
    const cJSON *axes[PLAN_AXIS_COUNT];
    int sizes[PLAN_AXIS_COUNT], at[PLAN_AXIS_COUNT];
    int repeats = repeat ? (int)repeat->valuedouble : 1, points = 1, per_grid, point, n = 0, r;
    size_t k;

    for (k = 0; k < PLAN_AXIS_COUNT; k++) {
        axes[k] = cJSON_GetObjectItemCaseSensitive(doc, plan_axes[k].key);
        sizes[k] = axes[k] ? cJSON_GetArraySize(axes[k]) : 1; /* an axis not given: one pass, unset */
        if ((long long)points * sizes[k] > BATCH_PLAN_MAX_RUNS) points = BATCH_PLAN_MAX_RUNS + 1;
        else points *= sizes[k];
    }
    if ((long long)points * cJSON_GetArraySize(backends) * repeats > BATCH_PLAN_MAX_RUNS) {
        snprintf(err, err_len, "plan %s: more than %d runs (backends x the axes x repeat)", path,
                 BATCH_PLAN_MAX_RUNS);
        return -1;
    }
    per_grid = points * cJSON_GetArraySize(backends);
    plan->backends = cJSON_GetArraySize(backends);
    plan->points = points;
    plan->repeats = repeats;
    plan->names = calloc((size_t)plan->backends, sizeof *plan->names);
    if (!plan->names) {
        snprintf(err, err_len, "out of memory expanding plan %s", path);
        return -1;
    }
    for (point = 0; point < plan->backends; point++)
        snprintf(plan->names[point], sizeof plan->names[point], "%s", cJSON_GetArrayItem(backends, point)->valuestring);
    plan->runs = calloc((size_t)per_grid * (size_t)repeats, sizeof *plan->runs);
    if (!plan->runs) {
        snprintf(err, err_len, "out of memory expanding plan %s", path);
        return -1;
    }
    cJSON_ArrayForEach(backend, backends) {
        memset(at, 0, sizeof at);
        for (point = 0; point < points; point++, n++) {
            if (plan_parse_point(path, doc, backend, axes, at, allow_faults, n, &plan->runs[n], err, err_len) != 0)
                return -1;
            for (k = PLAN_AXIS_COUNT; k-- > 0;) { /* the next point: the last axis turns fastest */
                if (++at[k] < sizes[k]) break;
                at[k] = 0;
            }
        }
    }
    for (r = 1; r < repeats; r++) memcpy(plan->runs + (size_t)r * per_grid, plan->runs, per_grid * sizeof *plan->runs);
    plan->count = per_grid * repeats;
    return 0;
}

/* The plan's "study", when it holds one: its rounds and baseline. 0, or -1 with err. */
static int plan_read_study(const char *path, const cJSON *doc, batch_plan *plan, char *err, size_t err_len)
{
    const cJSON *study = cJSON_GetObjectItemCaseSensitive(doc, "study");
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(study, "rounds");
    const cJSON *baseline = cJSON_GetObjectItemCaseSensitive(study, "baseline");
    int b, c;

    plan->study = study && !cJSON_IsFalse(study);
    if (!plan->study) return 0;
    if (plan->backends > STUDY_MAX_VARIANTS) {
        snprintf(err, err_len, "plan %s: a study has at most %d variants (backends)", path, STUDY_MAX_VARIANTS);
        return -1;
    }
    for (b = 0; b < plan->backends; b++)
        for (c = 0; c < b; c++)
            if (!strcmp(plan->names[b], plan->names[c])) {
                snprintf(err, err_len, "plan %s: backend %s is named twice (a study's variants are distinct)", path,
                         plan->names[b]);
                return -1;
            }
    plan->study_rounds = rounds ? (int)rounds->valuedouble : STUDY_DEFAULT_ROUNDS;
    if ((long long)plan->study_rounds * plan->backends > STUDY_MAX_RUNS) {
        snprintf(err, err_len, "plan %s: %d backends x %d rounds is more than a study's %d runs", path, plan->backends,
                 plan->study_rounds, STUDY_MAX_RUNS);
        return -1;
    }
    plan->study_baseline = 0;
    for (b = 0; baseline && b < plan->backends; b++)
        if (!strcmp(plan->names[b], baseline->valuestring)) plan->study_baseline = b;
    return 0;
}

int batch_plan_load(const char *path, int allow_faults, batch_plan *plan, char *err, size_t err_len)
{
    json_text_error te;
    cJSON *doc;
    size_t len = 0;
    char *text;
    int rc;

    memset(plan, 0, sizeof *plan);
    text = plan_read_file(path, &len, err, err_len);
    if (!text) return -1;
    doc = json_text_parse(text, len, &te);
    if (!doc) {
        int line = plan_line_of(text, text + te.offset);
        if (te.fault == JSON_TEXT_SYNTAX || te.fault == JSON_TEXT_NUL_BYTE)
            snprintf(err, err_len, "plan %s is not JSON (line %d, %s)", path, line, te.message);
        else if (te.fault == JSON_TEXT_DUPLICATE_KEY || te.fault == JSON_TEXT_NO_MEMORY)
            snprintf(err, err_len, "plan %s: %s", path, te.message);
        else if (te.member[0] && !te.in_name)
            snprintf(err, err_len, "plan %s, line %d, in \"%s\": %s", path, line, te.member, te.message);
        else
            snprintf(err, err_len, "plan %s, line %d: %s", path, line, te.message);
        free(text);
        return -1;
    }
    free(text);
    rc = plan_check_keys(path, doc, err, err_len);
    if (rc == 0) rc = plan_expand(path, doc, allow_faults, plan, err, err_len);
    if (rc == 0) rc = plan_read_study(path, doc, plan, err, err_len);
    cJSON_Delete(doc);
    if (rc != 0) batch_plan_free(plan);
    return rc;
}

void batch_plan_free(batch_plan *plan)
{
    free(plan->runs);
    free(plan->names);
    plan->runs = NULL;
    plan->names = NULL;
    plan->count = 0;
}

void batch_plan_label(const run_request *r, char *out, size_t len)
{
    const attn_problem *p = &r->problem;
    int n;

    n = snprintf(out, len, "%s batch=%" PRId64 " heads=%" PRId64, r->backend, p->batch, p->heads);
    if (n < 0 || (size_t)n >= len) return;
    if (p->seq_q == p->seq_kv)
        n += snprintf(out + n, len - (size_t)n, " seq=%" PRId64, p->seq_q);
    else
        n += snprintf(out + n, len - (size_t)n, " seq_q=%" PRId64 " seq_kv=%" PRId64, p->seq_q, p->seq_kv);
    if ((size_t)n >= len) return;
    n += snprintf(out + n, len - (size_t)n, " head_dim=%" PRId64 " dtype=%s", p->head_dim, attn_dtype_name(p->dtype));
    if ((size_t)n < len && p->ragged) /* the sequences' own lengths: seq_q and seq_kv above are their bounds */
        n += snprintf(out + n, len - (size_t)n, " ragged tokens=%" PRId64 "/%" PRId64, p->total_q, p->total_kv);
    if ((size_t)n < len && p->page_size > 0)
        n += snprintf(out + n, len - (size_t)n, " page_size=%" PRId64, p->page_size);
    /* What the newer axes set, where it is not the default: points that differ only there
     * must not share a label (batch.c's summary groups by it). */
    if ((size_t)n < len && r->model[0]) n += snprintf(out + n, len - (size_t)n, " model=%s", r->model);
    if ((size_t)n < len && p->kv_heads > 0 && p->kv_heads != p->heads)
        n += snprintf(out + n, len - (size_t)n, " kv_heads=%" PRId64, p->kv_heads);
    if ((size_t)n < len && p->head_dim_v > 0 && p->head_dim_v != p->head_dim)
        n += snprintf(out + n, len - (size_t)n, " head_dim_v=%" PRId64, p->head_dim_v);
    if ((size_t)n < len && p->mask != ATTN_MASK_CAUSAL)
        n += snprintf(out + n, len - (size_t)n, " mask=%s", attn_mask_name(p->mask));
    if ((size_t)n < len && p->window_keys > 0)
        n += snprintf(out + n, len - (size_t)n, " window=%" PRId64, p->window_keys - 1);
    if ((size_t)n < len && r->impl[0]) n += snprintf(out + n, len - (size_t)n, " impl=%s", r->impl);
    if ((size_t)n < len && r->cache_cold) n += snprintf(out + n, len - (size_t)n, " cache=cold");
    if ((size_t)n < len && r->graph) snprintf(out + n, len - (size_t)n, " graph=true");
}
