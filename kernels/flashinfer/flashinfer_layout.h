/* flashinfer_layout.h — where the module's decode and ragged routes keep things in the
 * workspace: plain C, so that the unit tests can hold common/variant_info.c's bound (what the
 * front reserves) against it without the module. Every size is a bound from the case's sizes
 * (batch, heads, the length bounds, total_q), never from its per-sequence arrays, so that the
 * front can reserve it before the lengths exist.
 *
 * Decode. A contiguous cache is handed to FlashInfer's decode as pages of
 * ATTND_FI_DECODE_PAGE keys over the same memory (vLLM's default block size); a paged cache
 * as its own pages: its plan may then split a long sequence into chunks of pages. The
 * workspace holds, each 256-byte aligned: DecodePlan's int buffer (the schedule), its float
 * buffer (split-KV partial outputs), and the page table (indptr, page ids, keys on each last
 * page), sized for the largest plan DecodePlan can make: each sequence splits into at most
 * ⌈pages / max(128 / page, 1)⌉ chunks (scheduler.cuh,
 * PartitionPagedKVCacheBinarySearchMinNumPagePerBatch never goes below that many pages per
 * chunk), and each buffer it carves is given its alignment (16) on top.
 *
 * Tensor-core decode (the default, as vLLM runs every decode; impl cuda_cores takes the
 * CUDA-core one above): FA2's batch prefill over the same paged view, one query row per sequence,
 * planned by PrefillPlan with split-KV on (BatchDecodeWithPagedKVCacheWrapper(
 * use_tensor_cores=True)'s default). Its int buffer holds three int32 arrays of one entry per
 * (query tile, chunk) CTA, the output indptr, the chunk size and the merge indptr (one per
 * sequence); its float buffer the split partials, which PrefillPlan sizes as
 * ⌈CTAs·cta_tile_q / group⌉ rows of head_dim + 1 floats per query head. cta_tile_q is
 * FlashInfer's FA2DetermineCtaTileQ of the packed rows (the group); chunks per sequence as for
 * the decode. q_indptr (0, 1, …, batch) and the page table follow.
 *
 * Paged prefill (Hopper): more than one query row a sequence over a paged cache, or over a
 * contiguous one as the decode's pages of ATTND_FI_DECODE_PAGE keys. PrefillSM90Plan's int
 * buffer as for the ragged prefill below, the page table, and where q and out are attnd's
 * [B,H,Sq,D] (not a ragged batch) their token-major copies, [B·Sq,H,D] each.
 *
 * Ragged prefill. The batch prefill's plan writes its schedule into an int buffer: on Hopper
 * (PrefillSM90Plan) seven int32 arrays of one entry per (query tile of 128 or more rows,
 * query head) and one per SM; FA2 (PrefillPlan, split-KV off) three of one entry per query
 * tile of at least 16 packed rows (rows × group size), and the output indptr. FA2 also reads
 * q_indptr and kv_indptr on the device: they follow, 256-byte aligned.
 */
#ifndef FLASHINFER_LAYOUT_H
#define FLASHINFER_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/flashinfer/flashinfer_abi.h"

#define ATTND_FI_DECODE_PAGE 16
#define ATTND_FI_PAGED_ROWS 16 /* Hopper: a contiguous cache's query rows a sequence that take the paged prefill */
#define ATTND_FI_MAX_SMS 1024 /* PrefillSM90Plan's per-SM array, bounded: the module refuses a device with more */

/* Byte offsets into the workspace, and its size. */
typedef struct attnd_fi_decode_layout {
    size_t int_off, int_bytes, float_off, float_bytes;
    size_t indptr_off, indices_off, last_page_len_off, total;
    size_t qo_indptr_off;  /* tensor-core decode: [batch + 1] int32 (0 for the CUDA-core one) */
    size_t q_staged_off, out_staged_off; /* paged prefill of a [B,H,Sq,D] q: its token-major q and out (else 0) */
    int64_t pages_per_seq; /* pages covering kv_len (at most) */
    int64_t page;          /* keys a page: the cache's page_size, or ATTND_FI_DECODE_PAGE for a contiguous one */
} attnd_fi_decode_layout;

/* The ragged routes' offsets and size. */
typedef struct attnd_fi_ragged_layout {
    size_t int_off, int_bytes;         /* the plan's int buffer */
    size_t qo_indptr_off, kv_indptr_off; /* FA2: [batch + 1] int32 each */
    size_t total;
} attnd_fi_ragged_layout;

static inline size_t attnd_fi_align256(size_t n) { return (n + 255) / 256 * 256; }

/* Whether FlashInfer's CUDA-core decode is compiled for group query heads per K/V head
 * (utils.cuh DISPATCH_GQA_GROUP_SIZE; others throw "Unsupported group_size"). */
static inline int attnd_fi_cuda_cores_group(int64_t group)
{
    return group == 1 || group == 2 || group == 3 || group == 4 || group == 6 || group == 8 || group == 16;
}

/* The page table after the plan's buffers, from at. */
static inline size_t attnd_fi_page_table_layout(const attnd_fi_case *c, attnd_fi_decode_layout *l, size_t at)
{
    l->indptr_off = at;
    at += attnd_fi_align256((size_t)(c->batch + 1) * 4);
    l->indices_off = at;
    at += attnd_fi_align256((size_t)c->batch * (size_t)l->pages_per_seq * 4);
    l->last_page_len_off = at;
    at += attnd_fi_align256((size_t)c->batch * 4);
    return at;
}

/* Chunks a sequence splits into at most: a plan never makes one of fewer than
 * max(128 / page, 1) pages, and a sequence is at least one chunk. */
static inline size_t attnd_fi_chunks_per_seq(int64_t pages, int64_t page)
{
    const int64_t min_pages = 128 / page > 1 ? 128 / page : 1;
    const int64_t chunks = (pages + min_pages - 1) / min_pages;
    return chunks > 1 ? (size_t)chunks : 1;
}

static inline attnd_fi_decode_layout attnd_fi_decode_layout_of(const attnd_fi_case *c)
{
    attnd_fi_decode_layout l;
    const int64_t page = c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE;
    size_t chunks, at = 0;

    memset(&l, 0, sizeof l);
    l.page = page;
    l.pages_per_seq = (c->kv_len + page - 1) / page;
    chunks = (size_t)c->batch * attnd_fi_chunks_per_seq(l.pages_per_seq, page);
    /* request_indices, kv_tile_indices and o_indptr (chunks + 1) int32, the chunk size, the
     * block-valid mask (bool), each aligned to 16 */
    l.int_bytes = 3 * (chunks * 4 + 16) + 4 + 16 + (chunks + 16) + 64;
    /* tmp_v: heads·chunks·head_dim floats; tmp_s: heads·chunks floats */
    l.float_bytes = (size_t)c->heads * chunks * ((size_t)c->head_dim + 1) * 4 + 2 * 16;
    l.int_off = at;
    at += attnd_fi_align256(l.int_bytes);
    l.float_off = at;
    at += attnd_fi_align256(l.float_bytes);
    l.total = attnd_fi_page_table_layout(c, &l, at);
    return l;
}

/* FlashInfer's FA2DetermineCtaTileQ (utils.cuh) on compute capability 8.0 and newer for
 * packed rows of one query row per sequence (the group), 16-bit K/V, head_dim up to 256. */
static inline int64_t attnd_fi_tc_cta_tile_q(int64_t group, int64_t head_dim)
{
    if (group > 64 && head_dim < 256) return 128;
    return group > 16 ? 64 : 16;
}

static inline attnd_fi_decode_layout attnd_fi_decode_tc_layout_of(const attnd_fi_case *c)
{
    attnd_fi_decode_layout l;
    const int64_t page = c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE;
    const int64_t group = c->heads / c->kv_heads, cta_q = attnd_fi_tc_cta_tile_q(group, c->head_dim);
    size_t ctas, rows, at = 0;

    memset(&l, 0, sizeof l);
    l.page = page;
    l.pages_per_seq = (c->kv_len + page - 1) / page;
    /* (query tile, chunk) CTAs per K/V head: ⌈group / cta_tile_q⌉ tiles a sequence */
    ctas = (size_t)c->batch * attnd_fi_chunks_per_seq(l.pages_per_seq, page) *
           (size_t)((group + cta_q - 1) / cta_q);
    rows = (ctas * (size_t)cta_q + (size_t)group - 1) / (size_t)group;
    /* request, query tile and kv tile indices; o_indptr and merge_indptr (batch + 1 each);
     * the chunk size: each aligned to 16 */
    l.int_bytes = 3 * (ctas * 4 + 16) + 2 * (((size_t)c->batch + 1) * 4 + 16) + 4 + 16 + 64;
    /* tmp_v: heads·rows·head_dim floats; tmp_s: heads·rows floats */
    l.float_bytes = (size_t)c->heads * rows * ((size_t)c->head_dim + 1) * 4 + 2 * 16;
    l.int_off = at;
    at += attnd_fi_align256(l.int_bytes);
    l.float_off = at;
    at += attnd_fi_align256(l.float_bytes);
    l.qo_indptr_off = at;
    at += attnd_fi_align256(((size_t)c->batch + 1) * 4);
    l.total = attnd_fi_page_table_layout(c, &l, at);
    return l;
}

/* PrefillSM90Plan's int buffer for rows query rows in all: seven int32 arrays of one entry per
 * (query tile of at least 128 rows, query head), Σ ⌈qo_len / 128⌉ ≤ rows/128 + batch tiles a
 * head, and one array per SM. */
static inline size_t attnd_fi_sm90_plan_int_bytes(const attnd_fi_case *c, int64_t rows)
{
    const size_t n = (size_t)c->heads * ((size_t)rows / 128 + (size_t)c->batch + 1);
    return 7 * (n * 4 + 16) + (ATTND_FI_MAX_SMS + 1) * 4 + 16;
}

/* Query rows in all: Σ lengths of a ragged batch, batch·seq_q of a dense q. */
static inline int64_t attnd_fi_total_rows(const attnd_fi_case *c)
{
    return c->ragged ? c->total_q : c->batch * c->seq_q;
}

static inline attnd_fi_decode_layout attnd_fi_paged_prefill_layout_of(const attnd_fi_case *c)
{
    attnd_fi_decode_layout l;
    const int64_t page = c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE, rows = attnd_fi_total_rows(c);
    const size_t staged = attnd_fi_align256((size_t)rows * (size_t)(c->heads * c->head_dim) * 2);
    size_t at = 0;

    memset(&l, 0, sizeof l);
    l.page = page;
    l.pages_per_seq = (c->kv_len + page - 1) / page;
    l.int_bytes = attnd_fi_sm90_plan_int_bytes(c, rows);
    l.int_off = at;
    at += attnd_fi_align256(l.int_bytes);
    at = attnd_fi_page_table_layout(c, &l, at);
    if (!c->ragged) {
        l.q_staged_off = at;
        at += staged;
        l.out_staged_off = at;
        at += staged;
    }
    l.total = at;
    return l;
}

/* sm90: PrefillSM90Plan's layout (1) or FA2's PrefillPlan's (0). */
static inline attnd_fi_ragged_layout attnd_fi_ragged_layout_of(const attnd_fi_case *c, int sm90)
{
    attnd_fi_ragged_layout l;
    size_t at = 0, n;

    memset(&l, 0, sizeof l);
    if (sm90) {
        l.int_bytes = attnd_fi_sm90_plan_int_bytes(c, c->total_q);
    } else {
        /* query tiles of at least 16 packed rows: Σ ⌈qo_len·group / 16⌉ ≤ total·group/16 + batch */
        n = (size_t)c->total_q * (size_t)(c->heads / c->kv_heads) / 16 + (size_t)c->batch + 1;
        l.int_bytes = 3 * (n * 4 + 16) + ((size_t)c->batch + 1) * 4 + 16 + 4 + 16;
    }
    l.int_off = at;
    at += attnd_fi_align256(l.int_bytes);
    l.qo_indptr_off = at;
    at += sm90 ? 0 : attnd_fi_align256(((size_t)c->batch + 1) * 4);
    l.kv_indptr_off = at;
    at += sm90 ? 0 : attnd_fi_align256(((size_t)c->batch + 1) * 4);
    l.total = at;
    return l;
}

#endif
