/* history_csv.c — run records as CSV (history_csv.h).
 *
 * The columns are one table: a name and where its value is in the record (a path of members,
 * and a second path where the record leaves the first out: kv_heads absent means heads; or a
 * function of its params, for a value no member holds: ragged).
 * Numbers are written as JSON writes them (the shortest text that reads back exactly),
 * booleans as true/false, arrays (tags) joined by spaces, and a text that holds a comma, a
 * quote or a line end is quoted with its quotes doubled.
 */
#include "server/front/routes/history_csv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/grow.h"

/* A column whose value is no member of the record but follows from it (the history filters
 * page_size and ragged): a new item, or NULL for an empty cell. */
typedef cJSON *csv_derive(const cJSON *params);

typedef struct csv_column {
    const char *name;
    const char *path, *fallback; /* members separated by dots; fallback NULL: none */
    csv_derive *derive;          /* instead of path: the value from the record's params */
} csv_column;

/* params.page_size, else 0: a contiguous cache (the filter's value for it). */
static cJSON *csv_page_size(const cJSON *params)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, "page_size");
    return cJSON_IsNumber(v) ? cJSON_CreateNumber(v->valuedouble) : cJSON_CreateNumber(0);
}

/* Whether the run had per-sequence lengths. */
static cJSON *csv_ragged(const cJSON *params)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(params, "seqlens_q");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(params, "seqlens_kv");
    return cJSON_CreateBool((q && !cJSON_IsNull(q)) || (kv && !cJSON_IsNull(kv)));
}

static const csv_column csv_columns[] = {
    {"id", "id", NULL, NULL},
    {"status", "status", NULL, NULL},
    {"created", "created", NULL, NULL},
    {"finished", "finished", NULL, NULL},
    {"node", "node", NULL, NULL},
    {"backend", "backend", NULL, NULL},
    {"device", "params.device", NULL, NULL},
    {"gpu", "device.name", NULL, NULL},
    {"batch", "params.batch", NULL, NULL},
    {"heads", "params.heads", NULL, NULL},
    {"kv_heads", "params.kv_heads", "params.heads", NULL},
    {"seq_q", "params.seq_q", NULL, NULL},
    {"seq_kv", "params.seq_kv", NULL, NULL},
    {"head_dim", "params.head_dim", NULL, NULL},
    {"head_dim_v", "params.head_dim_v", "params.head_dim", NULL},
    {"window", "params.window", NULL, NULL},
    {"page_size", NULL, NULL, csv_page_size},
    {"num_pages", "params.num_pages", NULL, NULL},
    {"ragged", NULL, NULL, csv_ragged},
    {"dtype", "params.dtype", NULL, NULL},
    {"mask", "params.mask", NULL, NULL},
    {"impl", "params.impl", NULL, NULL},
    {"impl_used", "impl_used", NULL, NULL},
    {"cache", "params.cache", NULL, NULL},
    {"graph", "params.graph", NULL, NULL},
    {"median_us", "timing.median_us", NULL, NULL},
    {"mean_us", "timing.mean_us", NULL, NULL},
    {"min_us", "timing.min_us", NULL, NULL},
    {"max_us", "timing.max_us", NULL, NULL},
    {"p10_us", "timing.p10_us", NULL, NULL},
    {"p90_us", "timing.p90_us", NULL, NULL},
    {"stdev_us", "timing.stdev_us", NULL, NULL},
    {"rse", "timing.rse", NULL, NULL},
    {"iters", "timing.iters", NULL, NULL},
    {"stop_reason", "timing.stop_reason", NULL, NULL},
    {"tflops", "perf.tflops", NULL, NULL},
    {"gbps", "perf.gbps", NULL, NULL},
    {"verify_pass", "verify.pass", NULL, NULL},
    {"verify_rel_l2_err", "verify.rel_l2_err", NULL, NULL},
    {"verify_max_abs_err", "verify.max_abs_err", NULL, NULL},
    {"sm_min_mhz", "timing.clocks.sm_min_mhz", NULL, NULL},
    {"sm_max_mhz", "timing.clocks.sm_max_mhz", NULL, NULL},
    {"sm_limit_mhz", "timing.clocks.sm_limit_mhz", NULL, NULL},
    {"throttled", "timing.clocks.throttled", NULL, NULL},
    {"commit", "build.commit", NULL, NULL},
    {"dirty", "build.dirty", NULL, NULL},
    {"tags", "params.tags", NULL, NULL},
    {"error", "error.code", NULL, NULL},
};
#define CSV_COLUMNS (sizeof csv_columns / sizeof csv_columns[0])

/* The member at path ("timing.clocks.sm_min_mhz") of rec; NULL when absent. */
static const cJSON *csv_find(const cJSON *rec, const char *path)
{
    char name[64];

    while (rec && *path) {
        size_t len = strcspn(path, ".");
        snprintf(name, sizeof name, "%.*s", (int)len, path);
        rec = cJSON_IsObject(rec) ? cJSON_GetObjectItemCaseSensitive(rec, name) : NULL;
        path += len + (path[len] == '.');
    }
    return rec;
}

typedef struct csv_out {
    char *text;
    size_t len, cap;
    int failed;
} csv_out;

static void csv_put(csv_out *o, const char *s, size_t n)
{
    if (o->failed || grow_array(&o->text, &o->cap, o->len + n + 1, 1, 16384) != 0) {
        o->failed = 1;
        return;
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = '\0';
}

/* A text cell, quoted when it must be. */
static void csv_text(csv_out *o, const char *s)
{
    const char *q;

    if (!strpbrk(s, ",\"\r\n")) {
        csv_put(o, s, strlen(s));
        return;
    }
    csv_put(o, "\"", 1);
    for (; (q = strchr(s, '"')); s = q + 1) {
        csv_put(o, s, (size_t)(q - s));
        csv_put(o, "\"\"", 2);
    }
    csv_put(o, s, strlen(s));
    csv_put(o, "\"", 1);
}

/* A number as JSON writes it: 15 digits when they read back exactly, else 17. */
static void csv_number(csv_out *o, double x)
{
    char buf[40];

    if (!isfinite(x)) return; /* JSON has no such number: an empty cell */
    if (x == floor(x) && fabs(x) < 9007199254740992.0)
        snprintf(buf, sizeof buf, "%.0f", x);
    else if (snprintf(buf, sizeof buf, "%.15g", x), strtod(buf, NULL) != x)
        snprintf(buf, sizeof buf, "%.17g", x);
    csv_put(o, buf, strlen(buf));
}

static void csv_cell(csv_out *o, const cJSON *v)
{
    const cJSON *item;
    int first = 1;

    if (cJSON_IsNumber(v)) {
        csv_number(o, v->valuedouble);
    } else if (cJSON_IsString(v)) {
        csv_text(o, v->valuestring);
    } else if (cJSON_IsBool(v)) {
        csv_put(o, cJSON_IsTrue(v) ? "true" : "false", cJSON_IsTrue(v) ? 4 : 5);
    } else if (cJSON_IsArray(v)) { /* tags: words joined by spaces (a tag holds none) */
        csv_out words = {0};
        cJSON_ArrayForEach(item, v) {
            if (!first) csv_put(&words, " ", 1);
            first = 0;
            if (cJSON_IsString(item)) csv_put(&words, item->valuestring, strlen(item->valuestring));
        }
        if (words.text) csv_text(o, words.text);
        o->failed |= words.failed;
        free(words.text);
    }
}

char *history_csv(const char *records, size_t *len)
{
    cJSON *all = cJSON_Parse(records);
    const cJSON *rec;
    csv_out o = {0};
    size_t i;

    if (!cJSON_IsArray(all)) {
        cJSON_Delete(all);
        return NULL;
    }
    for (i = 0; i < CSV_COLUMNS; i++) {
        if (i) csv_put(&o, ",", 1);
        csv_put(&o, csv_columns[i].name, strlen(csv_columns[i].name));
    }
    csv_put(&o, "\r\n", 2);
    cJSON_ArrayForEach(rec, all) {
        const cJSON *params = csv_find(rec, "params");
        for (i = 0; i < CSV_COLUMNS; i++) {
            cJSON *derived = NULL;
            const cJSON *v;
            if (csv_columns[i].derive) {
                v = derived = cJSON_IsObject(params) ? csv_columns[i].derive(params) : NULL;
            } else {
                v = csv_find(rec, csv_columns[i].path);
                if ((!v || cJSON_IsNull(v)) && csv_columns[i].fallback) v = csv_find(rec, csv_columns[i].fallback);
            }
            if (i) csv_put(&o, ",", 1);
            csv_cell(&o, v);
            cJSON_Delete(derived);
        }
        csv_put(&o, "\r\n", 2);
    }
    cJSON_Delete(all);
    if (o.failed) {
        free(o.text);
        return NULL;
    }
    *len = o.len;
    return o.text;
}
