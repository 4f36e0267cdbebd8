/* run_request.c — one run as the client asked for it: parse, validate, and the JSON codec
 * that carries it to the worker and into the store (run_request.h).
 *
 * Every value arrives either as a query-string string or as a JSON body value (number,
 * boolean or string) and is coerced strictly: no trailing junk, no overflow, no NaN or
 * infinity, "1e3" is not an integer (in a body, where cJSON reads 1e3 as 1000,
 * run_request_parse_body checks how the number was written: common/json_numbers.h). A
 * parameter in both places: the query wins. Every refusal names the parameter, the value and
 * the limit (api_error.h); nothing in r is meaningful after a refusal.
 *
 * run_request_from_json is run_request_parse over the object run_request_to_json wrote, so
 * a stored "params" object can be posted again as a body and runs the same job.
 */
#include "common/run_request.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_numbers.h"
#include "common/parse_int.h"
#include "common/variant_info.h"

#define SEED_EXACT_MAX 9007199254740992.0 /* 2^53: a JSON number above it has lost digits */
/* cJSON prints a number of 16 digits or more with an exponent ("1e+15"), which an integer
 * parameter refuses: run_request_to_json writes such integers as decimal strings. */
#define JSON_PLAIN_INT_LIMIT 1000000000000000.0 /* 10^15 */

/* The parameters a client may send. `fault` only with allow_faults. verify_cpu_max_macs is
 * accepted so a stored "params" object can be posted back unchanged; the server's setting
 * replaces it (server/front/routes/runs.c). */
static const char *const run_params[] = {
    "backend", "device", "batch", "heads", "seq", "seq_q", "seq_kv", "head_dim", "dtype", "causal",
    "mask", "scale", "seed", "warmup", "iters", "min_iters", "max_iters", "min_time_ms", "max_time_ms",
    "target_noise", "cache", "graph", "verify", "profile", "verify_cpu_max_macs", "fault",
    "async", "impl",
    "q", "k", "v", "keep_output", "output_tensor", /* resident tensors */
};
#define RUN_PARAM_COUNT (sizeof run_params / sizeof run_params[0])

void run_request_defaults(run_request *r)
{
    memset(r, 0, sizeof *r);
    r->problem.batch = 8;
    r->problem.heads = 16;
    r->problem.seq_q = 1024;
    r->problem.seq_kv = 1024;
    r->problem.head_dim = 64;
    r->problem.dtype = ATTN_BF16;
    r->problem.mask = ATTN_MASK_CAUSAL;
    r->problem.scale = 1.0 / sqrt(64.0);
    r->seed = 0;
    r->warmup = 5;
    r->iters = 0;
    r->min_iters = 10;
    r->max_iters = 1000;
    r->min_time_ms = 20.0;
    r->max_time_ms = 2000.0;
    r->target_noise = 0.005;
    r->cache_cold = 0;
    r->graph = 0;
    r->verify = 0;
    r->profile = 1;
    r->verify_cpu_max_macs = 1000000000LL; /* the setting's default; the front sets the real one */
}

/* ---------------------------------------------------------------- value coercion -------- */

/* A short rendering of a value for messages: 'text' (truncated), 12, true, an object. */
static const char *value_text(const cJSON *item, char *buf, size_t len)
{
    if (cJSON_IsString(item)) {
        size_t n = strlen(item->valuestring);
        snprintf(buf, len, "'%.*s%s'", n > 40 ? 40 : (int)n, item->valuestring, n > 40 ? "…" : "");
    } else if (cJSON_IsNumber(item)) {
        snprintf(buf, len, "%.17g", item->valuedouble);
    } else if (cJSON_IsBool(item)) {
        snprintf(buf, len, "%s", cJSON_IsTrue(item) ? "true" : "false");
    } else if (cJSON_IsArray(item)) {
        snprintf(buf, len, "an array");
    } else if (cJSON_IsObject(item)) {
        snprintf(buf, len, "an object");
    } else {
        snprintf(buf, len, "null");
    }
    return buf;
}

/* An integer in [min, max] from a string or an integral JSON number. */
static int get_ll(const cJSON *item, const char *name, long long min, long long max, long long *out,
                  api_error *e)
{
    char shown[64];
    long long x;

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (parse_int(s, &x) != 0) {
            /* Tell overflow apart from junk: both are refusals, only the message differs. */
            const char *p = s + (s[0] == '-' || s[0] == '+');
            if (*p && strspn(p, "0123456789") == strlen(p))
                return api_fail(e, 400, "out_of_range", name, "%s %s is out of range (%lld..%lld)", name,
                                value_text(item, shown, sizeof shown), min, max);
            return api_fail(e, 400, "bad_value", name, "%s must be an integer, got %s", name,
                            value_text(item, shown, sizeof shown));
        }
    } else if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return api_fail(e, 400, "bad_value", name, "%s must be an integer, got %s", name,
                            value_text(item, shown, sizeof shown));
        if (d < (double)min || d > (double)max)
            return api_fail(e, 400, "out_of_range", name, "%s %s is out of range (%lld..%lld)", name,
                            value_text(item, shown, sizeof shown), min, max);
        x = (long long)d;
    } else {
        return api_fail(e, 400, "bad_value", name, "%s must be an integer, got %s", name,
                        value_text(item, shown, sizeof shown));
    }
    if (x < min || x > max)
        return api_fail(e, 400, "out_of_range", name, "%s %lld is out of range (%lld..%lld)", name, x, min, max);
    *out = x;
    return 0;
}

static int get_int(const cJSON *item, const char *name, long long min, long long max, int *out, api_error *e)
{
    long long x;
    if (get_ll(item, name, min, max, &x, e) != 0) return -1;
    *out = (int)x;
    return 0;
}

/* The seed: 0..2^64-1. As a JSON number only below 2^53 (a double holds no more exactly);
 * larger seeds must be decimal strings, as run_request_to_json writes them. */
static int get_seed(const cJSON *item, uint64_t *out, api_error *e)
{
    char shown[64];

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        char *end;
        unsigned long long x;
        if (!s[0] || strspn(s, "0123456789") != strlen(s))
            return api_fail(e, 400, "bad_value", "seed", "seed must be a non-negative integer, got %s",
                            value_text(item, shown, sizeof shown));
        errno = 0;
        x = strtoull(s, &end, 10);
        if (errno != 0 || *end != '\0')
            return api_fail(e, 400, "out_of_range", "seed", "seed %s is out of range (0..18446744073709551615)",
                            value_text(item, shown, sizeof shown));
        *out = (uint64_t)x;
        return 0;
    }
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return api_fail(e, 400, "bad_value", "seed", "seed must be a non-negative integer, got %s",
                            value_text(item, shown, sizeof shown));
        if (d < 0)
            return api_fail(e, 400, "out_of_range", "seed", "seed %s is out of range (0..18446744073709551615)",
                            value_text(item, shown, sizeof shown));
        /* 2^53 + 1 arrives as 2^53: from 2^53 on, the number read may not be the one sent. */
        if (d >= SEED_EXACT_MAX)
            return api_fail(e, 400, "out_of_range", "seed",
                            "seed %s is 2^53 or more, where JSON numbers lose digits; send it as a decimal string",
                            value_text(item, shown, sizeof shown));
        *out = (uint64_t)d;
        return 0;
    }
    return api_fail(e, 400, "bad_value", "seed", "seed must be a non-negative integer, got %s",
                    value_text(item, shown, sizeof shown));
}

/* A finite real number from a string (strtod, whole string) or a JSON number. */
static int get_double(const cJSON *item, const char *name, double *out, api_error *e)
{
    char shown[64];
    double x;

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        char *end;
        if (!s[0] || isspace((unsigned char)s[0]))
            return api_fail(e, 400, "bad_value", name, "%s must be a number, got %s", name,
                            value_text(item, shown, sizeof shown));
        errno = 0;
        x = strtod(s, &end);
        if (end == s || *end != '\0')
            return api_fail(e, 400, "bad_value", name, "%s must be a number, got %s", name,
                            value_text(item, shown, sizeof shown));
        if (errno == ERANGE || !isfinite(x))
            return api_fail(e, 400, "out_of_range", name, "%s must be a finite number, got %s", name,
                            value_text(item, shown, sizeof shown));
    } else if (cJSON_IsNumber(item)) {
        x = item->valuedouble;
        if (!isfinite(x))
            return api_fail(e, 400, "out_of_range", name, "%s must be a finite number", name);
    } else {
        return api_fail(e, 400, "bad_value", name, "%s must be a number, got %s", name,
                        value_text(item, shown, sizeof shown));
    }
    *out = x;
    return 0;
}

static int get_double_range(const cJSON *item, const char *name, double min, double max, double *out,
                            api_error *e)
{
    double x;
    if (get_double(item, name, &x, e) != 0) return -1;
    if (x < min || x > max)
        return api_fail(e, 400, "out_of_range", name, "%s %.17g is out of range (%g..%g)", name, x, min, max);
    *out = x;
    return 0;
}

/* true/false/1/0 as text, a JSON boolean, or the JSON numbers 0 and 1. */
static int get_bool(const cJSON *item, const char *name, int *out, api_error *e)
{
    char shown[64];

    if (cJSON_IsBool(item)) return *out = cJSON_IsTrue(item), 0;
    if (cJSON_IsNumber(item) && (item->valuedouble == 0.0 || item->valuedouble == 1.0))
        return *out = item->valuedouble == 1.0, 0;
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (!strcmp(s, "true") || !strcmp(s, "1")) return *out = 1, 0;
        if (!strcmp(s, "false") || !strcmp(s, "0")) return *out = 0, 0;
    }
    return api_fail(e, 400, "bad_value", name, "%s must be true, false, 1 or 0, got %s", name,
                    value_text(item, shown, sizeof shown));
}

static int get_string(const cJSON *item, const char *name, const char **out, api_error *e)
{
    char shown[64];
    if (!cJSON_IsString(item))
        return api_fail(e, 400, "bad_value", name, "%s must be a string, got %s", name,
                        value_text(item, shown, sizeof shown));
    *out = item->valuestring;
    return 0;
}

/* ---------------------------------------------------------------- the body's text ------- */

/* How each top-level number of a JSON body was written: the text of the ones with a
 * fraction or an exponent, by run_params index (NULL: none, or not a number). */
typedef struct body_numbers {
    const char *text[RUN_PARAM_COUNT];
    int len[RUN_PARAM_COUNT];
} body_numbers;

/* Past JSON's own white space (space, tab, newline, carriage return). */
static const char *json_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static void body_scan_numbers(const char *text, size_t len, body_numbers *out)
{
    json_numbers it;
    json_number n;
    size_t k;

    memset(out, 0, sizeof *out);
    json_numbers_start(&it, text, len);
    while (json_numbers_next(&it, &n))
        for (k = 0; k < RUN_PARAM_COUNT; k++)
            if (!n.integer && !strcmp(run_params[k], n.name)) {
                out->text[k] = n.text;
                out->len[k] = (int)n.len;
            }
}

/* An integer parameter written in the body as 1e3 or 8.0: refused like batch=1e3 in the
 * query (a parameter the query also gives is the query's). */
static int body_check_integers(const body_numbers *nums, const cJSON *query, api_error *e)
{
    static const char *const integers[] = {"batch", "heads", "seq", "seq_q", "seq_kv", "head_dim", "seed",
                                           "warmup", "iters", "min_iters", "max_iters", "verify_cpu_max_macs"};
    size_t i, k;

    for (i = 0; i < sizeof integers / sizeof integers[0]; i++) {
        if (query && cJSON_GetObjectItemCaseSensitive(query, integers[i])) continue;
        for (k = 0; k < RUN_PARAM_COUNT; k++)
            if (!strcmp(run_params[k], integers[i]) && nums->text[k])
                return api_fail(e, 400, "bad_value", integers[i],
                                "%s must be an integer written without a fraction or an exponent, got %.*s",
                                integers[i], nums->len[k] > 40 ? 40 : nums->len[k], nums->text[k]);
    }
    return 0;
}

/* ---------------------------------------------------------------- parse ----------------- */

static int param_known(const char *name, int allow_faults)
{
    size_t i;
    if (!strcmp(name, "fault") && !allow_faults) return 0;
    for (i = 0; i < RUN_PARAM_COUNT; i++)
        if (!strcmp(run_params[i], name)) return 1;
    return 0;
}

/* 1 for the parameters a stored "params" object carries that the server sets itself: a
 * client may post them back, but what it gives does not apply. */
static int param_server_set(const char *name)
{
    return !strcmp(name, "verify_cpu_max_macs") || !strcmp(name, "output_tensor");
}

static int refuse_unknown(const char *name, int allow_faults, api_error *e)
{
    char known[sizeof e->message], echo[64];
    size_t i, n = 0;
    int pass;

    /* Every name accepted, in two groups: what a client sets, then what is only posted back. */
    known[0] = '\0';
    for (pass = 0; pass < 2; pass++) {
        if (pass == 1) n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "; posted back from "
                                             "a stored params object, set by the server: ");
        for (i = 0; i < RUN_PARAM_COUNT; i++) {
            if (!strcmp(run_params[i], "fault") && !allow_faults) continue;
            if (param_server_set(run_params[i]) != pass) continue;
            n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "%s%s",
                                  n && known[n - 1] != ' ' ? ", " : "", run_params[i]);
        }
    }
    /* The name is the client's: show it short, without control bytes. */
    for (i = 0; name[i] && i < sizeof echo - 1; i++) echo[i] = (unsigned char)name[i] < 0x20 ? '?' : name[i];
    echo[i] = '\0';
    return api_fail(e, 400, "unknown_parameter", name, "unknown parameter '%.40s'; known: %s", echo, known);
}

/* Every key of query and body must be a known parameter, and appear once in each. */
static int check_names(const cJSON *query, const cJSON *body, int allow_faults, api_error *e)
{
    const cJSON *src[2] = {query, body}, *item, *other;
    int k;

    for (k = 0; k < 2; k++) {
        if (!src[k]) continue;
        if (!cJSON_IsObject(src[k]))
            return api_fail(e, 400, "bad_json", "", "the parameters must be a JSON object");
        cJSON_ArrayForEach(item, src[k]) {
            const char *name = item->string ? item->string : "";
            if (!param_known(name, allow_faults)) return refuse_unknown(name, allow_faults, e);
            for (other = src[k]->child; other != item; other = other->next)
                if (other->string && !strcmp(other->string, name))
                    return api_fail(e, 400, "duplicate_parameter", name, "parameter '%s' is given twice", name);
        }
    }
    return 0;
}

/* The value of a parameter: the query's, else the body's; NULL when neither has it (a JSON
 * null in the body counts as not given). */
static const cJSON *param(const cJSON *query, const cJSON *body, const char *name)
{
    const cJSON *item = query ? cJSON_GetObjectItemCaseSensitive(query, name) : NULL;
    if (item) return item;
    item = body ? cJSON_GetObjectItemCaseSensitive(body, name) : NULL;
    return item && !cJSON_IsNull(item) ? item : NULL;
}

/* The parameter a variant's refusal is about, guessed from its message (variants.c words
 * its messages after the parameter names). */
static const char *field_of_message(const char *why)
{
    static const char *const names[] = {"head_dim", "dtype", "mask", "causal", "seq_q", "seq_kv",
                                        "seq", "batch", "heads", "scale"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strstr(why, names[i])) return !strcmp(names[i], "causal") ? "mask" : names[i];
    if (strstr(why, "bf16") || strstr(why, "fp16") || strstr(why, "fp32")) return "dtype";
    return "";
}

static int check_size(const attn_problem *p, api_error *e)
{
    const struct {
        const char *what, *field;
        int64_t a, b, c, d;
    } t[3] = {
        {"q and out (batch*heads*seq_q*head_dim)", "seq_q", p->batch, p->heads, p->seq_q, p->head_dim},
        {"k and v (batch*heads*seq_kv*head_dim)", "seq_kv", p->batch, p->heads, p->seq_kv, p->head_dim},
        {"the scores (batch*heads*seq_q*seq_kv)", "seq_kv", p->batch, p->heads, p->seq_q, p->seq_kv},
    };
    int i;

    for (i = 0; i < 3; i++) {
        int64_t x;
        if (__builtin_mul_overflow(t[i].a, t[i].b, &x) || __builtin_mul_overflow(x, t[i].c, &x) ||
            __builtin_mul_overflow(x, t[i].d, &x) || x > RUN_MAX_ELEMS)
            return api_fail(e, 400, "out_of_range", t[i].field,
                            "%s would have more than %lld elements (batch %lld, heads %lld, seq_q %lld, seq_kv %lld, "
                            "head_dim %lld)",
                            t[i].what, (long long)RUN_MAX_ELEMS, (long long)p->batch, (long long)p->heads,
                            (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim);
    }
    return 0;
}

/* run_request_parse; nums (NULL: not known) says how the body's numbers were written. */
static int parse_checked(run_request *r, const cJSON *query, const cJSON *body, const body_numbers *nums,
                         int allow_faults, api_error *e)
{
    static const struct {
        const char *name;
        size_t offset;
    } dims[] = {
        {"batch", offsetof(attn_problem, batch)},   {"heads", offsetof(attn_problem, heads)},
        {"seq_q", offsetof(attn_problem, seq_q)},   {"seq_kv", offsetof(attn_problem, seq_kv)},
        {"head_dim", offsetof(attn_problem, head_dim)},
    };
    static const struct {
        const char *name;
        size_t offset;
    } flags[] = {
        {"graph", offsetof(run_request, graph)},
        {"verify", offsetof(run_request, verify)},
        {"profile", offsetof(run_request, profile)},
        {"async", offsetof(run_request, async_run)},
        {"keep_output", offsetof(run_request, keep_output)},
    };
    const cJSON *item, *causal_item, *mask_item;
    const char *s = "";
    const variant_info *v;
    char why[300];
    long long x;
    size_t i;

    run_request_defaults(r);
    if (check_names(query, body, allow_faults, e) != 0) return -1;

    /* backend: required, and one of the table's. */
    item = param(query, body, "backend");
    if (!item)
        return api_fail(e, 400, "missing_parameter", "backend",
                        "backend is required (GET /v1/variants lists them), e.g. backend=math");
    if (get_string(item, "backend", &s, e) != 0) return -1;
    v = strlen(s) < sizeof r->backend ? variant_info_find(s) : NULL;
    if (!v) {
        char known[400];
        size_t n = 0;
        known[0] = '\0';
        for (i = 0; i < variant_infos_count && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", variant_infos[i]->name);
        return api_fail(e, 400, "unknown_backend", "backend", "unknown backend '%.40s'; known: %s", s, known);
    }
    snprintf(r->backend, sizeof r->backend, "%s", v->name);
    if (nums && body_check_integers(nums, query, e) != 0) return -1;

    if ((item = param(query, body, "device"))) {
        if (get_string(item, "device", &s, e) != 0) return -1;
        if (strlen(s) >= sizeof r->device)
            return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%.40s'", s);
        snprintf(r->device, sizeof r->device, "%s", s);
    }

    /* Shape. seq sets both lengths; seq_q and seq_kv, when given, override it. */
    if ((item = param(query, body, "seq"))) {
        if (get_ll(item, "seq", 1, RUN_MAX_DIM, &x, e) != 0) return -1;
        r->problem.seq_q = r->problem.seq_kv = x;
        r->given |= RUN_GIVEN_SEQ_Q | RUN_GIVEN_SEQ_KV;
    }
    for (i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (!(item = param(query, body, dims[i].name))) continue;
        if (get_ll(item, dims[i].name, 1, RUN_MAX_DIM, &x, e) != 0) return -1;
        *(int64_t *)((char *)&r->problem + dims[i].offset) = x;
        r->given |= 1u << i; /* dims[] is in RUN_GIVEN_* order */
    }
    if (check_size(&r->problem, e) != 0) return -1;

    if ((item = param(query, body, "dtype"))) {
        if (get_string(item, "dtype", &s, e) != 0) return -1;
        if (attn_dtype_parse(s, &r->problem.dtype) != 0)
            return api_fail(e, 400, "bad_value", "dtype", "dtype must be bf16, fp16 or fp32, got '%.40s'", s);
        r->given |= RUN_GIVEN_DTYPE;
    }

    /* The mask: `mask` names it, `causal` is the short form; both given must agree. */
    causal_item = param(query, body, "causal");
    mask_item = param(query, body, "mask");
    if (mask_item) {
        if (get_string(mask_item, "mask", &s, e) != 0) return -1;
        if (attn_mask_parse(s, &r->problem.mask) != 0)
            return api_fail(e, 400, "bad_value", "mask", "mask must be none, causal or causal_bottom_right, got '%.40s'",
                            s);
    }
    if (causal_item) {
        int causal;
        if (get_bool(causal_item, "causal", &causal, e) != 0) return -1;
        if (!mask_item)
            r->problem.mask = causal ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
        else if (causal != (r->problem.mask != ATTN_MASK_NONE))
            return api_fail(e, 400, "conflict", "causal", "causal=%s contradicts mask=%s", causal ? "true" : "false",
                            attn_mask_name(r->problem.mask));
    }

    if ((item = param(query, body, "scale"))) {
        if (get_double(item, "scale", &r->problem.scale, e) != 0) return -1;
        if (r->problem.scale == 0.0 || fabs(r->problem.scale) > RUN_MAX_SCALE)
            return api_fail(e, 400, "out_of_range", "scale", "scale %.17g is out of range (nonzero, -%g..%g)",
                            r->problem.scale, RUN_MAX_SCALE, RUN_MAX_SCALE);
        r->scale_given = 1;
    } else {
        r->problem.scale = 1.0 / sqrt((double)r->problem.head_dim);
    }

    if ((item = param(query, body, "seed")) && get_seed(item, &r->seed, e) != 0) return -1;

    /* How to measure. */
    if ((item = param(query, body, "warmup")) && get_int(item, "warmup", 0, RUN_MAX_WARMUP, &r->warmup, e) != 0)
        return -1;
    if ((item = param(query, body, "iters")) && get_int(item, "iters", 0, RUN_MAX_ITERS, &r->iters, e) != 0)
        return -1;
    if ((item = param(query, body, "min_iters")) &&
        get_int(item, "min_iters", 1, RUN_MAX_ITERS, &r->min_iters, e) != 0)
        return -1;
    if ((item = param(query, body, "max_iters")) &&
        get_int(item, "max_iters", 1, RUN_MAX_ITERS, &r->max_iters, e) != 0)
        return -1;
    if (r->min_iters > r->max_iters)
        return api_fail(e, 400, "out_of_range", "min_iters", "min_iters %d is above max_iters %d", r->min_iters,
                        r->max_iters);
    if ((item = param(query, body, "min_time_ms")) &&
        get_double_range(item, "min_time_ms", 0.0, RUN_MAX_TIME_MS, &r->min_time_ms, e) != 0)
        return -1;
    if ((item = param(query, body, "max_time_ms")) &&
        get_double_range(item, "max_time_ms", 0.0, RUN_MAX_TIME_MS, &r->max_time_ms, e) != 0)
        return -1;
    if (r->min_time_ms > r->max_time_ms)
        return api_fail(e, 400, "out_of_range", "min_time_ms", "min_time_ms %g is above max_time_ms %g",
                        r->min_time_ms, r->max_time_ms);
    if ((item = param(query, body, "target_noise"))) {
        if (get_double(item, "target_noise", &r->target_noise, e) != 0) return -1;
        if (!(r->target_noise > 0.0 && r->target_noise < 1.0))
            return api_fail(e, 400, "out_of_range", "target_noise",
                            "target_noise %g is out of range (0 < target_noise < 1)", r->target_noise);
    }
    if ((item = param(query, body, "cache"))) {
        if (get_string(item, "cache", &s, e) != 0) return -1;
        if (!strcmp(s, "hot"))
            r->cache_cold = 0;
        else if (!strcmp(s, "cold"))
            r->cache_cold = 1;
        else
            return api_fail(e, 400, "bad_value", "cache", "cache must be hot or cold, got '%.40s'", s);
    }
    for (i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if ((item = param(query, body, flags[i].name)) &&
            get_bool(item, flags[i].name, (int *)((char *)r + flags[i].offset), e) != 0)
            return -1;
    if ((item = param(query, body, "verify_cpu_max_macs")) &&
        get_ll(item, "verify_cpu_max_macs", 0, 1000000000000000LL, &r->verify_cpu_max_macs, e) != 0)
        return -1;
    if ((item = param(query, body, "impl"))) {
        if (get_string(item, "impl", &s, e) != 0) return -1;
        if (variant_info_impl_check(v, s, why, sizeof why) != 0)
            return api_fail(e, 400, "bad_value", "impl", "%s", why);
        snprintf(r->impl, sizeof r->impl, "%s", s);
    }
    if ((item = param(query, body, "fault"))) { /* present only when allow_faults (check_names) */
        if (get_string(item, "fault", &s, e) != 0) return -1;
        if (strcmp(s, "crash") && strcmp(s, "hang") && strcmp(s, "sticky"))
            return api_fail(e, 400, "bad_value", "fault", "fault must be crash, hang or sticky, got '%.40s'", s);
        snprintf(r->fault, sizeof r->fault, "%s", s);
    }

    /* Resident tensor ids: checked against the tensor table by the front. */
    {
        static const char *const names[] = {"q", "k", "v", "output_tensor"};
        char *dst[] = {r->q_tensor, r->k_tensor, r->v_tensor, r->output_tensor};
        for (i = 0; i < 4; i++) { /* "t" and a decimal number (server/front/tensors/tensor_table.c) */
            if (!(item = param(query, body, names[i]))) continue;
            if (get_string(item, names[i], &s, e) != 0) return -1;
            if (s[0] != 't' || !s[1] || strlen(s) >= sizeof r->q_tensor || strspn(s + 1, "0123456789") != strlen(s + 1))
                return api_fail(e, 400, "bad_value", names[i], "%s must be a tensor id like t4 (from POST /v1/tensors), got '%.40s'",
                                names[i], s);
            snprintf(dst[i], sizeof r->q_tensor, "%s", s);
        }
    }

    return 0;
}

int run_request_check(const run_request *r, int cc, api_error *e)
{
    const variant_info *v = variant_info_find(r->backend);
    char why[300] = "";

    if (!v) return api_fail(e, 400, "unknown_backend", "backend", "unknown backend '%.40s'", r->backend);
    if (variant_info_check(v, &r->problem, cc, why, sizeof why) != 0)
        return api_fail(e, 422, "unsupported", field_of_message(why), "%s",
                        why[0] ? why : "this backend does not support the problem");
    return 0;
}

int run_request_parse(run_request *r, const cJSON *query, const cJSON *body, int allow_faults, api_error *e)
{
    return parse_checked(r, query, body, NULL, allow_faults, e);
}

int run_request_parse_body(run_request *r, const cJSON *query, const char *body, size_t body_len, int allow_faults,
                           api_error *e)
{
    body_numbers nums;
    cJSON *json;
    const char *end = NULL;
    int rc;

    if (!body || body_len == 0) return parse_checked(r, query, NULL, NULL, allow_faults, e);
    if (memchr(body, '\0', body_len)) return api_fail(e, 400, "bad_json", "", "the body contains a NUL byte");
    json = cJSON_ParseWithLengthOpts(body, body_len, &end, 0);
    if (json && end) { /* only white space may follow the value */
        const char *rest = json_ws(end, body + body_len);
        if (rest != body + body_len) {
            cJSON_Delete(json);
            json = NULL;
            end = rest;
        }
    }
    if (!json) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return api_fail(e, 400, "bad_json", "", "the body is not valid JSON (at byte %zu of %zu)", at, body_len);
    }
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        return api_fail(e, 400, "bad_json", "", "the body must be a JSON object of run parameters");
    }
    body_scan_numbers(body, body_len, &nums);
    rc = parse_checked(r, query, json, &nums, allow_faults, e);
    cJSON_Delete(json);
    return rc;
}

/* ---------------------------------------------------------------- the JSON codec -------- */

cJSON *run_request_to_json(const run_request *r)
{
    const attn_problem *p = &r->problem;
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    char seed[24];

    if (!ok) return NULL;
    ok = ok && cJSON_AddStringToObject(o, "backend", r->backend);
    ok = ok && cJSON_AddStringToObject(o, "device", r->device);
    ok = ok && cJSON_AddNumberToObject(o, "batch", (double)p->batch);
    ok = ok && cJSON_AddNumberToObject(o, "heads", (double)p->heads);
    ok = ok && cJSON_AddNumberToObject(o, "seq_q", (double)p->seq_q);
    ok = ok && cJSON_AddNumberToObject(o, "seq_kv", (double)p->seq_kv);
    ok = ok && cJSON_AddNumberToObject(o, "head_dim", (double)p->head_dim);
    ok = ok && cJSON_AddStringToObject(o, "dtype", attn_dtype_name(p->dtype));
    ok = ok && cJSON_AddStringToObject(o, "mask", attn_mask_name(p->mask));
    ok = ok && cJSON_AddBoolToObject(o, "causal", p->mask != ATTN_MASK_NONE);
    ok = ok && cJSON_AddNumberToObject(o, "scale", p->scale);
    if ((double)r->seed < JSON_PLAIN_INT_LIMIT) {
        ok = ok && cJSON_AddNumberToObject(o, "seed", (double)r->seed);
    } else {
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
        ok = ok && cJSON_AddStringToObject(o, "seed", seed);
    }
    ok = ok && cJSON_AddNumberToObject(o, "warmup", r->warmup);
    ok = ok && cJSON_AddNumberToObject(o, "iters", r->iters);
    ok = ok && cJSON_AddNumberToObject(o, "min_iters", r->min_iters);
    ok = ok && cJSON_AddNumberToObject(o, "max_iters", r->max_iters);
    ok = ok && cJSON_AddNumberToObject(o, "min_time_ms", r->min_time_ms);
    ok = ok && cJSON_AddNumberToObject(o, "max_time_ms", r->max_time_ms);
    ok = ok && cJSON_AddNumberToObject(o, "target_noise", r->target_noise);
    ok = ok && cJSON_AddStringToObject(o, "cache", r->cache_cold ? "cold" : "hot");
    ok = ok && cJSON_AddBoolToObject(o, "graph", r->graph);
    ok = ok && cJSON_AddBoolToObject(o, "verify", r->verify);
    ok = ok && cJSON_AddBoolToObject(o, "profile", r->profile);
    if ((double)r->verify_cpu_max_macs < JSON_PLAIN_INT_LIMIT) {
        ok = ok && cJSON_AddNumberToObject(o, "verify_cpu_max_macs", (double)r->verify_cpu_max_macs);
    } else {
        char macs[24];
        snprintf(macs, sizeof macs, "%lld", r->verify_cpu_max_macs);
        ok = ok && cJSON_AddStringToObject(o, "verify_cpu_max_macs", macs);
    }
    if (r->impl[0]) ok = ok && cJSON_AddStringToObject(o, "impl", r->impl);
    if (r->fault[0]) ok = ok && cJSON_AddStringToObject(o, "fault", r->fault);
    if (r->q_tensor[0]) ok = ok && cJSON_AddStringToObject(o, "q", r->q_tensor);
    if (r->k_tensor[0]) ok = ok && cJSON_AddStringToObject(o, "k", r->k_tensor);
    if (r->v_tensor[0]) ok = ok && cJSON_AddStringToObject(o, "v", r->v_tensor);
    if (r->keep_output) ok = ok && cJSON_AddBoolToObject(o, "keep_output", 1);
    if (r->output_tensor[0]) ok = ok && cJSON_AddStringToObject(o, "output_tensor", r->output_tensor);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int run_request_from_json(run_request *r, const cJSON *json, api_error *e)
{
    if (!cJSON_IsObject(json)) return api_fail(e, 400, "bad_json", "", "a run request must be a JSON object");
    /* The front only writes `fault` when fault injection is on, so accept it here. */
    if (run_request_parse(r, NULL, json, 1, e) != 0) return -1;
    /* The JSON always carries the resolved scale; it was the client's choice exactly when it
     * differs from the default (a client that gave the default value loses nothing). */
    r->scale_given = r->problem.scale != 1.0 / sqrt((double)r->problem.head_dim);
    return 0;
}

long long run_request_macs(const run_request *r)
{
    const attn_problem *p = &r->problem;
    int64_t x;

    /* Saturates: a request that passed validation stays far below, but say so rather than wrap. */
    if (__builtin_mul_overflow(p->batch, p->heads, &x) || __builtin_mul_overflow(x, p->seq_q, &x) ||
        __builtin_mul_overflow(x, p->seq_kv, &x) || __builtin_mul_overflow(x, p->head_dim, &x))
        return LLONG_MAX;
    return (long long)x;
}

int run_request_device_valid(const char *d)
{
    const char *p;
    if (!strcmp(d, "cpu")) return 1;
    if (strncmp(d, "cuda:", 5) != 0) return 0;
    p = d + 5;
    if (!isdigit((unsigned char)p[0]) || (p[0] == '0' && p[1]) || strlen(p) > 4) return 0;
    return strspn(p, "0123456789") == strlen(p);
}
