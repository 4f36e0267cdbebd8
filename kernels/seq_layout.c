/* seq_layout.c — cu_seqlens, the page order and the block table of a serving batch
 * (seq_layout.h), and moving K/V between a paged cache and its contiguous twin.
 */
#include "kernels/seq_layout.h"

#include <stdlib.h>
#include <string.h>

#include "common/seeded.h"

/* A page and its draw: the page order sorts these. */
typedef struct page_draw {
    uint64_t draw;
    int32_t page;
} page_draw;

static int page_draw_cmp(const void *a, const void *b)
{
    const page_draw *x = a, *y = b;
    if (x->draw != y->draw) return x->draw < y->draw ? -1 : 1;
    return (x->page > y->page) - (x->page < y->page);
}

int seq_layout_page_order(uint64_t seed, int64_t num_pages, int32_t *order)
{
    uint64_t key = seeded_stream_key(seed, SEEDED_STREAM_PAGES);
    page_draw *d = malloc((size_t)(num_pages > 0 ? num_pages : 1) * sizeof *d);
    int64_t i;

    if (!d) return -1;
    for (i = 0; i < num_pages; i++) d[i].draw = seeded_draw(key, (uint64_t)i), d[i].page = (int32_t)i;
    qsort(d, (size_t)num_pages, sizeof *d, page_draw_cmp);
    for (i = 0; i < num_pages; i++) order[i] = d[i].page;
    free(d);
    return 0;
}

double seq_layout_bytes(const attn_problem *p)
{
    double bytes = 0.0;
    if (p->ragged) bytes += 2.0 * (double)(p->batch + 1) * sizeof(int32_t);
    if (p->page_size > 0) /* the table, and the order with its draws while it is sorted */
        bytes += (double)p->batch * (double)((p->seq_kv + p->page_size - 1) / p->page_size) * sizeof(int32_t) +
                 (double)p->num_pages * (double)(sizeof(page_draw) + sizeof(int32_t));
    return bytes;
}

void seq_layout_free(seq_layout *l)
{
    free(l->cu_seqlens_q), free(l->cu_seqlens_kv), free(l->block_table);
    memset(l, 0, sizeof *l);
}

/* cu[0] = 0, cu[b+1] = cu[b] + len[b] (len NULL: every sequence `bound`). */
static int32_t *prefix_sums(const int32_t *len, int64_t batch, int64_t bound)
{
    int32_t *cu = malloc((size_t)(batch + 1) * sizeof *cu);
    int64_t b;

    if (!cu) return NULL;
    cu[0] = 0;
    for (b = 0; b < batch; b++) cu[b + 1] = cu[b] + (int32_t)(len ? len[b] : bound);
    return cu;
}

/* The block table: each sequence's pages, in turn, from the page order. */
static int build_block_table(seq_layout *l, const attn_problem *p, uint64_t seed)
{
    int64_t width = (p->seq_kv + p->page_size - 1) / p->page_size, next = 0, b, j;
    int32_t *order = malloc((size_t)p->num_pages * sizeof *order);

    l->block_table = calloc((size_t)(p->batch * width > 0 ? p->batch * width : 1), sizeof *l->block_table);
    if (!order || !l->block_table || seq_layout_page_order(seed, p->num_pages, order) != 0) {
        free(order);
        return -1;
    }
    for (b = 0; b < p->batch; b++) {
        int64_t pages = (attn_seqlen_kv(p, b) + p->page_size - 1) / p->page_size;
        for (j = 0; j < pages; j++) l->block_table[b * width + j] = order[next++];
    }
    free(order);
    l->seqs.block_table = l->block_table;
    l->seqs.pages_per_seq = width;
    return 0;
}

int seq_layout_build(seq_layout *l, attn_problem *p, const int32_t *len_q, const int32_t *len_kv, uint64_t seed)
{
    memset(l, 0, sizeof *l);
    p->seqs = NULL;
    if (!p->ragged && p->page_size <= 0) return 0;
    if (p->ragged) {
        l->cu_seqlens_q = prefix_sums((p->ragged & ATTN_RAGGED_Q) ? len_q : NULL, p->batch, p->seq_q);
        l->cu_seqlens_kv = prefix_sums((p->ragged & ATTN_RAGGED_KV) ? len_kv : NULL, p->batch, p->seq_kv);
        if (!l->cu_seqlens_q || !l->cu_seqlens_kv) goto oom;
        l->seqs.cu_seqlens_q = l->cu_seqlens_q, l->seqs.cu_seqlens_kv = l->cu_seqlens_kv;
    }
    p->seqs = &l->seqs; /* the lengths, for the block table */
    if (p->page_size > 0 && build_block_table(l, p, seed) != 0) goto oom;
    return 0;
oom:
    seq_layout_free(l);
    p->seqs = NULL;
    return -1;
}

/* Every token's row of one tensor, from one layout of p to the other. */
static void move_rows(const attn_problem *p, const void *src, void *dst, int64_t dim, size_t esz, int to_pages)
{
    attn_problem flat = *p; /* the contiguous twin */
    int64_t b, g, j, hkv = attn_kv_heads(p);
    size_t row = (size_t)dim * esz;

    flat.page_size = 0, flat.num_pages = 0;
    for (b = 0; b < p->batch; b++)
        for (j = 0; j < attn_seqlen_kv(p, b); j++)
            for (g = 0; g < hkv; g++) {
                size_t paged = (size_t)attn_kv_row(p, b, g, j, dim) * esz, plain = (size_t)attn_kv_row(&flat, b, g, j, dim) * esz;
                if (to_pages)
                    memcpy((char *)dst + paged, (const char *)src + plain, row);
                else
                    memcpy((char *)dst + plain, (const char *)src + paged, row);
            }
}

void seq_layout_to_pages(const attn_problem *p, const void *contiguous, void *cache, int64_t dim, size_t esz)
{
    move_rows(p, contiguous, cache, dim, esz, 1);
}

void seq_layout_from_pages(const attn_problem *p, const void *cache, void *contiguous, int64_t dim, size_t esz)
{
    move_rows(p, cache, contiguous, dim, esz, 0);
}
