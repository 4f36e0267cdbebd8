/* history_query.c — GET /v1/runs' parameters (history_query.h): each one checked, with a 400
 * that names it, and gathered into one store query.
 *
 * The shape filters take their bounds and words from the run-parameter table (a filter
 * accepts what a run accepts), `seq` sets seq_q and seq_kv as it does for a run, and a
 * backend, device or node that no run of this history can have is refused rather than
 * answered with an empty list that looks like "no runs yet".
 */
#include "server/front/routes/history_query.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/json_text.h"
#include "common/parse_int.h"
#include "common/run_request.h"
#include "common/variant_info.h"

#define HISTORY_DEFAULT_LIMIT 100
#define HISTORY_MAX_CURSOR (1LL << 62)
#define HISTORY_MAX_TEXT 128 /* gpu: a device name */
#define HISTORY_MAX_COMMIT 40

static const char *const run_statuses = "queued|running|done|failed|cancelled";

/* The parameters besides the store's fields. */
static const char *const history_params[] = {"after", "before", "limit", "order", "since", "tag",
                                             "group_by", "format", "seq"};
#define HISTORY_PARAMS (sizeof history_params / sizeof history_params[0])

/* A query parameter as a string, NULL when absent. */
static const char *qs(const cJSON *query, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(query, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int field_named(const char *name, size_t len)
{
    int i;
    for (i = 0; i < STORE_FIELD_COUNT; i++)
        if (strlen(store_fields[i].name) == len && !memcmp(store_fields[i].name, name, len)) return i;
    return -1;
}

/* Every name known, once. */
static int check_names(const cJSON *query, api_error *e)
{
    char known[600];
    const cJSON *item;
    size_t i, n = 0;

    cJSON_ArrayForEach(item, query) {
        const char *name = item->string ? item->string : "";
        for (i = 0; i < HISTORY_PARAMS; i++)
            if (!strcmp(name, history_params[i])) break;
        if (i < HISTORY_PARAMS || field_named(name, strlen(name)) >= 0) continue;
        for (i = 0; i < HISTORY_PARAMS; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", history_params[i]);
        for (i = 0; i < STORE_FIELD_COUNT && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, ", %s", store_fields[i].name);
        return api_fail(e, 400, "unknown_parameter", name, "unknown parameter '%.60s'; GET /v1/runs takes %s", name,
                        known);
    }
    return 0;
}

/* An integer parameter in [lo, hi]: 0 (with *out, or dflt when absent), or -1 with e. */
static int q_int(const cJSON *query, const char *key, long long lo, long long hi, long long dflt, long long *out,
                 api_error *e)
{
    const char *t = qs(query, key);

    *out = dflt;
    if (!t) return 0;
    if (parse_int_in(t, lo, hi, out) != 0)
        return api_fail(e, 400, "bad_value", key, "%s must be an integer in %lld..%lld, got '%.40s'", key, lo, hi, t);
    return 0;
}

/* The index of word s in words ("a|b|c"), or -1. */
static int word_in(const char *words, const char *s)
{
    size_t n = strlen(s);
    int k = 0;

    for (;;) {
        size_t len = strcspn(words, "|");
        if (len == n && !memcmp(words, s, n)) return k;
        if (!words[len]) return -1;
        words += len + 1, k++;
    }
}

static const run_param *run_param_named(const char *name)
{
    size_t i;
    for (i = 0; i < run_request_params_count; i++)
        if (!strcmp(run_request_params[i].name, name)) return &run_request_params[i];
    return NULL;
}

/* An integer filter whose bounds are its run parameter's (name: the row): the value,
 * normalized into buf, set on field f. 0, or -1 with e. */
static int shape_filter(const cJSON *query, const char *name, int f, history_request *h, api_error *e)
{
    const run_param *p = run_param_named(name);
    const char *t = qs(query, name);
    long long x;

    if (!t) return 0;
    if (!json_text_is_integer(t, strlen(t))) /* as a run's integers are spelled */
        return api_fail(e, 400, "bad_value", name,
                        "%s must be an integer (decimal digits, without '+' or leading zeros), got '%.40s'", name, t);
    if (q_int(query, name, (long long)p->min, (long long)p->max, 0, &x, e) != 0) return -1;
    snprintf(h->numbers[f], sizeof h->numbers[f], "%lld", x);
    h->q.value[f] = h->numbers[f];
    return 0;
}

/* A text filter that must be one word of its run parameter's (dtype, mask). */
static int word_filter(const cJSON *query, int f, history_request *h, api_error *e)
{
    const char *name = store_fields[f].name, *v = qs(query, name);
    const run_param *p = run_param_named(name);

    if (!v) return 0;
    if (word_in(p->values, v) < 0)
        return api_fail(e, 400, "bad_value", name, "%s must be one of %s, got '%.40s'", name, p->values, v);
    h->q.value[f] = v;
    return 0;
}

/* impl: a name of some variant's implementations. */
static int impl_filter(const cJSON *query, history_request *h, api_error *e)
{
    const char *v = qs(query, "impl");
    char known[300];
    size_t i, k, n = 0;

    if (!v) return 0;
    known[0] = '\0';
    for (i = 0; i < variant_infos_count; i++)
        for (k = 0; k < variant_infos[i]->impl_count; k++) {
            if (!strcmp(variant_infos[i]->impls[k].name, v)) {
                h->q.value[STORE_FIELD_IMPL] = v;
                return 0;
            }
            n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "%s%s", n ? ", " : "",
                                  variant_infos[i]->impls[k].name);
        }
    return api_fail(e, 400, "bad_value", "impl", "impl must be an implementation of a variant (%s), got '%.40s'",
                    known, v);
}

/* Free text (gpu, commit): 1..max characters of allowed (NULL: any printable). */
static int text_filter(const cJSON *query, int f, size_t max, const char *allowed, const char *what,
                       history_request *h, api_error *e)
{
    const char *name = store_fields[f].name, *v = qs(query, name);
    size_t i, n;

    if (!v) return 0;
    n = strlen(v);
    for (i = 0; i < n; i++)
        if (allowed ? !strchr(allowed, v[i]) : (unsigned char)v[i] < 0x20 || v[i] == 0x7f) break;
    if (n < 1 || n > max || i < n)
        return api_fail(e, 400, "bad_value", name, "%s must be %s, 1..%zu characters, got '%.40s'", name, what, max, v);
    h->q.value[f] = v;
    return 0;
}

/* A boolean filter (ragged): true or false, as a run's booleans are spelled; 1 or 0 in the store. */
static int boolean_filter(const cJSON *query, int f, history_request *h, api_error *e)
{
    const char *name = store_fields[f].name, *v = qs(query, name);
    int k;

    if (!v) return 0;
    if ((k = word_in("false|true", v)) < 0)
        return api_fail(e, 400, "bad_value", name, "%s must be true or false, got '%.40s'", name, v);
    h->q.value[f] = k ? "1" : "0";
    return 0;
}

/* backend, status, device, node: values a run of this history can have. 0, -1 with e, -2
 * when the store could not say whether node is known. */
static int run_filters(const cJSON *query, history_request *h, api_error *e)
{
    const char *backend = qs(query, "backend"), *status = qs(query, "status"), *device = qs(query, "device");
    const char *node = qs(query, "node");
    char known[300];
    size_t i, n = 0;
    int rc;

    if (backend) {
        if (!variant_info_find(backend)) {
            known[0] = '\0';
            for (i = 0; i < variant_infos_count; i++)
                n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", variant_infos[i]->name);
            return api_fail(e, 400, "unknown_backend", "backend", "unknown backend '%.40s'; known: %s", backend, known);
        }
        h->q.value[STORE_FIELD_BACKEND] = backend;
    }
    if (status) {
        if (word_in(run_statuses, status) < 0)
            return api_fail(e, 400, "bad_value", "status",
                            "status must be queued, running, done, failed or cancelled, got '%.40s'", status);
        h->q.value[STORE_FIELD_STATUS] = status;
    }
    if (device) {
        if (!run_request_device_valid(device))
            return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%.40s'", device);
        h->q.value[STORE_FIELD_DEVICE] = device;
    }
    if (node) {
        rc = node[0] ? store_node_known(node) : 0;
        if (rc < 0) return -2;
        if (rc == 0)
            return api_fail(e, 400, "bad_value", "node",
                            "no node named '%.60s' has written to this history (GET /v1/nodes lists them)", node);
        h->q.value[STORE_FIELD_NODE] = node;
    }
    return 0;
}

/* group_by=backend,seq_q: field names, each once. */
static int group_by(const char *text, history_request *h, api_error *e)
{
    const char *p = text;
    int f, i;

    for (;;) {
        size_t len = strcspn(p, ",");
        if ((f = field_named(p, len)) < 0) {
            char known[300];
            size_t n = 0;
            for (i = 0; i < STORE_FIELD_COUNT && n < sizeof known; i++)
                n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", store_fields[i].name);
            return api_fail(e, 400, "bad_value", "group_by",
                            "group_by takes field names separated by commas (%s), got '%.*s'", known,
                            (int)(len > 40 ? 40 : len), p);
        }
        for (i = 0; i < h->q.n_group_by; i++)
            if (h->q.group_by[i] == (store_field)f)
                return api_fail(e, 400, "bad_value", "group_by", "group_by names %.*s twice", (int)len, p);
        h->q.group_by[h->q.n_group_by++] = (store_field)f;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

int history_query_parse(const cJSON *query, history_request *h, api_error *e)
{
    const char *order = qs(query, "order"), *since = qs(query, "since"), *tag = qs(query, "tag");
    const char *format = qs(query, "format"), *groups = qs(query, "group_by");
    long long x;
    int rc;

    memset(h, 0, sizeof *h);
    if (check_names(query, e) != 0) return -1;
    if (q_int(query, "after", 0, HISTORY_MAX_CURSOR, 0, &h->q.after, e) != 0 ||
        q_int(query, "before", 1, HISTORY_MAX_CURSOR, 0, &h->q.before, e) != 0 ||
        q_int(query, "limit", 1, STORE_QUERY_MAX_LIMIT, HISTORY_DEFAULT_LIMIT, &x, e) != 0)
        return -1;
    h->q.limit = (int)x;
    if (order && word_in("oldest|newest", order) < 0)
        return api_fail(e, 400, "bad_value", "order", "order must be oldest or newest, got '%.40s'", order);
    h->q.newest_first = order && !strcmp(order, "newest");
    if (format && word_in("json|csv", format) < 0)
        return api_fail(e, 400, "bad_value", "format", "format must be json or csv, got '%.40s'", format);
    h->format = format && !strcmp(format, "csv") ? HISTORY_CSV : HISTORY_JSON;
    if (since) {
        if (history_query_parse_since(since, h->since, sizeof h->since) != 0)
            return api_fail(e, 400, "bad_value", "since",
                            "since must be an ISO-8601 time such as 2026-12-02T10:31:05Z, got '%.60s'", since);
        h->q.since = h->since;
    }
    if (tag) {
        if (!run_request_tag_valid(tag, strlen(tag)))
            return api_fail(e, 400, "bad_value", "tag", "a tag is 1..%d characters of A-Z a-z 0-9 . _ : -, got '%.40s'",
                            RUN_TAG_MAX_LEN, tag);
        h->q.tag = tag;
    }
    /* seq first: seq_q and seq_kv, given too, override it (as in a run) */
    if (shape_filter(query, "seq", STORE_FIELD_SEQ_Q, h, e) != 0) return -1;
    if (h->q.value[STORE_FIELD_SEQ_Q]) {
        memcpy(h->numbers[STORE_FIELD_SEQ_KV], h->numbers[STORE_FIELD_SEQ_Q], sizeof h->numbers[0]);
        h->q.value[STORE_FIELD_SEQ_KV] = h->numbers[STORE_FIELD_SEQ_KV];
    }
    if (shape_filter(query, "batch", STORE_FIELD_BATCH, h, e) != 0 ||
        shape_filter(query, "heads", STORE_FIELD_HEADS, h, e) != 0 ||
        shape_filter(query, "kv_heads", STORE_FIELD_KV_HEADS, h, e) != 0 ||
        shape_filter(query, "seq_q", STORE_FIELD_SEQ_Q, h, e) != 0 ||
        shape_filter(query, "seq_kv", STORE_FIELD_SEQ_KV, h, e) != 0 ||
        shape_filter(query, "head_dim", STORE_FIELD_HEAD_DIM, h, e) != 0 ||
        shape_filter(query, "head_dim_v", STORE_FIELD_HEAD_DIM_V, h, e) != 0 ||
        shape_filter(query, "window", STORE_FIELD_WINDOW, h, e) != 0 ||
        shape_filter(query, "page_size", STORE_FIELD_PAGE_SIZE, h, e) != 0 ||
        shape_filter(query, "num_pages", STORE_FIELD_NUM_PAGES, h, e) != 0 ||
        boolean_filter(query, STORE_FIELD_RAGGED, h, e) != 0 || word_filter(query, STORE_FIELD_DTYPE, h, e) != 0 ||
        word_filter(query, STORE_FIELD_MASK, h, e) != 0 || impl_filter(query, h, e) != 0 ||
        text_filter(query, STORE_FIELD_GPU, HISTORY_MAX_TEXT, NULL, "a device name as device.name has it", h, e) != 0 ||
        text_filter(query, STORE_FIELD_COMMIT, HISTORY_MAX_COMMIT, "0123456789abcdefghijklmnopqrstuvwxyz",
                    "a commit as build.commit has it (lower-case hex, or unknown)", h, e) != 0)
        return -1;
    if (groups) {
        if (group_by(groups, h, e) != 0) return -1;
        if (h->format == HISTORY_CSV)
            return api_fail(e, 400, "bad_value", "format", "format=csv lists runs; group_by answers JSON only");
    }
    rc = run_filters(query, h, e); /* last: the node check may read the store */
    return rc;
}

int history_query_parse_since(const char *text, char *out, size_t len)
{
    struct tm tm;
    int y, mo, d, h = 0, mi = 0, sec = 0, ms = 0, n = 0, digits;
    long offset = 0;
    const char *p = text;
    time_t t;

    if (!text || sscanf(p, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 || n != 10) return -1;
    p += n;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &h, &mi, &n) != 2 || n != 5) return -1;
        p += 1 + n;
        if (*p == ':') {
            n = 0;
            if (sscanf(p + 1, "%2d%n", &sec, &n) != 1 || n != 2) return -1;
            p += 1 + n;
            if (*p == '.') {
                p++;
                for (digits = 0; isdigit((unsigned char)*p); p++, digits++)
                    if (digits < 3) ms = ms * 10 + (*p - '0');
                if (digits == 0) return -1;
                for (; digits < 3; digits++) ms *= 10;
            }
        }
        if (*p == 'Z' || *p == 'z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int oh, om;
            n = 0;
            if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59) return -1;
            offset = (*p == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
            p += 1 + n;
        }
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970)
        return -1;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    t = timegm(&tm) - offset;
    if (!gmtime_r(&t, &tm)) return -1;
    n = (int)strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n <= 0 || (size_t)snprintf(out + n, len - (size_t)n, ".%03dZ", ms) >= len - (size_t)n) return -1;
    return 0;
}
