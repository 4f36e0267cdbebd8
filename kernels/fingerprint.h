/* fingerprint.h — the 64-bit fingerprint of an output (or any tensor), documented in
 * docs/fingerprint.md so a client can recompute it from the downloaded bytes.
 *
 * The bytes, in row-major order, are padded with zeros to a multiple of 8 and read as
 * little-endian uint64 words w_0 … w_{m-1}. With mix64 from inputs.h, mod 2^64:
 *
 *   fingerprint = mix64( n_bytes ^ Σ_i mix64(w_i + (i + 1) · 0x9E3779B97F4A7C15) )
 *
 * The sum makes it parallel (any order, any number of threads, a GPU reduction); the index
 * inside each term makes it order-sensitive, so swapped elements change it.
 */
#ifndef FINGERPRINT_H
#define FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/inputs.h"

ATTN_HD uint64_t fingerprint_term(uint64_t word, uint64_t index)
{
    return inputs_mix64(word + (index + 1) * 0x9E3779B97F4A7C15ull);
}

ATTN_HD uint64_t fingerprint_finish(uint64_t term_sum, uint64_t n_bytes) { return inputs_mix64(n_bytes ^ term_sum); }

#ifdef __cplusplus
extern "C" {
#endif

/* Host fingerprint of n bytes. */
uint64_t fingerprint_bytes(const void *bytes, size_t n);

/* The term sum of a piece of a tensor: n bytes that start at its word first_word (n a
 * multiple of 8 but for the tensor's last piece, zero-padded). A tensor summed in pieces, in
 * any order, has fingerprint_finish(Σ of its pieces' sums mod 2^64, its byte count). */
uint64_t fingerprint_piece_sum(const void *bytes, size_t n, uint64_t first_word);

#ifdef __cplusplus
}
#endif
#endif
