/* study_table.c — what a study's table needs from each run's final record, and the study as
 * the API answers it: one row per variant over its rounds (docs/api.md, Studies).
 */
#include "server/front/studies/study.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "server/front/store/store.h"
#include "server/front/studies/study_stats.h"

/* A study's single-run sides take this run-to-run noise (docs/api.md, Compare). */
#define STUDY_NOISE_FLOOR 0.01
#define STUDY_CONFIDENCE 0.95

/* ------------------------------------------------------------ from a run's record -- */

static const cJSON *member(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static double number_or(const cJSON *o, const char *key, double otherwise)
{
    const cJSON *v = member(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : otherwise;
}

static void copy_string(char *out, size_t len, const cJSON *o, const char *key)
{
    const cJSON *v = member(o, key);
    snprintf(out, len, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* The kernel table's rows with the most GPU time, up to STUDY_TOP_KERNELS: {name, calls,
 * gpu_us, share} (share of the table's whole GPU time). NULL without a table. */
static cJSON *study_top_kernels(const cJSON *kernels)
{
    const cJSON *table = member(kernels, "table"), *row;
    const cJSON *best[STUDY_TOP_KERNELS];
    double total = 0;
    int n = 0, i, j;
    cJSON *out;

    if (!cJSON_IsArray(table)) return NULL;
    cJSON_ArrayForEach(row, table) {
        double us = number_or(row, "gpu_us", 0);
        total += us;
        /* insertion into the few best, largest first */
        for (i = 0; i < n && number_or(best[i], "gpu_us", 0) >= us; i++) continue;
        if (i == STUDY_TOP_KERNELS) continue;
        if (n < STUDY_TOP_KERNELS) n++;
        for (j = n - 1; j > i; j--) best[j] = best[j - 1];
        best[i] = row;
    }
    out = cJSON_CreateArray();
    for (i = 0; out && i < n; i++) {
        cJSON *k = cJSON_CreateObject();
        double us = number_or(best[i], "gpu_us", 0);
        cJSON_AddItemToObject(k, "name", cJSON_Duplicate(member(best[i], "name"), 0));
        cJSON_AddNumberToObject(k, "calls", number_or(best[i], "calls", 0));
        cJSON_AddNumberToObject(k, "gpu_us", us);
        cJSON_AddNumberToObject(k, "share", total > 0 ? us / total : 0);
        cJSON_AddItemToArray(out, k);
    }
    return out;
}

void study_take_record(study *s, int k, const cJSON *record, const char *code, const char *message)
{
    study_run *run = &s->runs[k];
    const cJSON *timing, *kernels, *perf, *energy, *verify, *error, *device, *status, *params;

    run->ended = 1;
    run->median_us = run->p10_us = run->p90_us = run->host_us = run->rse = run->target_noise = -1;
    run->tflops = run->fraction_of_peak = run->joules_per_forward = -1;
    run->kernels = run->memops = -1;
    run->iters = 0;
    if (!record) { /* refused before it was stored */
        run->status = RUN_FAILED;
        snprintf(run->error_code, sizeof run->error_code, "%s", code ? code : "refused");
        snprintf(run->error_message, sizeof run->error_message, "%s", message ? message : "");
        return;
    }
    status = member(record, "status");
    run->status = cJSON_IsString(status) && !strcmp(status->valuestring, "done")        ? RUN_DONE
                  : cJSON_IsString(status) && !strcmp(status->valuestring, "cancelled") ? RUN_CANCELLED
                                                                                        : RUN_FAILED;
    run->id = (long long)number_or(record, "id", (double)run->id);
    timing = member(record, "timing");
    run->median_us = number_or(timing, "median_us", -1);
    run->p10_us = number_or(timing, "p10_us", NAN);
    run->p90_us = number_or(timing, "p90_us", NAN);
    run->host_us = number_or(timing, "host_us", -1);
    run->rse = number_or(timing, "rse", -1);
    run->iters = (long long)number_or(timing, "iters", 0);
    run->stopped_on_limit = cJSON_IsString(member(timing, "stop_reason")) &&
                            strcmp(member(timing, "stop_reason")->valuestring, "iters") &&
                            strcmp(member(timing, "stop_reason")->valuestring, "rse");
    params = member(record, "params");
    run->target_noise = number_or(params, "target_noise", -1);
    kernels = member(record, "kernels");
    if (cJSON_IsObject(kernels)) {
        run->kernels = (int)number_or(kernels, "per_forward", -1);
        run->memops = (int)number_or(kernels, "memops_per_forward", -1);
        cJSON_Delete(run->top_kernels);
        run->top_kernels = study_top_kernels(kernels);
    }
    perf = member(record, "perf");
    run->tflops = number_or(perf, "tflops", -1);
    run->fraction_of_peak = number_or(member(perf, "fraction_of_peak"), "compute", -1);
    energy = member(record, "energy");
    run->joules_per_forward = number_or(energy, "joules_per_forward", -1);
    copy_string(run->energy_why, sizeof run->energy_why, energy, "why");
    verify = member(record, "verify");
    run->verified = cJSON_IsObject(verify);
    if (run->verified) {
        run->verify_pass = cJSON_IsTrue(member(verify, "pass"));
        run->rel_l2_err = number_or(verify, "rel_l2_err", NAN);
        run->max_abs_err = number_or(verify, "max_abs_err", NAN);
        copy_string(run->verify_reference, sizeof run->verify_reference, verify, "reference");
    }
    copy_string(run->fingerprint, sizeof run->fingerprint, member(record, "output"), "fingerprint");
    copy_string(run->impl_used, sizeof run->impl_used, record, "impl_used");
    device = member(record, "device");
    copy_string(run->device, sizeof run->device, device, "id");
    copy_string(run->gpu, sizeof run->gpu, device, "name");
    error = member(record, "error");
    copy_string(run->error_code, sizeof run->error_code, error, "code");
    copy_string(run->error_message, sizeof run->error_message, error, "message");
}

/* ---------------------------------------------------------------------- the rows -- */

/* A number, or null when it is not one (< 0 for the quantities that cannot be negative). */
static void add_number(cJSON *o, const char *key, double x)
{
    if (isfinite(x) && x >= 0)
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_string_or_null(cJSON *o, const char *key, const char *text)
{
    if (text && text[0])
        cJSON_AddStringToObject(o, key, text);
    else
        cJSON_AddNullToObject(o, key);
}

/* The median of the n values (n ≥ 1) at x, sorting them. */
static double median_of(double *x, int n)
{
    stats_sort(x, n);
    return stats_percentile(x, n, 0.5);
}

/* The median over variant v's done runs of the field at `offset` of study_run (a double),
 * those with a value (≥ 0); -1 when none has one. */
static double study_median_field(const study *s, int v, size_t offset)
{
    double x[STUDY_MAX_ROUNDS];
    int k, n = 0;

    for (k = 0; k < s->n_runs; k++) {
        const study_run *run = &s->runs[k];
        double value = *(const double *)((const char *)run + offset);
        if (run->variant == v && run->status == RUN_DONE && value >= 0) x[n++] = value;
    }
    return n ? median_of(x, n) : -1;
}

/* The comparison side of variant v: its done runs' medians (several: measured run-to-run
 * spread; one: the run's own samples and the noise floor). 0, or -1 when it has none. */
static int study_side(const study *s, int v, stats_side *side)
{
    double medians[STUDY_MAX_ROUNDS];
    const study_run *only = NULL;
    int k, n = 0;

    for (k = 0; k < s->n_runs; k++)
        if (s->runs[k].variant == v && s->runs[k].status == RUN_DONE && s->runs[k].median_us > 0) {
            medians[n++] = s->runs[k].median_us;
            only = &s->runs[k];
        }
    if (n >= 2) return stats_side_of_runs(medians, n, side);
    if (n == 1)
        return stats_side_of_run(only->median_us, only->p10_us, only->p90_us, only->iters, STUDY_NOISE_FLOOR, side);
    return -1;
}

static cJSON *study_vs_baseline(const study *s, int v)
{
    stats_side base, run;
    stats_ratio ratio;
    cJSON *o;

    if (study_side(s, v, &run) != 0 || study_side(s, s->baseline, &base) != 0) return cJSON_CreateNull();
    o = cJSON_CreateObject();
    if (v == s->baseline) {
        cJSON_AddNumberToObject(o, "ratio", 1);
        cJSON_AddNullToObject(o, "low");
        cJSON_AddNullToObject(o, "high");
        cJSON_AddFalseToObject(o, "significant");
        return o;
    }
    stats_compare(&base, &run, STUDY_CONFIDENCE, &ratio);
    cJSON_AddNumberToObject(o, "ratio", ratio.ratio);
    add_number(o, "low", ratio.low);
    add_number(o, "high", ratio.high);
    cJSON_AddBoolToObject(o, "significant", ratio.significant);
    return o;
}

/* The last done run of variant v, or NULL. */
static const study_run *study_last_done(const study *s, int v)
{
    const study_run *last = NULL;
    int k;

    for (k = 0; k < s->n_runs; k++)
        if (s->runs[k].variant == v && s->runs[k].status == RUN_DONE) last = &s->runs[k];
    return last;
}

/* How variant v's output agrees: the worst round's verify, its fingerprint, whether every
 * round's was the same, and the variants whose output was the same bytes. */
static void study_add_agreement(cJSON *row, const study *s, int v, const study_run *last)
{
    const study_run *worst = NULL;
    cJSON *same;
    int k, deterministic = 1, done = 0, w;

    for (k = 0; k < s->n_runs; k++) {
        const study_run *run = &s->runs[k];
        if (run->variant != v || run->status != RUN_DONE) continue;
        done++;
        if (last && strcmp(run->fingerprint, last->fingerprint)) deterministic = 0;
        if (!run->verified) continue;
        if (!worst || (worst->verify_pass && !run->verify_pass) ||
            (worst->verify_pass == run->verify_pass && run->rel_l2_err > worst->rel_l2_err))
            worst = run;
    }
    if (worst) {
        cJSON *verify = cJSON_AddObjectToObject(row, "verify");
        cJSON_AddBoolToObject(verify, "pass", worst->verify_pass);
        add_number(verify, "rel_l2_err", worst->rel_l2_err);
        add_number(verify, "max_abs_err", worst->max_abs_err);
        add_string_or_null(verify, "reference", worst->verify_reference);
    } else {
        cJSON_AddNullToObject(row, "verify");
    }
    add_string_or_null(row, "fingerprint", last ? last->fingerprint : NULL);
    if (done >= 2)
        cJSON_AddBoolToObject(row, "deterministic", deterministic);
    else
        cJSON_AddNullToObject(row, "deterministic");
    same = cJSON_AddArrayToObject(row, "same_output_as");
    for (w = 0; last && last->fingerprint[0] && w < s->n_variants; w++) {
        const study_run *other = w == v ? NULL : study_last_done(s, w);
        if (other && !strcmp(other->fingerprint, last->fingerprint))
            cJSON_AddItemToArray(same, cJSON_CreateString(s->variants[w]));
    }
}

/* Variant v's state: failed (a run of it failed), done (every round done), cancelled (the
 * study ended short of it), queued (none started) or running. */
static const char *study_row_status(const study *s, int v)
{
    int k, ended = 0, done = 0, failed = 0;

    for (k = 0; k < s->n_runs; k++) {
        if (s->runs[k].variant != v) continue;
        ended += s->runs[k].ended;
        done += s->runs[k].ended && s->runs[k].status == RUN_DONE;
        failed += s->runs[k].ended && s->runs[k].status == RUN_FAILED;
    }
    if (failed) return "failed";
    if (done == s->rounds) return "done";
    if (s->status == STUDY_CANCELLED || s->status == STUDY_FAILED || s->status == STUDY_DONE) return "cancelled";
    return ended || s->status == STUDY_RUNNING ? "running" : "queued";
}

static cJSON *study_row(const study *s, int v)
{
    const char *colon = strchr(s->variants[v], ':');
    const study_run *last = study_last_done(s, v), *failed = NULL;
    double medians[STUDY_MAX_ROUNDS];
    cJSON *row = cJSON_CreateObject(), *runs;
    char backend[STUDY_NAME_MAX];
    int k, n = 0, noise_missed = 0;

    if (!row) return NULL;
    snprintf(backend, sizeof backend, "%s", s->variants[v]);
    if (colon) backend[colon - s->variants[v]] = '\0';
    cJSON_AddStringToObject(row, "variant", s->variants[v]);
    cJSON_AddStringToObject(row, "backend", backend);
    add_string_or_null(row, "impl", colon ? colon + 1 : NULL);
    add_string_or_null(row, "impl_used", last ? last->impl_used : NULL);
    cJSON_AddStringToObject(row, "device", s->requests[v].device);
    add_string_or_null(row, "gpu", last ? last->gpu : NULL);
    cJSON_AddStringToObject(row, "status", study_row_status(s, v));
    runs = cJSON_AddArrayToObject(row, "runs");
    for (k = 0; k < s->n_runs; k++) {
        const study_run *run = &s->runs[k];
        if (run->variant != v) continue;
        if (run->id > 0) cJSON_AddItemToArray(runs, cJSON_CreateNumber((double)run->id));
        if (run->ended && run->status == RUN_FAILED && !failed) failed = run;
        if (run->status != RUN_DONE || !(run->median_us > 0)) continue;
        medians[n++] = run->median_us;
        if (run->stopped_on_limit && run->rse >= 0 && run->target_noise > 0 && run->rse > run->target_noise)
            noise_missed++;
    }
    cJSON_AddNumberToObject(row, "rounds_done", n);
    stats_sort(medians, n);
    add_number(row, "median_us", n ? stats_percentile(medians, n, 0.5) : -1);
    add_number(row, "p10_us", n ? stats_percentile(medians, n, 0.1) : -1);
    add_number(row, "p90_us", n ? stats_percentile(medians, n, 0.9) : -1);
    add_number(row, "min_us", n ? medians[0] : -1);
    add_number(row, "max_us", n ? medians[n - 1] : -1);
    cJSON_AddItemToObject(row, "vs_baseline", study_vs_baseline(s, v));
    add_number(row, "host_us", study_median_field(s, v, offsetof(study_run, host_us)));
    if (last && last->kernels >= 0) {
        cJSON_AddNumberToObject(row, "kernels_per_forward", last->kernels);
        cJSON_AddNumberToObject(row, "memops_per_forward", last->memops);
        cJSON_AddItemToObject(row, "top_kernels",
                              last->top_kernels ? cJSON_Duplicate(last->top_kernels, 1) : cJSON_CreateArray());
    } else {
        cJSON_AddNullToObject(row, "kernels_per_forward");
        cJSON_AddNullToObject(row, "memops_per_forward");
        cJSON_AddNullToObject(row, "top_kernels");
    }
    add_number(row, "tflops", study_median_field(s, v, offsetof(study_run, tflops)));
    add_number(row, "fraction_of_peak", study_median_field(s, v, offsetof(study_run, fraction_of_peak)));
    add_number(row, "joules_per_forward", study_median_field(s, v, offsetof(study_run, joules_per_forward)));
    add_string_or_null(row, "energy_why",
                       study_median_field(s, v, offsetof(study_run, joules_per_forward)) < 0 && last ? last->energy_why
                                                                                                      : NULL);
    study_add_agreement(row, s, v, last);
    cJSON_AddNumberToObject(row, "noise_missed", noise_missed);
    if (failed) {
        cJSON *error = cJSON_AddObjectToObject(row, "error");
        cJSON_AddStringToObject(error, "code", failed->error_code);
        cJSON_AddStringToObject(error, "message", failed->error_message);
        if (failed->id > 0)
            cJSON_AddNumberToObject(error, "run", (double)failed->id);
        else
            cJSON_AddNullToObject(error, "run");
    } else {
        cJSON_AddNullToObject(row, "error");
    }
    return row;
}

/* ---------------------------------------------------------------------- the study -- */

/* The runs' shared parameters: the first variant's "params" without what varies. */
static cJSON *study_params_json(const study *s)
{
    cJSON *params = run_request_to_json(&s->requests[0]);

    cJSON_DeleteItemFromObjectCaseSensitive(params, "backend");
    cJSON_DeleteItemFromObjectCaseSensitive(params, "impl");
    cJSON_DeleteItemFromObjectCaseSensitive(params, "device");
    cJSON_DeleteItemFromObjectCaseSensitive(params, "tags");
    return params;
}

static cJSON *study_tags_json(const study *s)
{
    cJSON *tags = cJSON_CreateArray();
    char joined[RUN_TAGS_TEXT], *tok, *save = NULL;

    snprintf(joined, sizeof joined, "%s", s->requests[0].tags);
    for (tok = strtok_r(joined, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        cJSON_AddItemToArray(tags, cJSON_CreateString(tok));
    return tags;
}

cJSON *study_to_json(const study *s)
{
    cJSON *o = cJSON_CreateObject(), *list, *progress, *interval;
    int k, v, done = 0, failed = 0, cancelled = 0;

    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "id", (double)s->id);
    cJSON_AddStringToObject(o, "status", study_status_name(s->status));
    cJSON_AddStringToObject(o, "created", s->created);
    add_string_or_null(o, "started", s->started);
    add_string_or_null(o, "finished", s->finished);
    cJSON_AddStringToObject(o, "node", store_node());
    list = cJSON_AddArrayToObject(o, "variants");
    for (v = 0; v < s->n_variants; v++) cJSON_AddItemToArray(list, cJSON_CreateString(s->variants[v]));
    cJSON_AddStringToObject(o, "baseline", s->variants[s->baseline]);
    cJSON_AddNumberToObject(o, "rounds", s->rounds);
    cJSON_AddItemToObject(o, "tags", study_tags_json(s));
    cJSON_AddItemToObject(o, "params", study_params_json(s));
    cJSON_AddItemToObject(o, "build", build_info_json());
    list = cJSON_CreateArray();
    for (k = 0; k < s->n_runs; k++) {
        const study_run *run = &s->runs[k];
        cJSON *entry = cJSON_CreateObject();
        done += run->ended && run->status == RUN_DONE;
        failed += run->ended && run->status == RUN_FAILED;
        cancelled += run->ended && run->status == RUN_CANCELLED;
        if (run->id > 0)
            cJSON_AddNumberToObject(entry, "id", (double)run->id);
        else
            cJSON_AddNullToObject(entry, "id");
        cJSON_AddStringToObject(entry, "variant", s->variants[run->variant]);
        cJSON_AddNumberToObject(entry, "round", run->round);
        cJSON_AddStringToObject(entry, "status",
                                run->ended || run->id > 0 ? (run->ended && !run->id ? "refused" : run_status_name(run->status))
                                                          : "pending");
        add_number(entry, "median_us", run->ended && run->status == RUN_DONE ? run->median_us : -1);
        cJSON_AddItemToArray(list, entry);
    }
    progress = cJSON_AddObjectToObject(o, "progress");
    cJSON_AddNumberToObject(progress, "done", done);
    cJSON_AddNumberToObject(progress, "failed", failed);
    cJSON_AddNumberToObject(progress, "cancelled", cancelled);
    cJSON_AddNumberToObject(progress, "total", s->n_runs);
    cJSON_AddItemToObject(o, "runs", list);
    interval = cJSON_AddObjectToObject(o, "interval");
    cJSON_AddNumberToObject(interval, "confidence", STUDY_CONFIDENCE);
    cJSON_AddStringToObject(interval, "method", "welch_log");
    cJSON_AddNumberToObject(interval, "noise_floor", STUDY_NOISE_FLOOR);
    list = cJSON_AddArrayToObject(o, "table");
    for (v = 0; v < s->n_variants; v++) cJSON_AddItemToArray(list, study_row(s, v));
    if (s->error_code[0]) {
        cJSON *error = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(error, "code", s->error_code);
        cJSON_AddStringToObject(error, "message", s->error_message);
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    if (s->status == STUDY_QUEUED && s->queue_position > 0)
        cJSON_AddNumberToObject(o, "queue_position", s->queue_position);
    return o;
}

/* ------------------------------------------------------------------ for a terminal -- */

/* "%.4g" of x, or "-" when it is not a value. */
static const char *cell(char *buf, size_t len, double x)
{
    if (isfinite(x) && x >= 0)
        snprintf(buf, len, "%.4g", x);
    else
        snprintf(buf, len, "-");
    return buf;
}

char *study_table_text(const study *s)
{
    cJSON *json = study_to_json(s), *row;
    size_t cap = 512 + (size_t)s->n_variants * 256, len = 0;
    char *out = malloc(cap);

    if (!json || !out) {
        cJSON_Delete(json);
        free(out);
        return NULL;
    }
    len += (size_t)snprintf(out + len, cap - len, "%-20s %10s %21s %26s %7s %9s %9s %s\n", "variant", "median_us",
                            "p10-p90_us", "vs baseline [95%]", "kernels", "host_us", "tflops", "verify");
    cJSON_ArrayForEach(row, member(json, "table")) {
        const cJSON *ratio = member(row, "vs_baseline"), *verify = member(row, "verify");
        char a[24], b[24], c[24], d[24], e[24], f[24], g[24], h[24], spread[56], vs[96], verdict[48];
        snprintf(spread, sizeof spread, "%s-%s", cell(a, sizeof a, number_or(row, "p10_us", -1)),
                 cell(b, sizeof b, number_or(row, "p90_us", -1)));
        if (cJSON_IsObject(ratio) && !cJSON_IsNumber(member(ratio, "low")) && number_or(ratio, "ratio", -1) == 1)
            snprintf(vs, sizeof vs, "1 (baseline)");
        else if (cJSON_IsObject(ratio))
            snprintf(vs, sizeof vs, "%s [%s-%s]%s", cell(c, sizeof c, number_or(ratio, "ratio", -1)),
                     cell(d, sizeof d, number_or(ratio, "low", -1)), cell(e, sizeof e, number_or(ratio, "high", -1)),
                     cJSON_IsTrue(member(ratio, "significant")) ? " *" : "");
        else
            snprintf(vs, sizeof vs, "-");
        if (cJSON_IsObject(verify))
            snprintf(verdict, sizeof verdict, "%s %s", cJSON_IsTrue(member(verify, "pass")) ? "pass" : "FAIL",
                     cell(a, sizeof a, number_or(verify, "rel_l2_err", -1)));
        else
            snprintf(verdict, sizeof verdict, "%s", cJSON_IsObject(member(row, "error")) ? "failed" : "-");
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%-20s %10s %21s %26s %7s %9s %9s %s\n",
                                    member(row, "variant")->valuestring, cell(f, sizeof f, number_or(row, "median_us", -1)),
                                    spread, vs, cell(g, sizeof g, number_or(row, "kernels_per_forward", -1)),
                                    cell(h, sizeof h, number_or(row, "host_us", -1)),
                                    cell(b, sizeof b, number_or(row, "tflops", -1)), verdict);
    }
    cJSON_Delete(json);
    return out;
}
