/* flashinfer_layout.h — where the module's decode route keeps things in the workspace: plain
 * C, so that the unit tests can hold common/variant_info.c's bound (what the front reserves)
 * against it without the module.
 *
 * The contiguous cache is handed to FlashInfer's decode as pages of ATTND_FI_DECODE_PAGE keys
 * over the same memory (vLLM's default block size): its plan may then split a long sequence
 * into chunks of pages. The workspace holds, each 256-byte aligned: DecodePlan's int buffer
 * (the schedule), its float buffer (split-KV partial outputs), and the page table (indptr,
 * page ids, keys on each last page), sized for the largest plan DecodePlan can make: each
 * sequence splits into at most ⌈pages / max(128 / page, 1)⌉ chunks (scheduler.cuh,
 * PartitionPagedKVCacheBinarySearchMinNumPagePerBatch never goes below that many pages per
 * chunk), and each buffer it carves is given its alignment (16) on top.
 */
#ifndef FLASHINFER_LAYOUT_H
#define FLASHINFER_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/flashinfer/flashinfer_abi.h"

#define ATTND_FI_DECODE_PAGE 16

/* Byte offsets into the workspace, and its size. */
typedef struct attnd_fi_decode_layout {
    size_t int_off, int_bytes, float_off, float_bytes;
    size_t indptr_off, indices_off, last_page_len_off, total;
    int64_t pages_per_seq; /* pages of ATTND_FI_DECODE_PAGE keys covering kv_len */
} attnd_fi_decode_layout;

static inline size_t attnd_fi_align256(size_t n) { return (n + 255) / 256 * 256; }

static inline attnd_fi_decode_layout attnd_fi_decode_layout_of(const attnd_fi_case *c)
{
    attnd_fi_decode_layout l;
    const int64_t page = ATTND_FI_DECODE_PAGE, min_pages = 128 / page > 1 ? 128 / page : 1;
    size_t chunks, at = 0;

    memset(&l, 0, sizeof l);
    l.pages_per_seq = (c->kv_len + page - 1) / page;
    chunks = (size_t)c->batch * (size_t)((l.pages_per_seq + min_pages - 1) / min_pages);
    /* request_indices, kv_tile_indices and o_indptr (chunks + 1) int32, the chunk size, the
     * block-valid mask (bool), each aligned to 16 */
    l.int_bytes = 3 * (chunks * 4 + 16) + 4 + 16 + (chunks + 16) + 64;
    /* tmp_v: heads·chunks·head_dim floats; tmp_s: heads·chunks floats */
    l.float_bytes = (size_t)c->heads * chunks * ((size_t)c->head_dim + 1) * 4 + 2 * 16;
    l.int_off = at;
    at += attnd_fi_align256(l.int_bytes);
    l.float_off = at;
    at += attnd_fi_align256(l.float_bytes);
    l.indptr_off = at;
    at += attnd_fi_align256((size_t)(c->batch + 1) * 4);
    l.indices_off = at;
    at += attnd_fi_align256((size_t)c->batch * (size_t)l.pages_per_seq * 4);
    l.last_page_len_off = at;
    at += attnd_fi_align256((size_t)c->batch * 4);
    l.total = at;
    return l;
}

#endif
