/* safetensors.h — the safetensors header: parse one (uploads).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON, then the data
 *   {"name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [begin, end]}, …,
 *    "__metadata__": {…string: string…}}
 * with offsets relative to the start of the data. Pure C, no I/O (cJSON only). Refused:
 * a header past the body or over ST_MAX_HEADER_BYTES, JSON that is not an object of such
 * entries, dtypes other than BF16/F16/F32, duplicate names, sizes that overflow, offsets
 * whose span disagrees with shape·itemsize, a data section not covered exactly by the
 * tensors (gaps, overlaps or trailing bytes), as the format requires, and strings that are
 * not UTF-8: tensor names must pass st_name_check, __metadata__ must be valid UTF-8, and no
 * string may hold an escaped NUL (\u0000, which would cut a name short).
 */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/attn.h"

#define ST_PREFIX_BYTES 8
#define ST_MAX_HEADER_BYTES (16u << 20)
#define ST_MAX_TENSORS 4096
#define ST_MAX_DIMS 8
#define ST_MAX_NAME 128

typedef struct st_tensor {
    char name[ST_MAX_NAME];
    attn_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t offset; /* in the file (8 + N + begin) */
    uint64_t bytes;
} st_tensor;

/* Is s (len bytes) fit to be a tensor's name? It must be valid UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF) without control characters (C0, DEL, C1) or
 * invisible format characters (bidi controls, zero-width ones, U+2028/U+2029): names are
 * listed as JSON, which must be UTF-8, and read by people, whose terminals act on control
 * characters and whose screens reorder text around bidi controls. NUL counts as a control
 * character. 0, or -1 with why ("byte 3 (0xff) is not valid UTF-8"). Uploads' name= is
 * checked with it too (tensor_upload_parse.c). */
int st_name_check(const char *s, size_t len, char *why, size_t why_len);

/* From the first n bytes: the total header length 8 + N. 0, or -1 with err. */
int st_header_length(const uint8_t *buf, size_t n, uint64_t file_size, uint64_t *header_len, char *err,
                     size_t err_len);

/* Parse the header (buf holds at least header_len bytes) of a file of file_size bytes.
 * *out: a malloc'd array of *count tensors in file order (caller frees; NULL when none).
 * 0, or -1 with err and nothing allocated. */
int st_parse(const uint8_t *buf, size_t n, uint64_t file_size, st_tensor **out, int *count, char *err,
             size_t err_len);

#endif
