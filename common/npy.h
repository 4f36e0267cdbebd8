/* npy.h — the NumPy .npy header: parse one (uploads) and write one (downloads).
 *
 * Pure C, no I/O: the caller hands the first bytes of a file plus the file's total size;
 * the parser says where the data starts and how many bytes it must have, and refuses
 * anything it cannot serve as is:
 *   format versions 1.0, 2.0 and 3.0; C order only (fortran_order True is refused);
 *   little-endian only ('<' or, for one-byte-order-free types, '|');
 *   dtypes '<f4' (fp32), '<f2' (fp16), '<i4' (int32: block tables and lengths), and bf16 as
 *   '<u2' or '|V2' (2-byte void) only when the caller says dtype=bf16 (NumPy has no bf16 of
 *   its own);
 *   0 to NPY_MAX_DIMS dimensions, every product checked for overflow;
 *   the data must be exactly shape·itemsize bytes: no more, no fewer.
 * Every refusal comes with a one-line message for a 400 answer.
 */
#ifndef NPY_H
#define NPY_H

#include <stddef.h>
#include <stdint.h>

#include "common/attn.h"

#define NPY_MAX_DIMS 8
#define NPY_PREFIX_BYTES 12                /* enough to learn the header's length */
#define NPY_MAX_HEADER_BYTES (1u << 20)    /* larger headers are refused (NumPy writes < 1 KiB) */

typedef struct npy_info {
    attn_dtype dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    uint64_t data_offset; /* where the elements start in the file */
    uint64_t data_bytes;  /* shape product · itemsize, = file_size - data_offset */
} npy_info;

/* From the first n bytes (n ≥ NPY_PREFIX_BYTES, or the whole file when shorter): the total
 * header length (magic, version, length field and the dictionary), which the caller then
 * reads and passes to npy_parse. 0, or -1 with err filled. */
int npy_header_length(const uint8_t *buf, size_t n, uint64_t file_size, uint64_t *header_len, char *err,
                      size_t err_len);

/* Parse the header (buf holds at least header_len bytes as npy_header_length gave) of a
 * file of file_size bytes. dtype_hint: NULL, or the client's dtype ("bf16", "fp16",
 * "fp32"): required for bf16, and when given it must agree with the file. 0, or -1 with err. */
int npy_parse(const uint8_t *buf, size_t n, uint64_t file_size, const char *dtype_hint, npy_info *out, char *err,
              size_t err_len);

/* Write a version 1.0 header for a C-order little-endian array ('<f4', '<f2', '<i4'; bf16 as '<u2':
 * view it with ml_dtypes.bfloat16). The header is padded to a multiple of 64 bytes. Returns
 * its length, or 0 when it does not fit in len. */
size_t npy_write_header(char *buf, size_t len, attn_dtype dtype, int ndim, const int64_t *shape);

#endif
