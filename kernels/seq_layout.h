/* seq_layout.h — the host arrays of a ragged batch or a paged K/V cache (attn_seqs in
 * common/attn.h), made from the per-sequence lengths and the run's seed as docs/inputs.md
 * states it, so a client (clients/python/attnd_ref) can make the same block table.
 *
 *   cu_seqlens     prefix sums of the lengths, [batch + 1], from 0 (FlashAttention's cu_seqlens)
 *   page order     pages 0 .. num_pages-1 sorted by draw p of the seed's page stream
 *                  (common/seeded.h), ties by page id: a seeded random permutation
 *   block table    [batch, ⌈seq_kv / page_size⌉]: sequence b's page j (j < ⌈Skv_b / page_size⌉)
 *                  is the order's entry (pages of the sequences before b) + j; the rest are 0
 *
 * The cache holds more pages than the sequences fill (num_pages, common/run_request.c); the
 * ones no sequence uses stay where the order puts them, scattered among the used ones.
 */
#ifndef SEQ_LAYOUT_H
#define SEQ_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One problem's arrays; `seqs` points into them. Free with seq_layout_free. */
typedef struct seq_layout {
    attn_seqs seqs;
    int32_t *cu_seqlens_q, *cu_seqlens_kv; /* ragged only, else NULL */
    int32_t *block_table;                  /* paged only, else NULL */
} seq_layout;

/* Host bytes seq_layout_build takes for p, its scratch included (the page order). */
double seq_layout_bytes(const attn_problem *p);

/* Build p's arrays from len_q and len_kv (batch lengths each; NULL on a side that is not
 * ragged: every sequence the bound) and seed, and point p->seqs at them. A dense problem
 * builds nothing (p->seqs NULL). 0, or -1 when out of memory (l then holds nothing). */
int seq_layout_build(seq_layout *l, attn_problem *p, const int32_t *len_q, const int32_t *len_kv, uint64_t seed);

void seq_layout_free(seq_layout *l);

/* The page order alone: order[k] = the k-th page (num_pages entries). 0, or -1 when out of
 * memory. */
int seq_layout_page_order(uint64_t seed, int64_t num_pages, int32_t *order);

/* Copy a K or V tensor between the paged cache of p and its contiguous twin (p without
 * pages: [B, Hkv, Skv, dim], or [total_kv, Hkv, dim] when ragged), every token of every
 * sequence; the cache's other slots are left as they are. dim is head_dim for k, head_dim_v
 * for v; esz the bytes of one element. Needs p->seqs. */
void seq_layout_to_pages(const attn_problem *p, const void *contiguous, void *cache, int64_t dim, size_t esz);
void seq_layout_from_pages(const attn_problem *p, const void *cache, void *contiguous, int64_t dim, size_t esz);

#ifdef __cplusplus
}
#endif
#endif
