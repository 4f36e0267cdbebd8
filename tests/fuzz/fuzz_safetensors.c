/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser
 * (server/front/tensors/safetensors.c). The first byte picks whether the parser gets the whole file or
 * only the header bytes it asked for; on success every tensor must lie inside the file and
 * the tensors must tile the data section exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/front/tensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[300];
    st_tensor *t = NULL;
    uint64_t hl = 0, covered = 0;
    int count = 0, i;
    size_t n;
    uint8_t *copy;

    if (size < 1) return 0;
    n = (data[0] & 1) ? 0 : size - 1;
    data++, size--;
    if (n == 0 && st_header_length(data, size < 8 ? size : 8, size, &hl, err, sizeof err) == 0) n = (size_t)hl;
    if (n == 0) n = size < 8 ? size : 8;
    copy = malloc(n ? n : 1);
    if (!copy) return 0;
    memcpy(copy, data, n);
    if (st_parse(copy, n, size, &t, &count, err, sizeof err) == 0) {
        for (i = 0; i < count; i++) {
            if (t[i].offset + t[i].bytes > size) abort();
            covered += t[i].bytes;
        }
        if (st_header_length(copy, n, size, &hl, err, sizeof err) != 0 || hl + covered != size) abort();
    } else if (t || count) {
        abort();
    }
    free(t);
    free(copy);
    return 0;
}
