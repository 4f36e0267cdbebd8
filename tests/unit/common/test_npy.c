/* test_npy.c — the .npy header parser and writer (common/npy.c). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/npy.h"
#include "tests/unit/check.h"

/* A version-`ver` file: magic, version, length, dict padded to 64 with '\n', then `data`
 * bytes of zeros. Returns its length. */
static size_t make_npy(uint8_t *buf, int ver, const char *dict, size_t data)
{
    size_t field = ver == 1 ? 2 : 4, pre = 8 + field, dl = strlen(dict);
    size_t hl = (pre + dl + 1 + 63) / 64 * 64 - pre, i;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)ver, buf[7] = 0;
    for (i = 0; i < field; i++) buf[8 + i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hl - dl - 1);
    buf[pre + hl - 1] = '\n';
    memset(buf + pre + hl, 0, data);
    return pre + hl + data;
}

static int parse(const uint8_t *buf, size_t n, const char *hint, npy_info *info, char *err)
{
    return npy_parse(buf, n, n, hint, info, err, 300);
}

int main(void)
{
    static uint8_t buf[1 << 16];
    char err[300];
    npy_info info;
    uint64_t hl;
    size_t n;
    int v;

    /* Good files, three versions. */
    for (v = 1; v <= 3; v++) {
        n = make_npy(buf, v, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
        CHECK(parse(buf, n, NULL, &info, err) == 0, "v%d: %s", v, err);
        CHECK(info.dtype == ATTN_FP32 && info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 3, "v%d shape", v);
        CHECK(info.data_bytes == 24 && info.data_offset == n - 24, "v%d offsets", v);
    }
    n = make_npy(buf, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", 10);
    CHECK(parse(buf, n, NULL, &info, err) == 0 && info.dtype == ATTN_FP16 && info.ndim == 1, "fp16: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
    CHECK(parse(buf, n, NULL, &info, err) == 0 && info.ndim == 0 && info.data_bytes == 4, "scalar: %s", err);
    n = make_npy(buf, 1, "{\"shape\": (0, 7), \"fortran_order\": False, \"descr\": \"<f4\"}", 0);
    CHECK(parse(buf, n, NULL, &info, err) == 0 && info.data_bytes == 0, "empty, any key order: %s", err);

    /* bf16: '<u2' or '|V2' with the hint only. */
    n = make_npy(buf, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 8);
    CHECK(parse(buf, n, "bf16", &info, err) == 0 && info.dtype == ATTN_BF16, "u2 bf16: %s", err);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "bf16"), "u2 without hint: %s", err);
    n = make_npy(buf, 1, "{'descr': '|V2', 'fortran_order': False, 'shape': (4,), }", 8);
    CHECK(parse(buf, n, "bf16", &info, err) == 0 && info.dtype == ATTN_BF16, "V2 bf16: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, "fp16", &info, err) != 0, "hint disagrees");

    /* Refusals. */
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "fortran"), "fortran: %s", err);
    n = make_npy(buf, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "little-endian"), "big-endian: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "not supported"), "f8: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "needs 8"), "size disagrees: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "overflow"), "overflow: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "fortran_order"), "missing key: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0, "repeated key");
    n = make_npy(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0, "structured dtype");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0, "negative dim");
    n = make_npy(buf, 7, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "version"), "version: %s", err);
    CHECK(npy_parse(buf, 5, 5, NULL, &info, err, sizeof err) != 0, "too short");
    memcpy(buf, "\x93NUMPY\x01\x00\xff\xff", 10);
    CHECK(npy_header_length(buf, 10, 100, &hl, err, sizeof err) != 0 && strstr(err, "only 100"), "past body: %s", err);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    CHECK(npy_parse(buf, 20, n, NULL, &info, err, sizeof err) != 0 && strstr(err, "truncated"), "truncated: %s", err);
    buf[0] = 'X';
    CHECK(parse(buf, n, NULL, &info, err) != 0 && strstr(err, "magic"), "magic: %s", err);

    /* The writer: a header the parser reads back, 64-byte aligned. */
    {
        int64_t shape[4] = {2, 4, 128, 64}, one[1] = {7};
        char h[512];
        size_t len = npy_write_header(h, sizeof h, ATTN_FP16, 4, shape);
        CHECK(len > 0 && len % 64 == 0, "write len %zu", len);
        memcpy(buf, h, len);
        CHECK(npy_parse(buf, len, len + 2ull * 4 * 128 * 64 * 2, NULL, &info, err, sizeof err) == 0 &&
                  info.ndim == 4 && info.shape[3] == 64 && info.dtype == ATTN_FP16,
              "write/parse: %s", err);
        len = npy_write_header(h, sizeof h, ATTN_BF16, 1, one);
        memcpy(buf, h, len);
        CHECK(npy_parse(buf, len, len + 14, "bf16", &info, err, sizeof err) == 0 && info.shape[0] == 7, "1-D bf16: %s", err);
        h[len - 1] = '\0';
        CHECK(strstr(h + 10, "(7,)") != NULL, "1-D tuple has its comma");
        CHECK(npy_write_header(h, 32, ATTN_FP32, 4, shape) == 0, "too small a buffer");
        /* int32 (block tables, lengths): '<i4' both ways, with or without the hint. */
        len = npy_write_header(h, sizeof h, ATTN_INT32, 1, one);
        memcpy(buf, h, len);
        CHECK(npy_parse(buf, len, len + 28, NULL, &info, err, sizeof err) == 0 && info.dtype == ATTN_INT32 &&
                  info.data_bytes == 28, "1-D int32: %s", err);
        CHECK(npy_parse(buf, len, len + 28, "int32", &info, err, sizeof err) == 0, "int32 hint: %s", err);
        CHECK(npy_parse(buf, len, len + 28, "fp32", &info, err, sizeof err) != 0, "int32 is not fp32");
        CHECK(attn_dtype_bytes(ATTN_INT32) == 4 && !strcmp(attn_dtype_name(ATTN_INT32), "int32"), "int32's name, size");
    }
    return CHECK_DONE();
}
