/* safetensors.c — the safetensors header (safetensors.h). */
#include "server/front/tensors/safetensors.h"
#include "common/json_text.h"
#include "common/parse_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The UTF-8 sequence at s (n bytes left): its length, with *cp the code point; 0 when the
 * bytes there are not a well-formed sequence (overlong, a surrogate, past U+10FFFF, cut). */
static size_t st_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t k, i;
    uint32_t c;

    if (s[0] < 0x80) return *cp = s[0], 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) k = 2, c = s[0] & 0x1Fu;
    else if ((s[0] & 0xF0) == 0xE0) k = 3, c = s[0] & 0x0Fu;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) k = 4, c = s[0] & 0x07u;
    else return 0;
    if (n < k) return 0;
    for (i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3Fu);
    }
    if ((k == 3 && c < 0x800) || (k == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return k;
}

/* Is s (len bytes) valid UTF-8? 0, or -1 with why. */
static int st_utf8_check(const char *s, size_t len, char *why, size_t why_len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t at = 0, k;
    uint32_t cp;

    for (; at < len; at += k)
        if ((k = st_utf8_next(p + at, len - at, &cp)) == 0)
            return parse_fail(why, why_len, "byte %zu (0x%02x) is not valid UTF-8", at + 1, p[at]);
    return 0;
}

/* Unicode's invisible format characters (general category Cf) and the line and paragraph
 * separators. Bidi controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C) reorder
 * how the text around them displays, so one name can show as another ("Trojan Source"); the
 * zero-width ones (U+200B-U+200D, U+2060, U+FEFF) hide inside a name. */
static int st_is_format_char(uint32_t cp)
{
    static const uint32_t ranges[][2] = {
        {0x00AD, 0x00AD},   {0x0600, 0x0605},   {0x061C, 0x061C},   {0x06DD, 0x06DD},   {0x070F, 0x070F},
        {0x0890, 0x0891},   {0x08E2, 0x08E2},   {0x180E, 0x180E},   {0x200B, 0x200F},   {0x2028, 0x202E},
        {0x2060, 0x2064},   {0x2066, 0x206F},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD},
        {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
        {0xE0020, 0xE007F},
    };
    size_t i;

    for (i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (cp >= ranges[i][0] && cp <= ranges[i][1]) return 1;
    return 0;
}

int st_name_check(const char *s, size_t len, char *why, size_t why_len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t at = 0, k;
    uint32_t cp;

    for (; at < len; at += k) {
        if ((k = st_utf8_next(p + at, len - at, &cp)) == 0)
            return parse_fail(why, why_len, "byte %zu (0x%02x) is not valid UTF-8", at + 1, p[at]);
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
            return parse_fail(why, why_len, "byte %zu is a control character (U+%04X)", at + 1, (unsigned)cp);
        if (st_is_format_char(cp))
            return parse_fail(why, why_len,
                              "byte %zu is an invisible format character (U+%04X: bidi controls and zero-width "
                              "characters make a name display as another)",
                              at + 1, (unsigned)cp);
    }
    return 0;
}

/* s with every byte outside printable ASCII written \xNN, for messages that name a string
 * that may not be UTF-8 (at most out_len - 1 bytes, cut at a whole escape). */
static const char *st_escaped(const char *s, char *out, size_t out_len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;

    for (; *p && n + 5 <= out_len; p++) {
        if (*p >= 0x20 && *p < 0x7F) out[n++] = (char)*p;
        else n += (size_t)snprintf(out + n, out_len - n, "\\x%02x", *p);
    }
    if (n + 5 > out_len && *p && n + 4 <= out_len) n += (size_t)snprintf(out + n, out_len - n, "...");
    out[n] = '\0';
    return out;
}

int st_header_length(const uint8_t *buf, size_t n, uint64_t file_size, uint64_t *header_len, char *err,
                     size_t err_len)
{
    uint64_t len = 0;
    int i;

    if (n > file_size) n = (size_t)file_size;
    if (n < 8) return parse_fail(err, err_len, "safetensors: the file is %zu bytes, too short for the header length", n);
    for (i = 7; i >= 0; i--) len = (len << 8) | buf[i];
    if (len > ST_MAX_HEADER_BYTES)
        return parse_fail(err, err_len, "safetensors: the header claims %llu bytes; at most %u are accepted",
                       (unsigned long long)len, ST_MAX_HEADER_BYTES);
    if (len < 2) return parse_fail(err, err_len, "safetensors: the header is too short to be a JSON object");
    if (8 + len > file_size)
        return parse_fail(err, err_len, "safetensors: the header claims %llu bytes but the file has only %llu after the length",
                       (unsigned long long)len, (unsigned long long)(file_size - 8));
    *header_len = 8 + len;
    return 0;
}

static int st_dtype(const char *s, attn_dtype *d)
{
    if (!strcmp(s, "BF16")) *d = ATTN_BF16;
    else if (!strcmp(s, "F16")) *d = ATTN_FP16;
    else if (!strcmp(s, "F32")) *d = ATTN_FP32;
    else if (!strcmp(s, "I32")) *d = ATTN_INT32;
    else return -1;
    return 0;
}

static int st_by_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* One entry into t. 0, or -1 with err. */
static int st_entry(const cJSON *item, uint64_t data_size, uint64_t data_start, st_tensor *t, char *err,
                    size_t err_len)
{
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    const cJSON *d, *member;
    uint64_t elems = 1, bytes, begin, end;
    int n = 0;

    if (!cJSON_IsObject(item))
        return parse_fail(err, err_len, "safetensors: entry '%.60s' is not an object", item->string);
    cJSON_ArrayForEach(member, item) {
        if (strcmp(member->string, "dtype") && strcmp(member->string, "shape") && strcmp(member->string, "data_offsets"))
            return parse_fail(err, err_len, "safetensors: entry '%.60s' has an unknown key '%.40s'", item->string,
                           member->string);
        n++;
    }
    if (n != 3 || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return parse_fail(err, err_len, "safetensors: entry '%.60s' needs exactly dtype (string), shape and data_offsets (arrays)",
                       item->string);
    if (st_dtype(dtype->valuestring, &t->dtype) != 0)
        return parse_fail(err, err_len, "safetensors: tensor '%.60s' has dtype %.20s; only BF16, F16, F32 and I32 are accepted",
                       item->string, dtype->valuestring);
    if (strlen(item->string) == 0 || strlen(item->string) >= sizeof t->name)
        return parse_fail(err, err_len, "safetensors: a tensor name is empty or longer than %d bytes", ST_MAX_NAME - 1);
    snprintf(t->name, sizeof t->name, "%s", item->string);
    t->ndim = 0;
    cJSON_ArrayForEach(d, shape) {
        double v = d->valuedouble;
        if (!cJSON_IsNumber(d) || !(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v)
            return parse_fail(err, err_len, "safetensors: tensor '%.60s' has a shape entry that is not a non-negative integer",
                           t->name);
        if (t->ndim >= ST_MAX_DIMS)
            return parse_fail(err, err_len, "safetensors: tensor '%.60s' has more than %d dimensions", t->name, ST_MAX_DIMS);
        t->shape[t->ndim++] = (int64_t)v;
        if (__builtin_mul_overflow(elems, (uint64_t)v, &elems))
            return parse_fail(err, err_len, "safetensors: tensor '%.60s': the element count overflows", t->name);
    }
    if (__builtin_mul_overflow(elems, (uint64_t)attn_dtype_bytes(t->dtype), &bytes))
        return parse_fail(err, err_len, "safetensors: tensor '%.60s': the byte count overflows", t->name);
    if (cJSON_GetArraySize(offs) != 2 || !cJSON_IsNumber(offs->child) || !cJSON_IsNumber(offs->child->next))
        return parse_fail(err, err_len, "safetensors: tensor '%.60s': data_offsets must be [begin, end]", t->name);
    {
        double b = offs->child->valuedouble, e = offs->child->next->valuedouble;
        if (!(b >= 0 && b <= 9007199254740992.0) || !(e >= 0 && e <= 9007199254740992.0) ||
            b != (double)(int64_t)b || e != (double)(int64_t)e)
            return parse_fail(err, err_len, "safetensors: tensor '%.60s': data_offsets are not non-negative integers", t->name);
        begin = (uint64_t)b, end = (uint64_t)e;
    }
    if (end < begin || end > data_size)
        return parse_fail(err, err_len, "safetensors: tensor '%.60s': data_offsets [%llu, %llu] lie outside the %llu data bytes",
                       t->name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != bytes)
        return parse_fail(err, err_len, "safetensors: tensor '%.60s': shape and dtype need %llu bytes, data_offsets span %llu",
                       t->name, (unsigned long long)bytes, (unsigned long long)(end - begin));
    t->offset = data_start + begin;
    t->bytes = bytes;
    return 0;
}

int st_parse(const uint8_t *buf, size_t n, uint64_t file_size, st_tensor **out, int *count, char *err,
             size_t err_len)
{
    uint64_t header_len, data_size, at;
    const char *json = (const char *)buf + 8;
    size_t json_len;
    json_text_error te;
    cJSON *root, *item;
    st_tensor *t = NULL, *sorted = NULL;
    int k = 0, total = 0, j;

    *out = NULL;
    *count = 0;
    if (st_header_length(buf, n, file_size, &header_len, err, err_len) != 0) return -1;
    if (n < header_len) return parse_fail(err, err_len, "safetensors: the header is truncated");
    /* The format pads the header with spaces; json_text_parse refuses NUL bytes, \u0000,
     * repeated names and anything else after the JSON. */
    json_len = (size_t)(header_len - 8);
    while (json_len > 0 && json[json_len - 1] == ' ') json_len--;
    root = json_text_parse(json, json_len, &te);
    if (!root) {
        if (te.fault == JSON_TEXT_ESCAPED_NUL)
            return parse_fail(err, err_len, "safetensors: the header escapes a NUL (\\u0000), which no name may hold");
        if (te.fault == JSON_TEXT_SYNTAX || te.fault == JSON_TEXT_NUL_BYTE)
            return parse_fail(err, err_len, "safetensors: the header is not valid JSON (%s)", te.message);
        return parse_fail(err, err_len, "safetensors: in the header, %s", te.message);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return parse_fail(err, err_len, "safetensors: the header is not a JSON object");
    }
    cJSON_ArrayForEach(item, root) total++;
    if (total > ST_MAX_TENSORS + 1) {
        cJSON_Delete(root);
        return parse_fail(err, err_len, "safetensors: more than %d tensors", ST_MAX_TENSORS);
    }
    data_size = file_size - header_len;
    t = calloc((size_t)(total ? total : 1), sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return parse_fail(err, err_len, "safetensors: out of memory");
    }
    cJSON_ArrayForEach(item, root) {
        char why[80], shown[80];
        if (!item->string) goto bad_json;
        /* Names are listed as JSON and read by people (st_name_check); metadata is never
         * shown, but the format requires UTF-8 and a careful reader should not choke on it. */
        if (strcmp(item->string, "__metadata__") != 0 &&
            st_name_check(item->string, strlen(item->string), why, sizeof why) != 0) {
            parse_fail(err, err_len, "safetensors: the tensor name '%s' is refused: %s",
                       st_escaped(item->string, shown, sizeof shown), why);
            goto fail;
        }
        if (strcmp(item->string, "__metadata__") == 0) {
            const cJSON *m;
            if (!cJSON_IsObject(item)) goto bad_meta;
            cJSON_ArrayForEach(m, item) {
                if (!cJSON_IsString(m)) goto bad_meta;
                if (st_utf8_check(m->string, strlen(m->string), why, sizeof why) != 0 ||
                    st_utf8_check(m->valuestring, strlen(m->valuestring), why, sizeof why) != 0) {
                    parse_fail(err, err_len, "safetensors: __metadata__ entry '%s' is not UTF-8: %s",
                               st_escaped(m->string, shown, sizeof shown), why);
                    goto fail;
                }
            }
            continue;
        }
        if (st_entry(item, data_size, header_len, &t[k], err, err_len) != 0) goto fail;
        k++;
    }
    cJSON_Delete(root);
    root = NULL;

    /* The data section must be covered exactly: sorted by offset, each tensor starts where
     * the last ended, the last ends at the end of the file. */
    sorted = malloc((size_t)(k ? k : 1) * sizeof *sorted);
    if (!sorted) {
        parse_fail(err, err_len, "safetensors: out of memory");
        goto fail;
    }
    memcpy(sorted, t, (size_t)k * sizeof *t);
    qsort(sorted, (size_t)k, sizeof *sorted, st_by_offset);
    at = header_len;
    for (j = 0; j < k; j++) {
        if (sorted[j].offset != at) {
            parse_fail(err, err_len, "safetensors: tensor '%.60s' starts at data byte %llu; expected %llu (%s)",
                    sorted[j].name, (unsigned long long)(sorted[j].offset - header_len),
                    (unsigned long long)(at - header_len), sorted[j].offset < at ? "overlap" : "gap");
            goto fail;
        }
        at += sorted[j].bytes;
    }
    if (at != file_size) {
        parse_fail(err, err_len, "safetensors: the tensors cover %llu data bytes; the file has %llu",
                (unsigned long long)(at - header_len), (unsigned long long)data_size);
        goto fail;
    }
    free(sorted);
    *out = t;
    *count = k;
    return 0;

bad_meta:
    parse_fail(err, err_len, "safetensors: __metadata__ must be an object of strings");
    goto fail;
bad_json:
    parse_fail(err, err_len, "safetensors: the header is malformed");
fail:
    cJSON_Delete(root);
    free(sorted);
    free(t);
    return -1;
}
