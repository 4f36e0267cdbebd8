/* fuzz_npy.c — libFuzzer target for the .npy header parser (common/npy.c).
 *
 * The input is a whole upload. The first byte picks how the parser sees it: the whole
 * file as the buffer, or only its first bytes (the front reads a prefix, then the header)
 * with the true file size, and with or without a dtype hint. The parser must never read
 * past n, never crash, and on success describe data that lies inside the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const hints[] = {NULL, "bf16", "fp16", "fp32", "x"};
    char err[300];
    npy_info info;
    uint64_t hl;
    uint8_t mode;
    size_t n;
    uint8_t *copy;

    if (size < 1) return 0;
    mode = data[0];
    data++, size--;
    /* A copy of exactly the bytes the parser may read, so ASan sees any overread. */
    n = (mode & 1) ? (size < NPY_PREFIX_BYTES ? size : NPY_PREFIX_BYTES) : size;
    copy = malloc(n ? n : 1);
    if (!copy) return 0;
    memcpy(copy, data, n);
    if (npy_header_length(copy, n, size, &hl, err, sizeof err) == 0 && hl > size) abort();
    if (npy_parse(copy, n, size, hints[(mode >> 1) % 5], &info, err, sizeof err) == 0) {
        if (info.data_offset + info.data_bytes != size) abort();
        if (info.ndim < 0 || info.ndim > NPY_MAX_DIMS) abort();
    }
    free(copy);
    {
        char h[512];
        int64_t shape[NPY_MAX_DIMS] = {0};
        int nd = (int)(mode % (NPY_MAX_DIMS + 1)), i;
        for (i = 0; i < nd && (size_t)i * 4 + 4 <= size; i++) memcpy(&shape[i], data + 4 * i, 4);
        for (i = 0; i < nd; i++) shape[i] = (shape[i] < 0 ? -shape[i] : shape[i]) & 0xffffffff;
        (void)npy_write_header(h, sizeof h, (attn_dtype)(mode % 3), nd, shape);
    }
    return 0;
}
