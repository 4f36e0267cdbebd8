/* npy.c — the .npy header (npy.h).
 *
 * The header's dictionary is a Python literal that NumPy writes as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * This is a small recursive-descent reader for exactly that grammar: string keys, and a
 * string, True/False or a tuple of non-negative integers as values. Anything else is
 * refused rather than guessed at: the bytes come from the network.
 */
#include "common/npy.h"
#include "common/parse_error.h"

#include <stdio.h>
#include <string.h>

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};


static uint32_t npy_le(const uint8_t *p, int bytes)
{
    uint32_t v = 0;
    int i;
    for (i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

int npy_header_length(const uint8_t *buf, size_t n, uint64_t file_size, uint64_t *header_len, char *err,
                      size_t err_len)
{
    uint32_t len;
    int major, field;

    if (n > file_size) n = (size_t)file_size;
    if (n < 8) return parse_fail(err, err_len, "npy: the file is %zu bytes, too short for the magic and version", n);
    if (memcmp(buf, npy_magic, sizeof npy_magic) != 0)
        return parse_fail(err, err_len, "npy: the file does not start with the magic \\x93NUMPY");
    major = buf[6];
    if (major < 1 || major > 3 || buf[7] != 0)
        return parse_fail(err, err_len, "npy: format version %d.%d is not supported (1.0, 2.0, 3.0)", major, buf[7]);
    field = major == 1 ? 2 : 4;
    if (n < (size_t)(8 + field)) return parse_fail(err, err_len, "npy: the header length field is truncated");
    len = npy_le(buf + 8, field);
    if (len > NPY_MAX_HEADER_BYTES)
        return parse_fail(err, err_len, "npy: the header claims %u bytes; at most %u are accepted", len,
                        NPY_MAX_HEADER_BYTES);
    *header_len = 8u + (uint64_t)field + len;
    if (*header_len > file_size)
        return parse_fail(err, err_len, "npy: the header claims %llu bytes but the file has only %llu",
                        (unsigned long long)*header_len, (unsigned long long)file_size);
    return 0;
}

/* ---------------------------------------------------------------- the dictionary -------- */

typedef struct npy_cursor {
    const char *p, *end;
} npy_cursor;

static void npy_skip_space(npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int npy_eat(npy_cursor *c, char ch)
{
    npy_skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('…' or "…", no escapes: NumPy never writes any) into out. */
static int npy_string(npy_cursor *c, char *out, size_t len)
{
    char q;
    size_t n = 0;

    npy_skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    q = *c->p++;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= len) return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int npy_word(npy_cursor *c, const char *w)
{
    size_t n = strlen(w);
    npy_skip_space(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* (d0, d1, …) with an optional trailing comma; "()" is a scalar. */
static int npy_tuple(npy_cursor *c, npy_info *out, char *err, size_t err_len)
{
    out->ndim = 0;
    if (!npy_eat(c, '(')) return parse_fail(err, err_len, "npy: 'shape' is not a tuple");
    for (;;) {
        uint64_t v = 0;
        int digits = 0;
        if (npy_eat(c, ')')) return 0;
        npy_skip_space(c);
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (uint64_t)INT64_MAX / 10) return parse_fail(err, err_len, "npy: a dimension overflows 64 bits");
            v = v * 10 + (uint64_t)(*c->p - '0');
            c->p++;
            digits++;
        }
        if (!digits) return parse_fail(err, err_len, "npy: 'shape' holds something other than non-negative integers");
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
        if (out->ndim >= NPY_MAX_DIMS) return parse_fail(err, err_len, "npy: more than %d dimensions", NPY_MAX_DIMS);
        out->shape[out->ndim++] = (int64_t)v;
        if (npy_eat(c, ',')) continue;
        if (npy_eat(c, ')')) return 0;
        return parse_fail(err, err_len, "npy: 'shape' is not a well-formed tuple");
    }
}

/* The dtype from descr (and the client's hint). */
static int npy_descr(const char *descr, const char *hint, attn_dtype *dtype, char *err, size_t err_len)
{
    attn_dtype want;
    int have_hint = hint && hint[0];

    if (have_hint && attn_dtype_parse(hint, &want) != 0)
        return parse_fail(err, err_len, "dtype must be bf16, fp16, fp32 or int32, got '%.20s'", hint);
    if (descr[0] == '>' || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
        return parse_fail(err, err_len, "npy: descr '%.20s' is not little-endian; only little-endian arrays are accepted",
                        descr);
    if (strcmp(descr + 1, "f4") == 0 && descr[0] != '|') {
        *dtype = ATTN_FP32;
    } else if (strcmp(descr + 1, "i4") == 0 && descr[0] != '|') {
        *dtype = ATTN_INT32;
    } else if (strcmp(descr + 1, "f2") == 0 && descr[0] != '|') {
        *dtype = ATTN_FP16;
    } else if ((strcmp(descr + 1, "u2") == 0 && descr[0] != '|') || strcmp(descr + 1, "V2") == 0) {
        if (!have_hint || want != ATTN_BF16)
            return parse_fail(err, err_len, "npy: descr '%s' holds 2-byte words; add dtype=bf16 to upload them as bf16",
                            descr);
        *dtype = ATTN_BF16;
    } else {
        return parse_fail(err, err_len, "npy: dtype '%.20s' is not supported ('<f4', '<f2', '<i4', or '<u2'/'|V2' with dtype=bf16)",
                        descr);
    }
    if (have_hint && want != *dtype)
        return parse_fail(err, err_len, "npy: the file holds %s but dtype=%s was given", attn_dtype_name(*dtype), hint);
    return 0;
}

int npy_parse(const uint8_t *buf, size_t n, uint64_t file_size, const char *dtype_hint, npy_info *out, char *err,
              size_t err_len)
{
    uint64_t header_len, elems = 1, bytes;
    npy_cursor c;
    char key[32], descr[32] = "";
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, i, field;

    memset(out, 0, sizeof *out);
    if (npy_header_length(buf, n, file_size, &header_len, err, err_len) != 0) return -1;
    if (n < header_len) return parse_fail(err, err_len, "npy: the header is truncated");
    field = buf[6] == 1 ? 2 : 4;
    c.p = (const char *)buf + 8 + field;
    c.end = (const char *)buf + header_len;
    if (memchr(c.p, '\0', (size_t)(c.end - c.p)))
        return parse_fail(err, err_len, "npy: the header contains a NUL byte");

    if (!npy_eat(&c, '{')) return parse_fail(err, err_len, "npy: the header is not a dictionary");
    for (;;) {
        if (npy_eat(&c, '}')) break;
        if (npy_string(&c, key, sizeof key) != 0) return parse_fail(err, err_len, "npy: a header key is malformed");
        if (!npy_eat(&c, ':')) return parse_fail(err, err_len, "npy: ':' expected after '%s'", key);
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (npy_string(&c, descr, sizeof descr) != 0)
                return parse_fail(err, err_len, "npy: 'descr' is not a simple type string (structured arrays are not accepted)");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if (npy_word(&c, "True"))
                fortran = 1;
            else if (!npy_word(&c, "False"))
                return parse_fail(err, err_len, "npy: 'fortran_order' is neither True nor False");
            have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (npy_tuple(&c, out, err, err_len) != 0) return -1;
            have_shape = 1;
        } else {
            return parse_fail(err, err_len, "npy: unexpected or repeated header key '%s'", key);
        }
        if (npy_eat(&c, ',')) continue;
        if (npy_eat(&c, '}')) break;
        return parse_fail(err, err_len, "npy: ',' or '}' expected in the header");
    }
    npy_skip_space(&c);
    if (c.p != c.end) return parse_fail(err, err_len, "npy: bytes after the header dictionary");
    if (!have_descr || !have_order || !have_shape)
        return parse_fail(err, err_len, "npy: the header lacks %s", !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
    if (fortran) return parse_fail(err, err_len, "npy: fortran_order arrays are not accepted; save a C-order array");
    if (npy_descr(descr, dtype_hint, &out->dtype, err, err_len) != 0) return -1;

    for (i = 0; i < out->ndim; i++)
        if (__builtin_mul_overflow(elems, (uint64_t)out->shape[i], &elems))
            return parse_fail(err, err_len, "npy: the shape's element count overflows");
    if (__builtin_mul_overflow(elems, (uint64_t)attn_dtype_bytes(out->dtype), &bytes))
        return parse_fail(err, err_len, "npy: the shape's byte count overflows");
    out->data_offset = header_len;
    out->data_bytes = bytes;
    if (file_size - header_len != bytes)
        return parse_fail(err, err_len, "npy: the shape needs %llu data bytes but the file has %llu after its header",
                        (unsigned long long)bytes, (unsigned long long)(file_size - header_len));
    return 0;
}

size_t npy_write_header(char *buf, size_t len, attn_dtype dtype, int ndim, const int64_t *shape)
{
    char dict[400];
    size_t n = 0, total;
    int i;

    n += (size_t)snprintf(dict + n, sizeof dict - n, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                          dtype == ATTN_FP32 ? "<f4" : dtype == ATTN_FP16 ? "<f2" : dtype == ATTN_INT32 ? "<i4" : "<u2");
    for (i = 0; i < ndim && n < sizeof dict; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%lld%s", (long long)shape[i],
                              ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
    if (n < sizeof dict) n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
    if (n >= sizeof dict) return 0;
    total = 10 + n + 1; /* magic+version+len, dict, '\n' */
    total = (total + 63) / 64 * 64;
    if (total > len || total - 10 > 65535) return 0;
    memcpy(buf, npy_magic, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)((total - 10) & 0xff);
    buf[9] = (char)((total - 10) >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, ' ', total - 10 - n - 1);
    buf[total - 1] = '\n';
    return total;
}
