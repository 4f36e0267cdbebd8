/* tensor_upload_parse.c — the query and the body of an upload, parsed (tensor_upload_parse.h).
 *
 * Only the body's header bytes are read back (pread), never its data: the body exists once,
 * in the memfd, until the worker copies the tensors out of it. npy.c and safetensors.c are
 * the parsers of the two file formats.
 */
#include "server/front/tensors/tensor_upload_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/npy.h"
#include "server/front/tensors/safetensors.h"
#include "server/front/tensors/tensor_io.h"

/* The query parameters an upload may have. */
static const char *const tensor_upload_params[] = {"device", "format", "dtype", "shape", "name"};

/* "2,4,128,64" → shape. 0, or -1. */
/* The query parameter key as a string; NULL when absent. */
static const char *query_text(const cJSON *query, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(query, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int tensor_parse_shape(const char *s, int64_t *shape, int *ndim)
{
    *ndim = 0;
    if (!*s) return 0; /* a scalar */
    for (;;) {
        char *end;
        long long v;
        if (!isdigit((unsigned char)*s) || *ndim >= TENSOR_MAX_DIMS) return -1;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno || v < 0 || v > (1LL << 40)) return -1;
        shape[(*ndim)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

int tensor_upload_check_query(const cJSON *query, long long declared, api_error *e)
{
    const char *format = query_text(query, "format"), *dtype = query_text(query, "dtype"),
               *shape = query_text(query, "shape"), *name = query_text(query, "name");
    const cJSON *item;
    char why[80];
    int64_t dims[TENSOR_MAX_DIMS];
    int ndim = 0, i, n_params = (int)(sizeof tensor_upload_params / sizeof tensor_upload_params[0]);
    attn_dtype dt;

    cJSON_ArrayForEach(item, query) {
        const char *key = item->string ? item->string : "";
        for (i = 0; i < n_params && strcmp(key, tensor_upload_params[i]) != 0; i++) continue;
        if (i == n_params)
            return api_fail(e, 400, "unknown_parameter", key,
                            "unknown parameter '%.60s'; known: device, format, dtype, shape, name", key);
    }
    if (name && strlen(name) >= TENSOR_NAME_MAX)
        return api_fail(e, 400, "bad_value", "name", "name is longer than %d bytes", TENSOR_NAME_MAX - 1);
    if (name && st_name_check(name, strlen(name), why, sizeof why) != 0)
        return api_fail(e, 400, "bad_value", "name",
                        "name is refused: %s (names must be UTF-8 without control or invisible format characters)", why);
    if (format && strcmp(format, "raw") && strcmp(format, "npy") && strcmp(format, "safetensors"))
        return api_fail(e, 400, "bad_value", "format", "format must be raw, npy or safetensors, got '%.40s'", format);
    if (format && !strcmp(format, "safetensors") && (shape || dtype || name))
        return api_fail(e, 400, "conflict", shape ? "shape" : dtype ? "dtype" : "name",
                        "a safetensors upload names and shapes its own tensors; drop shape, dtype and name");
    if (format && !strcmp(format, "npy") && shape)
        return api_fail(e, 400, "conflict", "shape", "an npy upload carries its own shape; drop shape=");
    if (dtype && attn_dtype_parse(dtype, &dt) != 0)
        return api_fail(e, 400, "bad_value", "dtype", "dtype must be bf16, fp16, fp32 or int32, got '%.40s'", dtype);
    if (shape && tensor_parse_shape(shape, dims, &ndim) != 0)
        return api_fail(e, 400, "bad_value", "shape", "shape must be D0,D1,… (at most %d non-negative integers), got '%.40s'",
                        TENSOR_MAX_DIMS, shape);
    if (format && !strcmp(format, "raw") && !dtype)
        return api_fail(e, 400, "bad_value", "dtype", "a raw upload needs dtype=bf16, fp16, fp32 or int32");
    if (format && !strcmp(format, "raw") && !shape)
        return api_fail(e, 400, "bad_value", "shape", "a raw upload needs shape=D0,D1,… (at most %d non-negative integers)",
                        TENSOR_MAX_DIMS);
    /* Raw (given, or implied by shape=): the declared length must be shape × dtype. (A body
     * that turns out to be npy with shape= is refused either way.) */
    if ((!format || !strcmp(format, "raw")) && shape && dtype && declared >= 0) {
        uint64_t bytes = attn_dtype_bytes(dt);
        for (i = 0; i < ndim; i++)
            if (__builtin_mul_overflow(bytes, (uint64_t)dims[i], &bytes))
                return api_fail(e, 400, "size_mismatch", "shape", "shape [%s]: the byte count overflows", shape);
        if (bytes != (uint64_t)declared)
            return api_fail(e, 400, "size_mismatch", "shape", "shape [%s] of %s needs %llu bytes; the body has %lld bytes",
                            shape, dtype, (unsigned long long)bytes, declared);
    }
    return 0;
}

int tensor_upload_parse_body(const cJSON *query, int fd, uint64_t size, upload_spec **specs, int *count, int *multi,
                             api_error *e)
{
    const char *format = query_text(query, "format"), *dtype = query_text(query, "dtype"),
               *shape = query_text(query, "shape"), *name = query_text(query, "name");
    uint64_t header_len = 0;
    uint8_t prefix[16];
    size_t np = size < sizeof prefix ? (size_t)size : sizeof prefix;
    uint8_t *header = NULL;
    char err[300];
    upload_spec *s;

    *specs = NULL, *count = 0, *multi = 0; /* the query was checked at admission (tensor_upload_check_query) */
    if (np && tensor_pread_all(fd, prefix, np, 0) != 0)
        return api_fail(e, 500, "internal", "", "cannot read the upload back: %s", strerror(errno));
    if (!format) { /* by content: the npy magic, else raw when a shape is given, else safetensors */
        if (np >= 6 && memcmp(prefix, "\x93NUMPY", 6) == 0) format = "npy";
        else if (shape) format = "raw";
        else format = "safetensors";
    }
    if (strcmp(format, "raw") == 0) {
        attn_dtype dt;
        uint64_t elems = 1;
        int i;
        s = calloc(1, sizeof *s);
        if (!s) return api_fail(e, 500, "internal", "", "out of memory");
        if (!dtype || attn_dtype_parse(dtype, &dt) != 0) {
            free(s);
            return api_fail(e, 400, "bad_value", "dtype", "a raw upload needs dtype=bf16, fp16, fp32 or int32");
        }
        if (!shape || tensor_parse_shape(shape, s->shape, &s->ndim) != 0) {
            free(s);
            return api_fail(e, 400, "bad_value", "shape", "a raw upload needs shape=D0,D1,… (at most %d non-negative integers)",
                            TENSOR_MAX_DIMS);
        }
        for (i = 0; i < s->ndim; i++)
            if (__builtin_mul_overflow(elems, (uint64_t)s->shape[i], &elems)) {
                free(s);
                return api_fail(e, 400, "size_mismatch", "shape", "shape [%s]: the element count overflows", shape);
            }
        s->dtype = dt;
        if (__builtin_mul_overflow(elems, (uint64_t)attn_dtype_bytes(dt), &s->bytes) || s->bytes != size) {
            free(s);
            return api_fail(e, 400, "size_mismatch", "shape", "shape [%s] of %s needs %llu elements of %zu bytes; the body has %llu bytes",
                            shape, dtype, (unsigned long long)elems, attn_dtype_bytes(dt), (unsigned long long)size);
        }
        snprintf(s->name, sizeof s->name, "%s", name ? name : "");
        *specs = s, *count = 1;
        return 0;
    }
    if (strcmp(format, "npy") == 0) {
        npy_info info;
        if (shape) return api_fail(e, 400, "conflict", "shape", "an npy upload carries its own shape; drop shape=");
        if (npy_header_length(prefix, np, size, &header_len, err, sizeof err) != 0)
            return api_fail(e, 400, "bad_npy", "", "%s", err);
        header = malloc((size_t)header_len);
        if (!header) return api_fail(e, 500, "internal", "", "out of memory");
        if (tensor_pread_all(fd, header, (size_t)header_len, 0) != 0) {
            free(header);
            return api_fail(e, 500, "internal", "", "cannot read the upload back");
        }
        if (npy_parse(header, (size_t)header_len, size, dtype, &info, err, sizeof err) != 0) {
            free(header);
            return api_fail(e, err[0] == 'd' ? 400 : 400, "bad_npy", "", "%s", err);
        }
        free(header);
        s = calloc(1, sizeof *s);
        if (!s) return api_fail(e, 500, "internal", "", "out of memory");
        s->dtype = info.dtype;
        s->ndim = info.ndim;
        memcpy(s->shape, info.shape, sizeof info.shape);
        s->offset = info.data_offset;
        s->bytes = info.data_bytes;
        snprintf(s->name, sizeof s->name, "%s", name ? name : "");
        *specs = s, *count = 1;
        return 0;
    }
    if (strcmp(format, "safetensors") == 0) {
        st_tensor *t = NULL;
        int n = 0, i;
        if (shape || dtype || name)
            return api_fail(e, 400, "conflict", shape ? "shape" : dtype ? "dtype" : "name",
                            "a safetensors upload names and shapes its own tensors; drop shape, dtype and name");
        if (st_header_length(prefix, np, size, &header_len, err, sizeof err) != 0)
            return api_fail(e, 400, "bad_safetensors", "", "%s%s", err,
                            np >= 6 && memcmp(prefix, "\x93NUMPY", 6) != 0 && !shape
                                ? " (raw uploads need dtype= and shape=; npy files start with \\x93NUMPY)"
                                : "");
        header = malloc((size_t)header_len);
        if (!header) return api_fail(e, 500, "internal", "", "out of memory");
        if (tensor_pread_all(fd, header, (size_t)header_len, 0) != 0) {
            free(header);
            return api_fail(e, 500, "internal", "", "cannot read the upload back");
        }
        if (st_parse(header, (size_t)header_len, size, &t, &n, err, sizeof err) != 0) {
            free(header);
            return api_fail(e, 400, "bad_safetensors", "", "%s", err);
        }
        free(header);
        if (n == 0) {
            free(t);
            return api_fail(e, 400, "bad_safetensors", "", "safetensors: the file holds no tensor");
        }
        s = calloc((size_t)n, sizeof *s);
        if (!s) {
            free(t);
            return api_fail(e, 500, "internal", "", "out of memory");
        }
        for (i = 0; i < n; i++) {
            snprintf(s[i].name, sizeof s[i].name, "%s", t[i].name);
            s[i].dtype = t[i].dtype;
            s[i].ndim = t[i].ndim;
            memcpy(s[i].shape, t[i].shape, sizeof t[i].shape);
            s[i].offset = t[i].offset;
            s[i].bytes = t[i].bytes;
        }
        free(t);
        *specs = s, *count = n, *multi = 1;
        return 0;
    }
    return api_fail(e, 400, "bad_value", "format", "format must be raw, npy or safetensors, got '%.40s'", format);
}
