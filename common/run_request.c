/* run_request.c — one run as the client asked for it: the run-parameter table, and from it the
 * parser, the JSON codec that carries a run to the worker and into the store, and the listing
 * that docs/api.md holds (run_request.h).
 *
 * Every value arrives either as a query-string string or as a JSON body value (number,
 * boolean or string) and is coerced strictly, by one rule of spelling in both places: a
 * number is written as JSON writes one, an integer also without a fraction, an exponent or
 * -0 (so no "+1", "01", "1e3", "8.0"), a boolean is true or false. A JSON number's text is
 * the one json_text_parse kept (common/json_text.h), since cJSON reads 1e3 as 1000. A string
 * in a body is read as the query string's text would be. No overflow, no NaN or infinity. A
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

#include "common/json_text.h"
#include "common/parse_int.h"
#include "common/seeded.h"
#include "common/variant_info.h"

#define SEED_EXACT_MAX 9007199254740992.0 /* 2^53: a JSON number above it has lost digits */
/* cJSON prints a number of 16 digits or more with an exponent ("1e+15"), which an integer
 * parameter refuses: run_request_to_json writes such integers as decimal strings. */
#define JSON_PLAIN_INT_LIMIT 1000000000000000.0 /* 10^15 */

/* ---------------------------------------------------------------- value coercion -------- */

/* A short rendering of a value for messages: 'text' (truncated), 12, true, an object. */
static const char *value_text(const cJSON *item, char *buf, size_t len)
{
    if (cJSON_IsString(item)) {
        size_t n = strlen(item->valuestring);
        snprintf(buf, len, "'%.*s%s'", n > 40 ? 40 : (int)n, item->valuestring, n > 40 ? "…" : "");
    } else if (cJSON_IsNumber(item) && item->valuestring) { /* as written (json_text_parse) */
        snprintf(buf, len, "%.40s", item->valuestring);
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

/* 1 when a JSON number is spelled as an integer (json_text_is_integer), or its text is not
 * known: a tree cJSON parsed itself, such as the worker's copy of a request the front has
 * checked. */
static int number_spelled_as_integer(const cJSON *item)
{
    return !item->valuestring || json_text_is_integer(item->valuestring, strlen(item->valuestring));
}

#define INTEGER_SPELLING "decimal digits, without '+', leading zeros, a fraction or an exponent"

/* An integer in [min, max] from a string or a JSON number, spelled as an integer. */
static int get_ll(const cJSON *item, const char *name, long long min, long long max, long long *out,
                  api_error *e)
{
    char shown[64];
    long long x;

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (!json_text_is_integer(s, strlen(s)))
            return api_fail(e, 400, "bad_value", name, "%s must be an integer (" INTEGER_SPELLING "), got %s", name,
                            value_text(item, shown, sizeof shown));
        if (parse_int(s, &x) != 0) /* spelled right, but past long long */
            return api_fail(e, 400, "out_of_range", name, "%s %s is out of range (%lld..%lld)", name,
                            value_text(item, shown, sizeof shown), min, max);
    } else if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!number_spelled_as_integer(item) || !isfinite(d) || d != floor(d))
            return api_fail(e, 400, "bad_value", name, "%s must be an integer (" INTEGER_SPELLING "), got %s", name,
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

/* The seed: 0..2^64-1. As a JSON number only below 2^53 (a double holds no more exactly);
 * larger seeds must be decimal strings, as run_request_to_json writes them. */
static int get_seed(const cJSON *item, const char *name, uint64_t *out, api_error *e)
{
    char shown[64];

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        char *end;
        unsigned long long x;
        if (!json_text_is_integer(s, strlen(s)) || s[0] == '-')
            return api_fail(e, 400, "bad_value", name,
                            "%s must be a non-negative integer (" INTEGER_SPELLING "), got %s", name,
                            value_text(item, shown, sizeof shown));
        errno = 0;
        x = strtoull(s, &end, 10);
        if (errno != 0 || *end != '\0')
            return api_fail(e, 400, "out_of_range", name, "%s %s is out of range (0..18446744073709551615)", name,
                            value_text(item, shown, sizeof shown));
        *out = (uint64_t)x;
        return 0;
    }
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!number_spelled_as_integer(item) || !isfinite(d) || d != floor(d))
            return api_fail(e, 400, "bad_value", name,
                            "%s must be a non-negative integer (" INTEGER_SPELLING "), got %s", name,
                            value_text(item, shown, sizeof shown));
        if (d < 0)
            return api_fail(e, 400, "out_of_range", name, "%s %s is out of range (0..18446744073709551615)", name,
                            value_text(item, shown, sizeof shown));
        /* 2^53 + 1 arrives as 2^53: from 2^53 on, the number read may not be the one sent. */
        if (d >= SEED_EXACT_MAX)
            return api_fail(e, 400, "out_of_range", name,
                            "%s %s is 2^53 or more, where JSON numbers lose digits; send it as a decimal string", name,
                            value_text(item, shown, sizeof shown));
        *out = (uint64_t)d;
        return 0;
    }
    return api_fail(e, 400, "bad_value", name, "%s must be a non-negative integer, got %s", name,
                    value_text(item, shown, sizeof shown));
}

/* A finite real number from a string spelled as a JSON number, or a JSON number. */
static int get_double(const cJSON *item, const char *name, double *out, api_error *e)
{
    char shown[64];
    double x;

    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (!json_text_is_number(s, strlen(s))) /* strtod alone would take +1, .5, 0x10, inf */
            return api_fail(e, 400, "bad_value", name, "%s must be a number as JSON writes one (0.5, 2, 1e-3), got %s",
                            name, value_text(item, shown, sizeof shown));
        errno = 0;
        x = strtod(s, NULL);
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

/* A JSON boolean, or the text true or false (the query's, or a body's string). */
static int get_bool(const cJSON *item, const char *name, int *out, api_error *e)
{
    char shown[64];

    if (cJSON_IsBool(item)) return *out = cJSON_IsTrue(item), 0;
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (!strcmp(s, "true")) return *out = 1, 0;
        if (!strcmp(s, "false")) return *out = 0, 0;
    }
    return api_fail(e, 400, "bad_value", name, "%s must be true or false, got %s", name,
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

/* One tag: 1..RUN_TAG_MAX_LEN characters of RUN_TAG_CHARS. */
int run_request_tag_valid(const char *tag, size_t len)
{
    size_t i;

    if (len < 1 || len > RUN_TAG_MAX_LEN) return 0;
    for (i = 0; i < len; i++)
        if (!tag[i] || !strchr(RUN_TAG_CHARS, tag[i])) return 0;
    return 1;
}

/* Append one tag of tags to out (joined by commas), refusing a bad one, a repeated one, and
 * one past RUN_MAX_TAGS. */
static int add_tag(const char *name, const char *tag, size_t len, char *out, int *count, api_error *e)
{
    size_t used = strlen(out);
    const char *p;

    if (!run_request_tag_valid(tag, len))
        return api_fail(e, 400, "bad_value", name,
                        "a tag is 1..%d characters of A-Z a-z 0-9 . _ : -, got '%.*s'", RUN_TAG_MAX_LEN,
                        (int)(len > 40 ? 40 : len), tag);
    if (++*count > RUN_MAX_TAGS)
        return api_fail(e, 400, "out_of_range", name, "at most %d tags", RUN_MAX_TAGS);
    for (p = out; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) /* each tag so far */
        if (strcspn(p, ",") == len && !memcmp(p, tag, len))
            return api_fail(e, 400, "bad_value", name, "tag '%.*s' is given twice", (int)len, tag);
    snprintf(out + used, RUN_TAGS_TEXT - used, "%s%.*s", used ? "," : "", (int)len, tag);
    return 0;
}

/* Tags: "a,b" (a query value, or a string in a body; "" is none), or a JSON array of strings. */
static int get_tags(const cJSON *item, const char *name, char *out, api_error *e)
{
    char shown[64];
    const cJSON *t;
    int count = 0;

    out[0] = '\0';
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (!s[0]) return 0;
        for (;;) {
            size_t len = strcspn(s, ",");
            if (add_tag(name, s, len, out, &count, e) != 0) return -1;
            if (!s[len]) return 0;
            s += len + 1;
        }
    }
    if (!cJSON_IsArray(item))
        return api_fail(e, 400, "bad_value", name, "%s must be an array of strings or \"a,b\", got %s", name,
                        value_text(item, shown, sizeof shown));
    cJSON_ArrayForEach(t, item) {
        if (!cJSON_IsString(t))
            return api_fail(e, 400, "bad_value", name, "%s must be an array of strings, got an element %s", name,
                            value_text(t, shown, sizeof shown));
        if (add_tag(name, t->valuestring, strlen(t->valuestring), out, &count, e) != 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- per-sequence lengths -- */

#define LENGTHS_FORMS "a list of lengths (128,512,77, or a JSON array) or a distribution (uniform:MIN:MAX, or " \
                      "{\"dist\":\"uniform\",\"min\":MIN,\"max\":MAX})"

/* One length, from a JSON number or text, as get_ll reads integers; `which` says where it is
 * in the value ("[2]", ".min"). Refusals name the parameter as their field. */
static int get_length(const cJSON *item, const char *name, const char *which, long long *out, api_error *e)
{
    char where[64];

    snprintf(where, sizeof where, "%s%s", name, which);
    if (get_ll(item, where, 0, RUN_MAX_TOKENS, out, e) != 0) {
        snprintf(e->field, sizeof e->field, "%s", name);
        return -1;
    }
    return 0;
}

/* A length spelled in text: the query's "128" out of "128,512,77". */
static int get_length_text(const char *text, size_t n, const char *name, const char *which, long long *out,
                           api_error *e)
{
    char piece[32];
    cJSON item;

    memset(&item, 0, sizeof item);
    item.type = cJSON_String;
    snprintf(piece, sizeof piece, "%.*s", (int)(n < sizeof piece - 1 ? n : sizeof piece - 1), text);
    if (n >= sizeof piece) piece[sizeof piece - 2] = 'x'; /* too long for any length: refused as spelled */
    item.valuestring = piece;
    return get_length(&item, name, which, out, e);
}

static int lengths_add(run_seqlens *sl, const char *name, long long x, api_error *e)
{
    if (sl->count >= RUN_MAX_SEQS)
        return api_fail(e, 400, "out_of_range", name, "%s lists more than %d lengths (a ragged batch has at most %d "
                        "sequences)", name, RUN_MAX_SEQS, RUN_MAX_SEQS);
    sl->len[sl->count++] = (int32_t)x;
    return 0;
}

static int lengths_uniform(run_seqlens *sl, const char *name, long long lo, long long hi, api_error *e)
{
    if (lo > hi)
        return api_fail(e, 400, "out_of_range", name, "%s: uniform min %lld is above max %lld", name, lo, hi);
    sl->kind = RUN_SEQLENS_UNIFORM, sl->min = lo, sl->max = hi;
    return 0;
}

/* The text form: "128,512,77" or "uniform:MIN:MAX". */
static int lengths_from_text(run_seqlens *sl, const char *name, const char *s, api_error *e)
{
    const char *colon = strchr(s, ':');
    char which[24];
    long long x, lo, hi;

    /* "t4": a resident int32 tensor holds them (its values come later: run_request_tensor_lengths) */
    if (s[0] == 't' && s[1] && strlen(s) < sizeof sl->tensor && strspn(s + 1, "0123456789") == strlen(s + 1)) {
        sl->kind = RUN_SEQLENS_TENSOR;
        snprintf(sl->tensor, sizeof sl->tensor, "%s", s);
        return 0;
    }
    if (colon) {
        const char *second = strchr(colon + 1, ':');
        if ((size_t)(colon - s) != strlen("uniform") || strncmp(s, "uniform", (size_t)(colon - s)) != 0)
            return api_fail(e, 400, "bad_value", name, "%s: unknown distribution '%.*s' (uniform:MIN:MAX); %s takes "
                            LENGTHS_FORMS, name, (int)((colon - s) > 20 ? 20 : colon - s), s, name);
        if (!second || strchr(second + 1, ':'))
            return api_fail(e, 400, "bad_value", name, "%s must be uniform:MIN:MAX, got '%.40s'", name, s);
        if (get_length_text(colon + 1, (size_t)(second - colon - 1), name, ".min", &lo, e) != 0 ||
            get_length_text(second + 1, strlen(second + 1), name, ".max", &hi, e) != 0)
            return -1;
        return lengths_uniform(sl, name, lo, hi, e);
    }
    if (!s[0]) return api_fail(e, 400, "bad_value", name, "%s is empty; it takes " LENGTHS_FORMS, name);
    sl->kind = RUN_SEQLENS_LIST;
    for (;;) {
        size_t n = strcspn(s, ",");
        snprintf(which, sizeof which, "[%d]", sl->count);
        if (get_length_text(s, n, name, which, &x, e) != 0 || lengths_add(sl, name, x, e) != 0) return -1;
        if (!s[n]) return 0;
        s += n + 1;
    }
}

/* The JSON forms: an array of integers, or {"dist":"uniform","min":MIN,"max":MAX}. */
static int lengths_from_json(run_seqlens *sl, const char *name, const cJSON *item, api_error *e)
{
    char which[24], shown[64];
    const cJSON *x, *dist = NULL, *lo = NULL, *hi = NULL;
    long long v, a, b;

    if (cJSON_IsArray(item)) {
        sl->kind = RUN_SEQLENS_LIST;
        cJSON_ArrayForEach(x, item) {
            snprintf(which, sizeof which, "[%d]", sl->count);
            if (!cJSON_IsNumber(x))
                return api_fail(e, 400, "bad_value", name, "%s%s must be an integer, got %s", name, which,
                                value_text(x, shown, sizeof shown));
            if (get_length(x, name, which, &v, e) != 0 || lengths_add(sl, name, v, e) != 0) return -1;
        }
        if (sl->count == 0) return api_fail(e, 400, "bad_value", name, "%s is an empty list", name);
        return 0;
    }
    cJSON_ArrayForEach(x, item) {
        const char *key = x->string ? x->string : "";
        if (!strcmp(key, "dist")) dist = x;
        else if (!strcmp(key, "min")) lo = x;
        else if (!strcmp(key, "max")) hi = x;
        else
            return api_fail(e, 400, "bad_value", name, "%s has no member '%.40s' (a distribution has dist, min, max)",
                            name, key);
    }
    if (!cJSON_IsString(dist) || strcmp(dist->valuestring, "uniform") != 0)
        return api_fail(e, 400, "bad_value", name, "%s.dist must be \"uniform\", got %s", name,
                        dist ? value_text(dist, shown, sizeof shown) : "nothing");
    if (!lo || !hi) return api_fail(e, 400, "bad_value", name, "%s: a uniform distribution needs min and max", name);
    if (get_length(lo, name, ".min", &a, e) != 0 || get_length(hi, name, ".max", &b, e) != 0) return -1;
    return lengths_uniform(sl, name, a, b, e);
}

/* The lengths of each sequence of a distribution, drawn from the run's seed (docs/inputs.md):
 * length b = min + draw_b mod (max - min + 1), draw_b the b-th of the side's own stream. */
static void lengths_draw(run_seqlens *sl, uint64_t seed, int stream, int64_t batch)
{
    uint64_t key = seeded_stream_key(seed, stream), span = (uint64_t)(sl->max - sl->min) + 1;
    int64_t b;

    for (b = 0; b < batch; b++) sl->len[b] = (int32_t)(sl->min + (int64_t)(seeded_draw(key, (uint64_t)b) % span));
}

/* ---------------------------------------------------------------- the table ------------ */

static int set_backend(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int set_device(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int set_seq(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int set_causal(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int put_causal(cJSON *params, const run_request *r, const run_param *p);
static int set_mask(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int put_mask(cJSON *params, const run_request *r, const run_param *p);
static int set_scale(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int set_impl(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int set_window(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int put_window(cJSON *params, const run_request *r, const run_param *p);
static int set_seqlens(run_request *r, const run_param *p, const run_value *v, api_error *e);
static int put_seqlens(cJSON *params, const run_request *r, const run_param *p);

#define AT(f) .offset = offsetof(run_request, f), .size = sizeof(((run_request *)0)->f)

/* Every parameter a client may send, in the order they are read, written to "params" and
 * listed in docs/api.md. Order matters where a setter reads an earlier row: backend first
 * (impl), seq before seq_q and seq_kv (they override it), causal before mask (mask must
 * agree). Checks across rows come after the table: check_size, check_iters, check_times. */
const run_param run_request_params[] = {
    {.name = "backend", .type = RUN_PARAM_STRING, .flags = RUN_PARAM_REQUIRED, .set = set_backend,
     .meaning = "the variant: a name from `GET /v1/variants`"},
    {.name = "device", .type = RUN_PARAM_STRING, AT(device), .set = set_device,
     .def_doc = "`cuda:0` for GPU variants, `cpu` for cpu variants", .meaning = "`cpu` or `cuda:N`"},
    {.name = "model", .type = RUN_PARAM_STRING, AT(model), .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "a preset of `GET /v1/models`: its `heads`, `kv_heads`, `head_dim`, `head_dim_v`, `window` "
                "and `scale`, each unless given too ([Model presets](#model-presets))"},
    {.name = "batch", .type = RUN_PARAM_INT, AT(problem.batch), .min = 1, .max = RUN_MAX_DIM, .def = "8",
     .given = RUN_GIVEN_BATCH, .meaning = "sequences"},
    {.name = "heads", .type = RUN_PARAM_INT, AT(problem.heads), .min = 1, .max = RUN_MAX_DIM, .def = "16",
     .given = RUN_GIVEN_HEADS, .meaning = "attention heads (of the queries)"},
    {.name = "kv_heads", .type = RUN_PARAM_INT, AT(problem.kv_heads), .min = 1, .max = RUN_MAX_DIM,
     .flags = RUN_PARAM_OMIT_UNSET, .def_doc = "`heads`", .given = RUN_GIVEN_KV_HEADS,
     .meaning = "heads of k and v, dividing `heads`: grouped-query attention, `1` is multi-query; query head h "
                "reads K/V head h/(heads/kv_heads)"},
    {.name = "seq", .type = RUN_PARAM_INT, .min = 1, .max = RUN_MAX_DIM, .def = "1024", .set = set_seq,
     .flags = RUN_PARAM_NOT_IN_PARAMS, .given = RUN_GIVEN_SEQ_Q | RUN_GIVEN_SEQ_KV,
     .meaning = "sets `seq_q` and `seq_kv` (`params` has those)"},
    {.name = "seq_q", .type = RUN_PARAM_INT, AT(problem.seq_q), .min = 1, .max = RUN_MAX_DIM, .def_doc = "`seq`",
     .given = RUN_GIVEN_SEQ_Q, .meaning = "query length; overrides `seq`"},
    {.name = "seq_kv", .type = RUN_PARAM_INT, AT(problem.seq_kv), .min = 1, .max = RUN_MAX_DIM, .def_doc = "`seq`",
     .given = RUN_GIVEN_SEQ_KV, .meaning = "key and value length; overrides `seq`"},
    {.name = "head_dim", .type = RUN_PARAM_INT, AT(problem.head_dim), .min = 1, .max = RUN_MAX_DIM, .def = "64",
     .given = RUN_GIVEN_HEAD_DIM, .meaning = "head dimension of q and k, where the backend supports it"},
    {.name = "head_dim_v", .type = RUN_PARAM_INT, AT(problem.head_dim_v), .min = 1, .max = RUN_MAX_DIM,
     .flags = RUN_PARAM_OMIT_UNSET, .def_doc = "`head_dim`", .given = RUN_GIVEN_HEAD_DIM_V,
     .meaning = "head dimension of v and the output"},
    {.name = "dtype", .type = RUN_PARAM_ENUM, AT(problem.dtype), .values = "bf16|fp16|fp32", .def = "bf16",
     .given = RUN_GIVEN_DTYPE, .meaning = "element type of q, k, v and the output"},
    {.name = "causal", .type = RUN_PARAM_BOOL, .def = "true", .set = set_causal, .put = put_causal,
     .given = RUN_GIVEN_CAUSAL,
     .meaning = "short for `mask`: `true` is `causal`, `false` is `none`; given with `mask`, the two must agree"},
    {.name = "mask", .type = RUN_PARAM_ENUM, AT(problem.mask), .values = "none|causal|causal_bottom_right",
     .def = "causal", .set = set_mask, .put = put_mask,
     .meaning = "`causal` is top-left aligned (PyTorch `is_causal`), `causal_bottom_right` FlashAttention-2's"},
    {.name = "window", .type = RUN_PARAM_INT, .min = 0, .max = RUN_MAX_DIM, .set = set_window, .put = put_window,
     .def_doc = "none", .units = "keys", .given = RUN_GIVEN_WINDOW,
     .meaning = "sliding window: keys more than `window` positions before a query's position are masked too "
                "(FlashAttention's `window_size=(window, 0)`; [Windows](#grouped-kv-heads-value-head-dims-sliding-windows))"},
    {.name = "page_size", .type = RUN_PARAM_INT, AT(problem.page_size), .min = 0, .max = RUN_MAX_PAGE_SIZE,
     .flags = RUN_PARAM_OMIT_UNSET, .def_doc = "0: contiguous", .units = "tokens",
     .meaning = "a paged K/V cache: k and v as `[num_pages, page_size, kv_heads, head_dim]` and a block table per "
                "sequence (vLLM's and FlashInfer's layout; [Paged K/V caches](#paged-kv-caches))"},
    {.name = "num_pages", .type = RUN_PARAM_INT, AT(problem.num_pages), .min = 1, .max = RUN_MAX_TOKENS,
     .flags = RUN_PARAM_OMIT_UNSET, .def_doc = "the pages needed and a quarter more", .given = RUN_GIVEN_NUM_PAGES,
     .meaning = "pages the paged cache holds, at least the sequences fill (Σ ⌈Skv_b / page_size⌉); only with "
                "`page_size`"},
    {.name = "seqlens_q", .type = RUN_PARAM_LENGTHS, AT(seqlens_q), .flags = RUN_PARAM_OMIT_UNSET,
     .set = set_seqlens, .put = put_seqlens, .def_doc = "every sequence `seq_q`",
     .meaning = "query length of each sequence: `128,512,77` (a JSON array in a body), `uniform:MIN:MAX` "
                "(`{\"dist\":\"uniform\",\"min\":MIN,\"max\":MAX}`), drawn from `seed`, or a resident int32 "
                "tensor `[batch]` by id (`t4`); a ragged batch ([Ragged batches](#ragged-batches))"},
    {.name = "seqlens_kv", .type = RUN_PARAM_LENGTHS, AT(seqlens_kv), .flags = RUN_PARAM_OMIT_UNSET,
     .set = set_seqlens, .put = put_seqlens, .def_doc = "every sequence `seq_kv`",
     .meaning = "key and value length of each sequence, likewise"},
    {.name = "scale", .type = RUN_PARAM_NUMBER, AT(problem.scale), .min = -RUN_MAX_SCALE, .max = RUN_MAX_SCALE,
     .flags = RUN_PARAM_NONZERO, .set = set_scale, .given = RUN_GIVEN_SCALE, .def_doc = "1/sqrt(`head_dim`)",
     .meaning = "multiplies the scores; beyond 10^4 they overflow fp16, then fp32, and the output is NaN"},
    {.name = "seed", .type = RUN_PARAM_SEED, AT(seed), .def = "0",
     .meaning = "of the generated inputs; in a JSON body from 2^53 on as a decimal string"},
    {.name = "warmup", .type = RUN_PARAM_INT, AT(warmup), .min = 0, .max = RUN_MAX_WARMUP, .def = "5",
     .units = "forwards", .meaning = "forwards before timing"},
    {.name = "iters", .type = RUN_PARAM_INT, AT(iters), .min = 0, .max = RUN_MAX_ITERS, .def = "0",
     .units = "forwards", .meaning = "0: the stopping rule below, else exactly this many timed forwards"},
    {.name = "min_iters", .type = RUN_PARAM_INT, AT(min_iters), .min = 1, .max = RUN_MAX_ITERS, .def = "10",
     .units = "forwards", .meaning = "the stopping rule times at least this many; at most `max_iters`"},
    {.name = "max_iters", .type = RUN_PARAM_INT, AT(max_iters), .min = 1, .max = RUN_MAX_ITERS, .def = "1000",
     .units = "forwards", .meaning = "the stopping rule times at most this many"},
    {.name = "min_time_ms", .type = RUN_PARAM_NUMBER, AT(min_time_ms), .min = 0, .max = RUN_MAX_TIME_MS, .def = "20",
     .units = "ms", .meaning = "the stopping rule times at least this long; at most `max_time_ms`"},
    {.name = "max_time_ms", .type = RUN_PARAM_NUMBER, AT(max_time_ms), .min = 0, .max = RUN_MAX_TIME_MS,
     .def = "2000", .units = "ms", .meaning = "the stopping rule times at most this long"},
    {.name = "target_noise", .type = RUN_PARAM_NUMBER, AT(target_noise), .min = 0, .max = 1, .flags = RUN_PARAM_OPEN,
     .def = "0.005",
     .meaning = "stop once `timing.rse`, the relative standard error of the mean, is at or below it"},
    {.name = "cache", .type = RUN_PARAM_ENUM, AT(cache_cold), .values = "hot|cold", .def = "hot",
     .meaning = "`cold`: flush L2 before every timed forward, outside the timing; GPU only: `cold` on the cpu "
                "device is 422 `not_applicable`"},
    {.name = "graph", .type = RUN_PARAM_BOOL, AT(graph), .def = "false",
     .meaning = "time replays of a captured CUDA graph of one forward; GPU only: `true` on the cpu device is "
                "422 `not_applicable`"},
    {.name = "verify", .type = RUN_PARAM_BOOL, AT(verify), .def = "false",
     .meaning = "compare the output with the fp64 reference"},
    {.name = "profile", .type = RUN_PARAM_BOOL, AT(profile), .def = "true",
     .meaning = "one extra forward under CUPTI for the kernel table (and the trace, on a GPU)"},
    {.name = "verify_cpu_max_macs", .type = RUN_PARAM_INT, AT(verify_cpu_max_macs), .min = 0, .max = 1e15,
     .def = "1000000000", .def_doc = "the setting", .units = "MACs", .flags = RUN_PARAM_SERVER_SET,
     .meaning = "accepted so a stored `params` object can be posted back; the server's setting always applies"},
    {.name = "async", .type = RUN_PARAM_BOOL, AT(async_run), .def = "false", .flags = RUN_PARAM_NOT_IN_PARAMS,
     .meaning = "answer 202 at once and run in the background ([Async jobs](#async-jobs)); not kept in `params`"},
    {.name = "impl", .type = RUN_PARAM_STRING, AT(impl), .flags = RUN_PARAM_OMIT_UNSET, .set = set_impl,
     .def_doc = "the backend's default",
     .meaning = "the kernel family: one of the backend's `impls` in `GET /v1/variants`; other backends have one "
                "and refuse it; the record's `impl_used` says which ran ([below](#implementations))"},
    {.name = "fault", .type = RUN_PARAM_STRING, AT(fault), .values = "crash|hang|sticky",
     .flags = RUN_PARAM_FAULT_ONLY | RUN_PARAM_OMIT_UNSET,
     .meaning = "only when the server runs with `enable_fault_injection` (tests), else an unknown parameter"},
    {.name = "q", .type = RUN_PARAM_TENSOR, AT(q_tensor), .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "the queries: a resident tensor ([below](#resident-tensors)) instead of generated ones"},
    {.name = "k", .type = RUN_PARAM_TENSOR, AT(k_tensor), .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "the keys, likewise"},
    {.name = "v", .type = RUN_PARAM_TENSOR, AT(v_tensor), .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "the values, likewise"},
    {.name = "block_table", .type = RUN_PARAM_TENSOR, AT(block_table_tensor), .flags = RUN_PARAM_OMIT_UNSET,
     .def_doc = "drawn from `seed`",
     .meaning = "a paged cache's block table: a resident int32 tensor `[batch, pages per sequence]`; only with "
                "`page_size` ([Paged K/V caches](#paged-kv-caches))"},
    {.name = "keep_output", .type = RUN_PARAM_BOOL, AT(keep_output), .def = "false", .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "keep the output as a new resident tensor: `\"output\": {…, \"tensor\": ID}`"},
    {.name = "output_tensor", .type = RUN_PARAM_TENSOR, AT(output_tensor),
     .flags = RUN_PARAM_SERVER_SET | RUN_PARAM_OMIT_UNSET,
     .meaning = "accepted so a stored `params` object can be posted back; the server chooses the kept output's id"},
    {.name = "tags", .type = RUN_PARAM_TAGS, AT(tags), .flags = RUN_PARAM_OMIT_UNSET,
     .meaning = "labels to find the run by ([History](#history): `GET /v1/runs?tag=`): `tags=a,b` in the query, "
                "`\"tags\": [\"a\", \"b\"]` in a body; `params.tags` keeps them as an array"},
};
#define RUN_PARAM_COUNT (sizeof run_request_params / sizeof run_request_params[0])
const size_t run_request_params_count = RUN_PARAM_COUNT;

/* ---------------------------------------------------------------- reading a row --------- */

/* The index of word s in values ("a|b|c"), or -1. */
static int word_index(const char *values, const char *s)
{
    size_t n = strlen(s);
    int k = 0;

    for (;;) {
        const char *bar = strchr(values, '|');
        size_t len = bar ? (size_t)(bar - values) : strlen(values);
        if (len == n && !memcmp(values, s, n)) return k;
        if (!bar) return -1;
        values = bar + 1, k++;
    }
}

/* Word k of values into buf; "" when there is none. */
static const char *word_at(const char *values, long long k, char *buf, size_t len)
{
    long long j;

    buf[0] = '\0';
    for (j = 0; values && j < k; j++)
        if ((values = strchr(values, '|'))) values++;
    if (values && k >= 0) snprintf(buf, len, "%.*s", (int)strcspn(values, "|"), values);
    return buf;
}

/* The words of values as a message says them, "a, b or c", or as docs/api.md lists them,
 * "`a`, `b`, `c`" (as_docs). */
static const char *words_text(const char *values, int as_docs, char *buf, size_t len)
{
    size_t n = 0, k, count = 1;
    const char *p;

    for (p = values; (p = strchr(p, '|')); p++) count++;
    buf[0] = '\0';
    for (k = 0, p = values; k < count && n < len; k++) {
        int w = (int)strcspn(p, "|");
        const char *sep = k == 0 ? "" : as_docs ? ", " : k + 1 == count ? " or " : ", ";
        n += (size_t)snprintf(buf + n, len - n, as_docs ? "%s`%.*s`" : "%s%.*s", sep, w, p);
        p += w + 1;
    }
    return buf;
}

/* Read item as p's type and check it against p's bounds or words. 0, or -1 with e. */
static int read_value(const run_param *p, const cJSON *item, run_value *v, api_error *e)
{
    char list[200];
    int b = 0;

    memset(v, 0, sizeof *v);
    switch (p->type) {
    case RUN_PARAM_INT:
        return get_ll(item, p->name, (long long)p->min, (long long)p->max, &v->i, e);
    case RUN_PARAM_SEED:
        return get_seed(item, p->name, &v->u, e);
    case RUN_PARAM_NUMBER:
        if (get_double(item, p->name, &v->d, e) != 0) return -1;
        if (p->flags & RUN_PARAM_OPEN) {
            if (!(v->d > p->min && v->d < p->max))
                return api_fail(e, 400, "out_of_range", p->name, "%s %g is out of range (%g < %s < %g)", p->name, v->d,
                                p->min, p->name, p->max);
        } else if (v->d < p->min || v->d > p->max || ((p->flags & RUN_PARAM_NONZERO) && v->d == 0.0)) {
            return api_fail(e, 400, "out_of_range", p->name, "%s %.17g is out of range (%s%g..%g)", p->name, v->d,
                            p->flags & RUN_PARAM_NONZERO ? "nonzero, " : "", p->min, p->max);
        }
        return 0;
    case RUN_PARAM_BOOL:
        if (get_bool(item, p->name, &b, e) != 0) return -1;
        v->i = b;
        return 0;
    case RUN_PARAM_LENGTHS: /* its set reads every form */
        v->json = item;
        return 0;
    case RUN_PARAM_TAGS:
        return get_tags(item, p->name, v->text, e);
    case RUN_PARAM_ENUM:
    case RUN_PARAM_STRING:
    case RUN_PARAM_TENSOR:
        if (get_string(item, p->name, &v->s, e) != 0) return -1;
        break;
    }
    if (p->values && (v->i = word_index(p->values, v->s)) < 0)
        return api_fail(e, 400, "bad_value", p->name, "%s must be %s, got '%.40s'", p->name,
                        words_text(p->values, 0, list, sizeof list), v->s);
    if (p->type == RUN_PARAM_TENSOR) { /* "t" and a decimal number (server/front/tensors/tensor_table.c) */
        const char *s = v->s;
        if (s[0] != 't' || !s[1] || strlen(s) >= p->size || strspn(s + 1, "0123456789") != strlen(s + 1))
            return api_fail(e, 400, "bad_value", p->name,
                            "%s must be a tensor id like t4 (from POST /v1/tensors), got '%.40s'", p->name, s);
    }
    return 0;
}

/* Store v in p's field (memcpy: the fields are int, enums, int64_t, long long, double). */
static void store_value(run_request *r, const run_param *p, const run_value *v)
{
    char *field = (char *)r + p->offset;
    int32_t i32 = (int32_t)v->i;
    int64_t i64 = v->i;

    switch (p->type) {
    case RUN_PARAM_INT:
    case RUN_PARAM_BOOL:
    case RUN_PARAM_ENUM:
        if (p->size == sizeof i32)
            memcpy(field, &i32, sizeof i32);
        else
            memcpy(field, &i64, sizeof i64);
        break;
    case RUN_PARAM_SEED:
        memcpy(field, &v->u, sizeof v->u);
        break;
    case RUN_PARAM_NUMBER:
        memcpy(field, &v->d, sizeof v->d);
        break;
    case RUN_PARAM_STRING:
    case RUN_PARAM_TENSOR:
        snprintf(field, p->size, "%s", v->s);
        break;
    case RUN_PARAM_TAGS:
        snprintf(field, p->size, "%s", v->text);
        break;
    case RUN_PARAM_LENGTHS: /* always placed by its set */
        break;
    }
}

/* The integer in p's field (INT, BOOL, ENUM). */
static long long load_int(const run_request *r, const run_param *p)
{
    const char *field = (const char *)r + p->offset;
    int32_t i32;
    int64_t i64;

    if (p->size == sizeof i32) return memcpy(&i32, field, sizeof i32), i32;
    return memcpy(&i64, field, sizeof i64), i64;
}

/* Read one row's value (item NULL: not given) into r. 0, or -1 with e. */
static int parse_row(run_request *r, const run_param *p, const cJSON *item, api_error *e)
{
    run_value v;

    if (!item) return p->flags & RUN_PARAM_REQUIRED ? p->set(r, p, NULL, e) : 0;
    if (read_value(p, item, &v, e) != 0) return -1;
    if (p->set) {
        if (p->set(r, p, &v, e) != 0) return -1;
    } else {
        store_value(r, p, &v);
    }
    r->given |= p->given;
    return 0;
}

/* ---------------------------------------------------------------- the setters ----------- */

static int set_backend(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    const variant_info *vi;
    char known[400];
    size_t i, n = 0;

    if (!v)
        return api_fail(e, 400, "missing_parameter", p->name,
                        "backend is required (GET /v1/variants lists them), e.g. backend=math");
    vi = strlen(v->s) < sizeof r->backend ? variant_info_find(v->s) : NULL;
    if (vi) {
        snprintf(r->backend, sizeof r->backend, "%s", vi->name);
        return 0;
    }
    known[0] = '\0';
    for (i = 0; i < variant_infos_count && n < sizeof known; i++)
        n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", variant_infos[i]->name);
    return api_fail(e, 400, "unknown_backend", p->name, "unknown backend '%.40s'; known: %s", v->s, known);
}

static int set_device(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    if (strlen(v->s) >= sizeof r->device)
        return api_fail(e, 400, "bad_device", p->name, "device must be cpu or cuda:N, got '%.40s'", v->s);
    snprintf(r->device, sizeof r->device, "%s", v->s);
    return 0;
}

static int set_seq(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    r->problem.seq_q = r->problem.seq_kv = v->i; /* seq_q and seq_kv, read after it, override it */
    return 0;
}

/* causal is the short form of mask, and read before it: it sets the mask, and mask, when given
 * too, must agree with it. */
static int set_causal(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    r->problem.mask = v->i ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
    return 0;
}

static int set_mask(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    int causal = r->problem.mask != ATTN_MASK_NONE;

    if ((r->given & RUN_GIVEN_CAUSAL) && causal != (v->i != ATTN_MASK_NONE))
        return api_fail(e, 400, "conflict", "causal", "causal=%s contradicts mask=%s", causal ? "true" : "false",
                        attn_mask_name((attn_mask)v->i));
    r->problem.mask = (attn_mask)v->i;
    return 0;
}

/* "params" has mask, then causal as it follows from the mask: put_mask writes both. */
static int put_causal(cJSON *params, const run_request *r, const run_param *p) { return 0; }

static int put_mask(cJSON *params, const run_request *r, const run_param *p)
{
    int ok = cJSON_AddStringToObject(params, p->name, attn_mask_name(r->problem.mask)) &&
             cJSON_AddBoolToObject(params, "causal", r->problem.mask != ATTN_MASK_NONE);
    return ok ? 0 : -1;
}

static int set_scale(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    r->problem.scale = v->d;
    r->scale_given = 1;
    return 0;
}

/* One of the backend's implementations (the backend row comes first). */
static int set_impl(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    char why[300];

    if (variant_info_impl_check(variant_info_find(r->backend), v->s, why, sizeof why) != 0)
        return api_fail(e, 400, "bad_value", p->name, "%s", why);
    snprintf(r->impl, sizeof r->impl, "%s", v->s);
    /* the problem carries it too: a family's own limits and workspace (variant_info.h) */
    r->problem.impl = variant_info_impl_find(variant_info_find(r->backend), v->s) + 1;
    return 0;
}

/* The window is kept as the number of keys a query sees (attn.h): window + 1. */
static int set_window(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    r->problem.window_keys = v->i + 1;
    return 0;
}

static int put_window(cJSON *params, const run_request *r, const run_param *p)
{
    if (r->problem.window_keys <= 0) return 0;
    return cJSON_AddNumberToObject(params, p->name, (double)(r->problem.window_keys - 1)) ? 0 : -1;
}

/* seqlens_q and seqlens_kv: the row's field is a run_seqlens. The lengths are checked against
 * batch and the bounds, and drawn, once every row is read (resolve_serving). */
static int set_seqlens(run_request *r, const run_param *p, const run_value *v, api_error *e)
{
    run_seqlens *sl = (run_seqlens *)((char *)r + p->offset);
    char shown[64];

    sl->kind = RUN_SEQLENS_NONE, sl->count = 0;
    if (cJSON_IsString(v->json)) return lengths_from_text(sl, p->name, v->json->valuestring, e);
    if (cJSON_IsArray(v->json) || cJSON_IsObject(v->json)) return lengths_from_json(sl, p->name, v->json, e);
    return api_fail(e, 400, "bad_value", p->name, "%s must be %s, got %s", p->name, LENGTHS_FORMS,
                    value_text(v->json, shown, sizeof shown));
}

/* As given: a list as a JSON array, a distribution as its object, a tensor as its id. */
static int put_seqlens(cJSON *params, const run_request *r, const run_param *p)
{
    const run_seqlens *sl = (const run_seqlens *)((const char *)r + p->offset);
    cJSON *o;
    int i, ok = 1;

    if (sl->kind == RUN_SEQLENS_LIST) {
        if (!(o = cJSON_AddArrayToObject(params, p->name))) return -1;
        for (i = 0; ok && i < sl->count; i++) ok = cJSON_AddItemToArray(o, cJSON_CreateNumber(sl->len[i]));
        return ok ? 0 : -1;
    }
    if (sl->kind == RUN_SEQLENS_TENSOR) return cJSON_AddStringToObject(params, p->name, sl->tensor) ? 0 : -1;
    if (sl->kind == RUN_SEQLENS_UNIFORM) {
        if (!(o = cJSON_AddObjectToObject(params, p->name))) return -1;
        ok = cJSON_AddStringToObject(o, "dist", "uniform") && cJSON_AddNumberToObject(o, "min", (double)sl->min) &&
             cJSON_AddNumberToObject(o, "max", (double)sl->max);
        return ok ? 0 : -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- names ----------------- */

static const run_param *param_row(const char *name)
{
    size_t i;
    for (i = 0; i < RUN_PARAM_COUNT; i++)
        if (!strcmp(run_request_params[i].name, name)) return &run_request_params[i];
    return NULL;
}

static int param_known(const char *name, int allow_faults)
{
    const run_param *p = param_row(name);
    return p && (allow_faults || !(p->flags & RUN_PARAM_FAULT_ONLY));
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
            const run_param *p = &run_request_params[i];
            if ((p->flags & RUN_PARAM_FAULT_ONLY) && !allow_faults) continue;
            if (((p->flags & RUN_PARAM_SERVER_SET) != 0) != pass) continue;
            n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "%s%s",
                                  n && n <= sizeof known && known[n - 1] != ' ' ? ", " : "", p->name);
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

/* ---------------------------------------------------------------- across parameters ----- */

/* Σ over a ragged batch's sequences of Sq_b·Skv_b: its score matrices' size (per head). */
static int64_t ragged_pairs(const run_request *r)
{
    int64_t b, sum = 0;
    for (b = 0; b < r->problem.batch; b++) sum += (int64_t)r->seqlens_q.len[b] * r->seqlens_kv.len[b];
    return sum;
}

/* Every tensor, the scores included, at most RUN_MAX_ELEMS elements: a ragged batch's of its
 * real tokens, a paged cache all its pages. */
static int check_size(const run_request *r, api_error *e)
{
    const attn_problem *p = &r->problem;
    const int64_t d = p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p);
    const int ragged = p->ragged != 0;
    /* below 2^31 · 2^31 even for 4096 sequences: Σ Sq_b·Skv_b ≤ total_q · seq_kv */
    const int64_t pairs = ragged ? ragged_pairs(r) : 0;
    const struct {
        const char *what, *field;
        int64_t a, b, c, d;
        int applies;
    } t[4] = {
        {"q and out (batch*heads*seq_q*head_dim)", "seq_q", p->batch, p->heads, p->seq_q, d, !ragged},
        {"k and v (batch*heads*seq_kv*head_dim)", "seq_kv", p->batch, p->heads, p->seq_kv, d, !ragged},
        {"the scores (batch*heads*seq_q*seq_kv)", "seq_kv", p->batch, p->heads, p->seq_q, p->seq_kv, !ragged},
        {"the paged cache (num_pages*page_size*heads*head_dim)", "num_pages", p->num_pages, p->page_size, p->heads, d,
         p->page_size > 0},
    };
    const struct {
        const char *what, *field;
        int64_t a, b, c;
    } u[3] = {
        {"q and out (tokens*heads*head_dim)", "seqlens_q", p->total_q, p->heads, d},
        {"k and v (tokens*heads*head_dim)", "seqlens_kv", p->total_kv, p->heads, d},
        {"the scores (sum of seq_q*seq_kv over the sequences, *heads)", "seqlens_kv", pairs, p->heads, 1},
    };
    int i;

    for (i = 0; i < 4; i++) {
        int64_t x;
        if (!t[i].applies) continue;
        if (__builtin_mul_overflow(t[i].a, t[i].b, &x) || __builtin_mul_overflow(x, t[i].c, &x) ||
            __builtin_mul_overflow(x, t[i].d, &x) || x > RUN_MAX_ELEMS)
            return api_fail(e, 400, "out_of_range", t[i].field,
                            "%s would have more than %lld elements (batch %lld, heads %lld, seq_q %lld, seq_kv %lld, "
                            "head_dim %lld%s)",
                            t[i].what, (long long)RUN_MAX_ELEMS, (long long)p->batch, (long long)p->heads,
                            (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim,
                            i == 3 ? ", a paged cache" : "");
    }
    for (i = 0; ragged && i < 3; i++) {
        int64_t x;
        if (__builtin_mul_overflow(u[i].a, u[i].b, &x) || __builtin_mul_overflow(x, u[i].c, &x) || x > RUN_MAX_ELEMS)
            return api_fail(e, 400, "out_of_range", u[i].field,
                            "%s would have more than %lld elements (a ragged batch of %lld query and %lld key tokens, "
                            "heads %lld, head_dim %lld)",
                            u[i].what, (long long)RUN_MAX_ELEMS, (long long)p->total_q, (long long)p->total_kv,
                            (long long)p->heads, (long long)d);
    }
    return 0;
}

static int check_iters(const run_request *r, api_error *e)
{
    if (r->min_iters > r->max_iters)
        return api_fail(e, 400, "out_of_range", "min_iters", "min_iters %d is above max_iters %d", r->min_iters,
                        r->max_iters);
    return 0;
}

static int check_times(const run_request *r, api_error *e)
{
    if (r->min_time_ms > r->max_time_ms)
        return api_fail(e, 400, "out_of_range", "min_time_ms", "min_time_ms %g is above max_time_ms %g",
                        r->min_time_ms, r->max_time_ms);
    return 0;
}

/* The preset of r->model fills what the client did not give itself (its given bits). 0, or
 * -1 with e: 400 for a model the presets do not have. */
static int apply_model(run_request *r, api_error *e)
{
    const model_preset *m;
    attn_problem *p = &r->problem;

    if (!r->model[0]) return 0;
    m = model_presets_find(r->model);
    if (!m)
        return api_fail(e, 400, "unknown_model", "model", "unknown model '%.40s': GET /v1/models lists the %d presets",
                        r->model, model_presets_count());
    if (!(r->given & RUN_GIVEN_HEADS)) p->heads = m->heads;
    if (!(r->given & RUN_GIVEN_KV_HEADS)) p->kv_heads = m->kv_heads;
    if (!(r->given & RUN_GIVEN_HEAD_DIM)) p->head_dim = m->head_dim;
    if (!(r->given & RUN_GIVEN_HEAD_DIM_V)) p->head_dim_v = m->head_dim_v;
    if (!(r->given & RUN_GIVEN_WINDOW)) p->window_keys = m->window >= 0 ? m->window + 1 : 0;
    if (!r->scale_given && m->scale > 0) {
        p->scale = m->scale;
        r->scale_given = 1; /* the model's, kept as given: resolve_scale leaves it */
    }
    return 0;
}

/* kv_heads divides heads (400 on the parameter, before any backend is asked). */
static int check_heads(const run_request *r, api_error *e)
{
    const attn_problem *p = &r->problem;

    if (p->kv_heads > 0 && p->heads % p->kv_heads != 0)
        return api_fail(e, 400, "bad_value", "kv_heads", "kv_heads %lld does not divide heads %lld", (long long)p->kv_heads,
                        (long long)p->heads);
    return 0;
}

/* One side of a ragged batch once batch is known: a list agrees with batch (and gives it, when
 * the client did not), a distribution is drawn; a side not given is all `bound`. */
static int seqlens_count(run_request *r, run_seqlens *sl, const char *name, api_error *e)
{
    attn_problem *p = &r->problem;

    if (sl->kind != RUN_SEQLENS_LIST && sl->kind != RUN_SEQLENS_TENSOR) return 0;
    if (!(r->given & RUN_GIVEN_BATCH)) {
        p->batch = sl->count; /* the list says how many sequences */
        r->given |= RUN_GIVEN_BATCH;
    } else if (p->batch != sl->count) {
        return api_fail(e, 400, "conflict", name, "%s %s %d lengths but batch is %lld (one length per sequence)",
                        name, sl->kind == RUN_SEQLENS_TENSOR ? "holds" : "lists", sl->count, (long long)p->batch);
    }
    return 0;
}

/* The bound of one side (seq_q or seq_kv): the longest sequence unless the client gave it,
 * then at least that; and the side's total, below 2^31. */
static int seqlens_bound(run_request *r, run_seqlens *sl, const char *name, const char *bound_name,
                         unsigned given_bit, int64_t *bound, int64_t *total, api_error *e)
{
    const attn_problem *p = &r->problem;
    int64_t b, longest = 0, at = 0, sum = 0;

    if (sl->kind == RUN_SEQLENS_NONE) { /* every sequence the bound */
        for (b = 0; b < p->batch; b++) sl->len[b] = (int32_t)(*bound < RUN_MAX_TOKENS ? *bound : RUN_MAX_TOKENS);
        if (*bound > RUN_MAX_TOKENS || *bound * p->batch > RUN_MAX_TOKENS)
            return api_fail(e, 400, "out_of_range", bound_name, "a ragged batch holds at most %lld tokens a side: batch "
                            "%lld x %s %lld is more", RUN_MAX_TOKENS, (long long)p->batch, bound_name, (long long)*bound);
        *total = *bound * p->batch;
        return 0;
    }
    for (b = 0; b < p->batch; b++) {
        sum += sl->len[b];
        if (sl->len[b] > longest) longest = sl->len[b], at = b;
    }
    if (sum > RUN_MAX_TOKENS)
        return api_fail(e, 400, "out_of_range", name, "%s adds up to %lld tokens, more than %lld (cu_seqlens are int32)",
                        name, (long long)sum, RUN_MAX_TOKENS);
    if (!(r->given & given_bit))
        *bound = longest > 0 ? longest : 1;
    else if (*bound < longest)
        return api_fail(e, 400, "out_of_range", name, "%s: sequence %lld has %lld tokens, more than %s %lld (leave "
                        "%s out to take the longest)", name, (long long)at, (long long)longest, bound_name,
                        (long long)*bound, bound_name);
    *total = sum;
    return 0;
}

/* A ragged batch (seqlens_q, seqlens_kv) and a paged cache (page_size, num_pages), checked
 * against batch and the bounds, once every row is read: lengths drawn, seq_q and seq_kv made
 * the longest (or checked), the totals, the pages. */
static int resolve_serving(run_request *r, api_error *e)
{
    attn_problem *p = &r->problem;
    int64_t needed = 0, pages_per_seq, b;

    if (r->seqlens_q.kind || r->seqlens_kv.kind) {
        if (seqlens_count(r, &r->seqlens_q, "seqlens_q", e) != 0 || seqlens_count(r, &r->seqlens_kv, "seqlens_kv", e))
            return -1;
        if (p->batch > RUN_MAX_SEQS)
            return api_fail(e, 400, "out_of_range", "batch", "a ragged batch has at most %d sequences, got batch %lld",
                            RUN_MAX_SEQS, (long long)p->batch);
        if (r->seqlens_q.kind == RUN_SEQLENS_UNIFORM) lengths_draw(&r->seqlens_q, r->seed, SEEDED_STREAM_SEQLENS_Q, p->batch);
        if (r->seqlens_kv.kind == RUN_SEQLENS_UNIFORM)
            lengths_draw(&r->seqlens_kv, r->seed, SEEDED_STREAM_SEQLENS_KV, p->batch);
        if (seqlens_bound(r, &r->seqlens_q, "seqlens_q", "seq_q", RUN_GIVEN_SEQ_Q, &p->seq_q, &p->total_q, e) != 0 ||
            seqlens_bound(r, &r->seqlens_kv, "seqlens_kv", "seq_kv", RUN_GIVEN_SEQ_KV, &p->seq_kv, &p->total_kv, e) != 0)
            return -1;
        p->ragged = (r->seqlens_q.kind ? ATTN_RAGGED_Q : 0u) | (r->seqlens_kv.kind ? ATTN_RAGGED_KV : 0u);
    }
    if (p->page_size <= 0) {
        if (p->num_pages > 0)
            return api_fail(e, 400, "conflict", "num_pages", "num_pages needs page_size: a cache of pages");
        if (r->block_table_tensor[0])
            return api_fail(e, 400, "conflict", "block_table", "block_table needs page_size: a cache of pages");
        return 0;
    }
    pages_per_seq = (p->seq_kv + p->page_size - 1) / p->page_size;
    if (pages_per_seq > RUN_MAX_TOKENS / p->batch)
        return api_fail(e, 400, "out_of_range", "page_size", "the block table (batch %lld x %lld pages of %lld tokens "
                        "for seq_kv %lld) would have more than %lld entries", (long long)p->batch,
                        (long long)pages_per_seq, (long long)p->page_size, (long long)p->seq_kv, RUN_MAX_TOKENS);
    if (p->ragged)
        for (b = 0; b < p->batch; b++) needed += (r->seqlens_kv.len[b] + p->page_size - 1) / p->page_size;
    else
        needed = p->batch * pages_per_seq;
    if (p->num_pages <= 0) { /* a quarter more than needed: pages the run never reads, as a serving cache has */
        p->num_pages = needed + (needed + 3) / 4;
        if (p->num_pages > RUN_MAX_TOKENS) p->num_pages = RUN_MAX_TOKENS;
        if (p->num_pages < 1) p->num_pages = 1;
    } else if (p->num_pages < needed && !r->block_table_tensor[0]) { /* an uploaded table may share pages */
        return api_fail(e, 400, "out_of_range", "num_pages", "num_pages %lld is fewer than the %lld pages of %lld tokens "
                        "the sequences fill", (long long)p->num_pages, (long long)needed, (long long)p->page_size);
    }
    return 0;
}

int run_request_resolve_serving(run_request *r, api_error *e)
{
    if (!(r->given & RUN_GIVEN_NUM_PAGES)) r->problem.num_pages = 0; /* the default, derived again */
    return resolve_serving(r, e) != 0 || check_size(r, e) != 0 ? -1 : 0;
}

/* A tensor's side is filled in once it has its values (a tensor of none is refused). */
int run_request_lengths_pending(const run_request *r)
{
    return (r->seqlens_q.kind == RUN_SEQLENS_TENSOR && r->seqlens_q.count == 0) ||
           (r->seqlens_kv.kind == RUN_SEQLENS_TENSOR && r->seqlens_kv.count == 0);
}

int run_request_tensor_lengths(run_request *r, run_seqlens *sl, const int32_t *len, int64_t n, api_error *e)
{
    const char *name = sl == &r->seqlens_q ? "seqlens_q" : "seqlens_kv";
    int64_t b;

    if (n < 1 || n > RUN_MAX_SEQS)
        return api_fail(e, 400, "out_of_range", name, "%s (tensor %s) holds %lld lengths; a ragged batch has 1 to %d "
                        "sequences", name, sl->tensor, (long long)n, RUN_MAX_SEQS);
    for (b = 0; b < n; b++)
        if (len[b] < 0)
            return api_fail(e, 400, "out_of_range", name, "%s (tensor %s): sequence %lld has length %d; lengths are "
                            "at least 0", name, sl->tensor, (long long)b, (int)len[b]);
    memcpy(sl->len, len, (size_t)n * sizeof *len);
    sl->count = (int)n;
    return 0;
}

/* The scale the client did not give: 1/sqrt(head_dim). */
static void resolve_scale(run_request *r)
{
    if (!r->scale_given) r->problem.scale = 1.0 / sqrt((double)r->problem.head_dim);
}

void run_request_model_overrides(const run_request *r, char *out, size_t len)
{
    const model_preset *m = r->model[0] ? model_presets_find(r->model) : NULL;
    const attn_problem *p = &r->problem;
    const struct {
        unsigned bit;
        const char *name;
        int differs;
    } fields[] = {
        {RUN_GIVEN_HEADS, "heads", m && p->heads != m->heads},
        {RUN_GIVEN_KV_HEADS, "kv_heads", m && attn_kv_heads(p) != m->kv_heads},
        {RUN_GIVEN_HEAD_DIM, "head_dim", m && p->head_dim != m->head_dim},
        {RUN_GIVEN_HEAD_DIM_V, "head_dim_v", m && attn_dv(p) != (m->head_dim_v ? m->head_dim_v : m->head_dim)},
        {RUN_GIVEN_WINDOW, "window", m && p->window_keys != (m->window >= 0 ? m->window + 1 : 0)},
        {RUN_GIVEN_SCALE, "scale", m && p->scale != (m->scale > 0 ? m->scale : 1.0 / sqrt((double)m->head_dim))},
    };
    size_t i, n = 0;

    out[0] = '\0';
    for (i = 0; i < sizeof fields / sizeof fields[0] && n < len; i++)
        if ((r->given & fields[i].bit) && fields[i].differs)
            n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", fields[i].name);
}

/* ---------------------------------------------------------------- parse ----------------- */

void run_request_defaults(run_request *r)
{
    size_t i;

    memset(r, 0, sizeof *r);
    for (i = 0; i < RUN_PARAM_COUNT; i++) {
        const run_param *p = &run_request_params[i];
        cJSON def;
        api_error e;

        if (!p->def) continue;
        memset(&def, 0, sizeof def); /* the default as a query string gives it */
        def.type = cJSON_String;
        def.valuestring = (char *)p->def;
        if (parse_row(r, p, &def, &e) != 0) {
            fprintf(stderr, "%s:%d: the default of run parameter %s: %s\n", __FILE__, __LINE__, p->name, e.message);
            abort();
        }
    }
    r->given = 0;
    resolve_scale(r);
}

/* run_request_parse. expand_model: fill what the client did not give from its model's preset
 * (a stored "params" object, read back by run_request_from_json, carries the values
 * themselves). */
static int parse_checked(run_request *r, const cJSON *query, const cJSON *body, int allow_faults, int expand_model,
                         api_error *e)
{
    size_t i;

    run_request_defaults(r);
    if (check_names(query, body, allow_faults, e) != 0) return -1;
    /* The backend first (run_request_params[0]): a request without one stops there. */
    if (parse_row(r, &run_request_params[0], param(query, body, run_request_params[0].name), e) != 0) return -1;
    for (i = 1; i < RUN_PARAM_COUNT; i++)
        if (parse_row(r, &run_request_params[i], param(query, body, run_request_params[i].name), e) != 0) return -1;
    if (expand_model && apply_model(r, e) != 0) return -1;
    if (check_heads(r, e) != 0) return -1;
    /* Lengths in a tensor: these checks wait for its values (run_request_resolve_serving). */
    if (!run_request_lengths_pending(r) && run_request_resolve_serving(r, e) != 0) return -1;
    if (check_iters(r, e) != 0 || check_times(r, e) != 0) return -1;
    resolve_scale(r);
    return 0;
}

/* The parameter a variant's refusal is about, guessed from its message (variants.c words
 * its messages after the parameter names). */
static const char *field_of_message(const char *why)
{
    /* the longer names first: "head_dim_v" holds "head_dim", "kv_heads" holds "heads" */
    static const char *const names[] = {"seqlens_kv", "seqlens_q", "page_size", "num_pages", "head_dim_v",
                                        "kv_heads",   "window",    "head_dim",  "dtype",     "mask",
                                        "causal",     "seq_q",     "seq_kv",    "seq",       "batch",
                                        "heads",      "scale"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strstr(why, names[i])) return !strcmp(names[i], "causal") ? "mask" : names[i];
    if (strstr(why, "bf16") || strstr(why, "fp16") || strstr(why, "fp32")) return "dtype";
    return "";
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
    return parse_checked(r, query, body, allow_faults, 1, e);
}

/* A body json_text_parse refused, as the API answers it: what cannot be JSON is bad_json
 * without a field; a value spelled wrong (\u0000 in a string, a number JSON does not
 * write) is bad_value, and a key given twice duplicate_parameter, naming the member. */
static int refuse_body(const json_text_error *te, size_t body_len, api_error *e)
{
    switch (te->fault) {
    case JSON_TEXT_NUL_BYTE:
        return api_fail(e, 400, "bad_json", "", "the body contains a NUL byte (at byte %zu of %zu): JSON text has none",
                        te->offset, body_len);
    case JSON_TEXT_ESCAPED_NUL:
    case JSON_TEXT_BAD_NUMBER:
        return api_fail(e, 400, "bad_value", te->member, "%s%s%s", te->member[0] && !te->in_name ? te->member : "",
                        te->member[0] && !te->in_name ? ": " : "", te->message);
    case JSON_TEXT_DUPLICATE_KEY:
        return api_fail(e, 400, "duplicate_parameter", te->member, "%s", te->message);
    case JSON_TEXT_NO_MEMORY:
        return api_fail(e, 500, "internal", "", "%s", te->message);
    default:
        return api_fail(e, 400, "bad_json", "", "the body is not valid JSON (%s)", te->message);
    }
}

int run_request_parse_body(run_request *r, const cJSON *query, const char *body, size_t body_len, int allow_faults,
                           api_error *e)
{
    json_text_error te;
    cJSON *json;
    int rc;

    if (!body || body_len == 0) return parse_checked(r, query, NULL, allow_faults, 1, e);
    json = json_text_parse(body, body_len, &te);
    if (!json) return refuse_body(&te, body_len, e);
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        return api_fail(e, 400, "bad_json", "", "the body must be a JSON object of run parameters");
    }
    rc = parse_checked(r, query, json, allow_faults, 1, e);
    cJSON_Delete(json);
    return rc;
}

cJSON *run_request_body_json(const char *body, size_t body_len, api_error *e)
{
    json_text_error te;
    cJSON *json = json_text_parse(body, body_len, &te);

    if (!json) {
        refuse_body(&te, body_len, e);
        return NULL;
    }
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        api_fail(e, 400, "bad_json", "", "the body must be a JSON object of parameters");
        return NULL;
    }
    return json;
}

/* ---------------------------------------------------------------- the JSON codec -------- */

/* An integer as "params" holds it: a number below 10^15, else a decimal string. */
static int put_integer(cJSON *o, const char *name, long long x, uint64_t u, int is_unsigned)
{
    char text[24];

    if ((is_unsigned ? (double)u : (double)x) < JSON_PLAIN_INT_LIMIT)
        return cJSON_AddNumberToObject(o, name, is_unsigned ? (double)u : (double)x) ? 0 : -1;
    if (is_unsigned)
        snprintf(text, sizeof text, "%llu", (unsigned long long)u);
    else
        snprintf(text, sizeof text, "%lld", x);
    return cJSON_AddStringToObject(o, name, text) ? 0 : -1;
}

/* Tags ("a,b") as the array "params" holds. 0, or -1 (out of memory). */
static int put_tags(cJSON *o, const char *name, const char *joined)
{
    cJSON *a = cJSON_AddArrayToObject(o, name), *t;
    const char *p = joined;

    if (!a) return -1;
    while (*p) {
        size_t len = strcspn(p, ",");
        char tag[RUN_TAG_MAX_LEN + 1];
        snprintf(tag, sizeof tag, "%.*s", (int)len, p);
        if (!(t = cJSON_CreateString(tag))) return -1;
        cJSON_AddItemToArray(a, t);
        p += len + (p[len] == ',');
    }
    return 0;
}

/* Write p's value of r into o. 0, or -1 (out of memory, or a field out of its words). */
static int put_row(cJSON *o, const run_request *r, const run_param *p)
{
    const char *field = (const char *)r + p->offset;
    char word[64];
    long long x;
    uint64_t u;
    double d;

    if (p->flags & RUN_PARAM_NOT_IN_PARAMS) return 0;
    if (p->put) return p->put(o, r, p);
    switch (p->type) {
    case RUN_PARAM_INT:
        x = load_int(r, p);
        return (p->flags & RUN_PARAM_OMIT_UNSET) && !x ? 0 : put_integer(o, p->name, x, 0, 0);
    case RUN_PARAM_SEED:
        memcpy(&u, field, sizeof u);
        return put_integer(o, p->name, 0, u, 1);
    case RUN_PARAM_NUMBER:
        memcpy(&d, field, sizeof d);
        return cJSON_AddNumberToObject(o, p->name, d) ? 0 : -1;
    case RUN_PARAM_BOOL:
        x = load_int(r, p);
        if ((p->flags & RUN_PARAM_OMIT_UNSET) && !x) return 0;
        return cJSON_AddBoolToObject(o, p->name, x != 0) ? 0 : -1;
    case RUN_PARAM_ENUM:
        if (!word_at(p->values, load_int(r, p), word, sizeof word)[0]) return -1;
        return cJSON_AddStringToObject(o, p->name, word) ? 0 : -1;
    case RUN_PARAM_STRING:
    case RUN_PARAM_TENSOR:
        if ((p->flags & RUN_PARAM_OMIT_UNSET) && !field[0]) return 0;
        return cJSON_AddStringToObject(o, p->name, field) ? 0 : -1;
    case RUN_PARAM_LENGTHS: /* written by its put */
        return -1;
    case RUN_PARAM_TAGS:
        return (p->flags & RUN_PARAM_OMIT_UNSET) && !field[0] ? 0 : put_tags(o, p->name, field);
    }
    return -1;
}

cJSON *run_request_to_json(const run_request *r)
{
    cJSON *o = cJSON_CreateObject();
    size_t i;

    for (i = 0; o && i < RUN_PARAM_COUNT; i++)
        if (put_row(o, r, &run_request_params[i]) != 0) {
            cJSON_Delete(o);
            return NULL;
        }
    return o;
}

int run_request_from_json(run_request *r, const cJSON *json, api_error *e)
{
    if (!cJSON_IsObject(json)) return api_fail(e, 400, "bad_json", "", "a run request must be a JSON object");
    /* The front only writes `fault` when fault injection is on, so accept it here; the model's
     * values are in the object already. */
    if (parse_checked(r, NULL, json, 1, 0, e) != 0) return -1;
    /* The JSON always carries the resolved scale; it was the client's choice exactly when it
     * differs from the default (a client that gave the default value loses nothing). */
    r->scale_given = r->problem.scale != 1.0 / sqrt((double)r->problem.head_dim);
    return 0;
}

/* ---------------------------------------------------------------- the listing ----------- */

/* x as docs/api.md writes bounds: 2^31, 10^15, 600000, 0.5. */
static const char *bound_text(double x, char *buf, size_t len)
{
    const char *sign = x < 0 ? "-" : "";
    double a = fabs(x), p;
    int k;

    if (a >= 1048576 && a == floor(a)) {
        if (frexp(a, &k) == 0.5) return snprintf(buf, len, "%s2^%d", sign, k - 1), buf;
        for (k = 6, p = 1e6; k <= 18; k++, p *= 10)
            if (a == p) return snprintf(buf, len, "%s10^%d", sign, k), buf;
    }
    snprintf(buf, len, a == floor(a) ? "%.0f" : "%g", x);
    return buf;
}

/* The "bounds, values" cell of p. */
static const char *bounds_cell(const run_param *p, char *buf, size_t len)
{
    char lo[32], hi[32];
    size_t n;

    buf[0] = '\0';
    if (p->values) return words_text(p->values, 1, buf, len);
    if (p->type == RUN_PARAM_SEED) snprintf(buf, len, "0 .. 2^64-1");
    if (p->type == RUN_PARAM_LENGTHS)
        snprintf(buf, len, "`batch` lengths of 0 .. 2^31-1 tokens, at most %d, below 2^31 in all", RUN_MAX_SEQS);
    if (p->type == RUN_PARAM_TAGS)
        snprintf(buf, len, "at most %d, each 1 .. %d of `A-Z a-z 0-9 . _ : -`", RUN_MAX_TAGS, RUN_TAG_MAX_LEN);
    if (p->type != RUN_PARAM_INT && p->type != RUN_PARAM_NUMBER) return buf;
    bound_text(p->min, lo, sizeof lo);
    bound_text(p->max, hi, sizeof hi);
    if (p->flags & RUN_PARAM_OPEN)
        n = (size_t)snprintf(buf, len, "%s < x < %s", lo, hi);
    else
        n = (size_t)snprintf(buf, len, "%s%s .. %s", p->flags & RUN_PARAM_NONZERO ? "nonzero, " : "", lo, hi);
    if (p->units && n < len) snprintf(buf + n, len - n, " %s", p->units);
    return buf;
}

/* The "default" cell of p. */
static const char *default_cell(const run_param *p, char *buf, size_t len)
{
    int quoted = p->type != RUN_PARAM_INT && p->type != RUN_PARAM_SEED && p->type != RUN_PARAM_NUMBER;

    if (p->flags & RUN_PARAM_REQUIRED) return "**required**";
    if (p->def_doc) return p->def_doc;
    if (!p->def) return "none";
    snprintf(buf, len, quoted ? "`%s`" : "%s", p->def);
    return buf;
}

/* The "type" cell of each type. */
static const char *const type_names[] = {
    [RUN_PARAM_INT] = "integer", [RUN_PARAM_SEED] = "integer", [RUN_PARAM_NUMBER] = "number",
    [RUN_PARAM_BOOL] = "boolean", [RUN_PARAM_ENUM] = "string",  [RUN_PARAM_STRING] = "string",
    [RUN_PARAM_TENSOR] = "tensor id", [RUN_PARAM_TAGS] = "strings",  [RUN_PARAM_LENGTHS] = "lengths",
};

void run_request_params_markdown(FILE *f)
{
    char bounds[300], def[64];
    size_t i;

    fprintf(f, "| name | type | default | bounds, values | meaning |\n| --- | --- | --- | --- | --- |\n");
    for (i = 0; i < RUN_PARAM_COUNT; i++) {
        const run_param *p = &run_request_params[i];
        fprintf(f, "| `%s` | %s | %s | %s | %s |\n", p->name, type_names[p->type], default_cell(p, def, sizeof def),
                bounds_cell(p, bounds, sizeof bounds), p->meaning);
    }
}

/* ---------------------------------------------------------------- the problem ----------- */

long long run_request_macs(const run_request *r)
{
    const attn_problem *p = &r->problem;
    int64_t x;

    if (p->ragged) { /* its real lengths: Σ Sq_b·Skv_b, checked below 2^40 / heads by check_size */
        if (__builtin_mul_overflow(ragged_pairs(r), p->heads, &x) ||
            __builtin_mul_overflow(x, p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p), &x))
            return LLONG_MAX;
        return (long long)x;
    }

    /* Saturates: a request that passed validation stays far below, but say so rather than wrap. */
    if (__builtin_mul_overflow(p->batch, p->heads, &x) || __builtin_mul_overflow(x, p->seq_q, &x) ||
        __builtin_mul_overflow(x, p->seq_kv, &x) ||
        __builtin_mul_overflow(x, p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p), &x))
        return LLONG_MAX;
    return (long long)x;
}

long long run_request_cpu_forwards(const run_request *r)
{
    return (long long)r->warmup + (r->iters > 0 ? r->iters : r->max_iters) + 1;
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
