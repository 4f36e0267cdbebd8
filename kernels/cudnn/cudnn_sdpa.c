/* cudnn_sdpa.c — the `cudnn` variant: cuDNN's fused attention forward through the graph
 * (backend) C API, with every function from cudnn_loader.h's dlsym table.
 *
 * What PyTorch's SDPA cuDNN backend does, and so what this file does: describe attention as
 * an operation graph, let cuDNN's heuristics pick an engine, finalize an execution plan once
 * per shape (runtime compilation: 0.2–1 s), then every forward is one cudnnBackendExecute
 * (a 4-byte memset and one generated flash-attention kernel on the H200).
 *
 * The graph (cudnn-frontend's composite SDPA node, written out by hand; docs/cudnn.md):
 *
 *   S  = MATMUL(Q [b,h,sq,d], Kᵀ view [b,hkv,d,skv])       FLOAT, virtual; K/V head broadcast
 *   S1 = MUL(S, scale)                                     scale: FLOAT by-value
 *   causal:      row = GEN_INDEX(S1, axis 2), col = GEN_INDEX(S1, axis 3)      INT32
 *   bottom-right:row = SUB(ADD(row, skv), sq)                                  INT32 by-value
 *                keep = CMP_GE(row, col)                                       BOOLEAN
 *                S1 = BINARY_SELECT(S1, -inf, keep)                            -inf: by-value
 *   window W:    row = GEN_INDEX(S1, axis 2), col = GEN_INDEX(S1, axis 3)      INT32
 *                col = ADD(col, L)    L = W, or W - skv + sq bottom-right      FLOAT by-value
 *                keep = CMP_GT(col, row)                                       BOOLEAN
 *                S1 = BINARY_SELECT(S1, -inf, keep)
 *   M  = REDUCTION MAX(S1) [b,h,sq,1];  E = EXP(SUB(S1, M));  Z = REDUCTION ADD(E)
 *   stats = ADD(M, LOG(Z))    virtual (cudnn-frontend's inference graph); a real buffer
 *                             in the workspace only if cuDNN refuses the virtual one
 *   P  = DIV(E, Z)            virtual in the I/O dtype (cuDNN wants bmm2's A in bf16/fp16)
 *   O  = MATMUL(P, V [b,hkv,skv,dv])  [b,h,sq,dv]
 *
 * The two masks are the frontend's two diagonal-band nodes (right bound 0, then left bound
 * W), each with its own index pair and select, in that order: the shape cuDNN's SDPA fusion
 * matches for cuDNN before 9.21's single band-mask operation.
 *
 * A serving batch (paged K/V, ragged; cudnn_serving.h) changes the graph as the frontend's
 * padding mask, ragged offsets and paged caches do:
 *   seq_len_q, seq_len_kv  INT32 [b,1,1,1] in the workspace; bmm1 M/N and bmm2 M/K overrides
 *   padding:     row, col = GEN_INDEX (INT32); keep = AND(CMP_LT(row, seq_len_q),
 *                CMP_LT(col, seq_len_kv)); S1 = BINARY_SELECT(S1, -inf, keep), before the band
 *   bottom-right: row + seq_len_kv − seq_len_q (INT32 tensors, per sequence)
 *   window, bottom-right: col + L (INT32 by-value L = W) − seq_len_kv + seq_len_q
 *   ragged:      Q, K, V, O token-major (THD) strides, each with a ragged offset tensor
 *                (INT32 [b+1,1,1,1], elements) in the workspace
 *   paged:       K, V are containers [pages, hkv, page, d] over attnd's [pages, page, hkv, d]
 *                cache (strides, no copy); PAGED_CACHE_LOAD(container, block table
 *                [b,1,⌈skv/page⌉,1], seq_len_kv) gives the virtual Kᵀ and V the bmms read
 *
 * Ownership: a plan entry owns every descriptor it was built from (tensors, operations,
 * graph, engine config, plan) plus its variant pack, and destroys them when evicted. A
 * failed build destroys everything it created before returning.
 */
#include "kernels/cudnn/cudnn_sdpa.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include "kernels/cudnn/cudnn_graph.h"
#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_serving.h"

#define SDPA_MAX_DEVICES 64
#define SDPA_MAX_ENGINE_CFGS 64
#define SDPA_ALIGN 256 /* offsets inside the workspace */

/* Unique ids of the real tensors (the variant pack names them); virtual ones from 100. */
enum {
    SDPA_UID_Q = 1,
    SDPA_UID_K = 2,
    SDPA_UID_V = 3,
    SDPA_UID_O = 4,
    SDPA_UID_SCALE = 5,
    SDPA_UID_NEG_INF = 6,
    SDPA_UID_SEQ_KV = 7,
    SDPA_UID_SEQ_Q = 8,
    SDPA_UID_STATS = 9,
    SDPA_UID_LEFT_BOUND = 10,
    /* A serving batch's (cudnn_serving.h): per-sequence arrays in the workspace, the block
     * table (K's and V's: one table, two tensors as the frontend has them), the INT32 L. */
    SDPA_UID_SEQ_LEN_Q = 11,
    SDPA_UID_SEQ_LEN_KV = 12,
    SDPA_UID_OFFSET_Q = 13,
    SDPA_UID_OFFSET_K = 14,
    SDPA_UID_OFFSET_V = 15,
    SDPA_UID_OFFSET_O = 16,
    SDPA_UID_PAGE_TABLE_K = 17,
    SDPA_UID_PAGE_TABLE_V = 18,
    SDPA_UID_LEFT_BOUND_KEYS = 19,
    SDPA_UID_VIRTUAL = 100,
};

/* ---- the plan cache's key and LRU (pure logic, tested without cuDNN) ------------------ */

void cudnn_sdpa_key_make(const attn_problem *p, int device, cudnn_sdpa_key *out)
{
    memset(out, 0, sizeof *out); /* no padding garbage: keys compare field by field anyway */
    out->device = device;
    out->dtype = (int)p->dtype;
    out->mask = (int)p->mask;
    out->batch = p->batch;
    out->heads = p->heads;
    out->seq_q = p->seq_q;
    out->seq_kv = p->seq_kv;
    out->head_dim = p->head_dim;
    out->kv_heads = attn_kv_heads(p);
    out->head_dim_v = attn_dv(p);
    out->window_keys = p->window_keys > 0 ? p->window_keys : 0;
    out->ragged = p->ragged != 0; /* which side varies changes the lengths, not the graph */
    out->page_size = p->page_size > 0 ? p->page_size : 0;
    out->num_pages = p->page_size > 0 ? p->num_pages : 0;
    out->table_width = cudnn_serving_table_width(p);
}

int cudnn_sdpa_key_equal(const cudnn_sdpa_key *a, const cudnn_sdpa_key *b)
{
    return a->device == b->device && a->dtype == b->dtype && a->mask == b->mask && a->batch == b->batch &&
           a->heads == b->heads && a->seq_q == b->seq_q && a->seq_kv == b->seq_kv && a->head_dim == b->head_dim &&
           a->kv_heads == b->kv_heads && a->head_dim_v == b->head_dim_v && a->window_keys == b->window_keys &&
           a->ragged == b->ragged && a->page_size == b->page_size && a->num_pages == b->num_pages &&
           a->table_width == b->table_width;
}

int cudnn_sdpa_lru_find(cudnn_sdpa_lru *c, const cudnn_sdpa_key *key)
{
    int i;
    for (i = 0; i < CUDNN_SDPA_CACHE_ENTRIES; i++) {
        if (c->used[i] && cudnn_sdpa_key_equal(&c->keys[i], key)) {
            c->last_used[i] = ++c->clock;
            return i;
        }
    }
    return -1;
}

int cudnn_sdpa_lru_slot(const cudnn_sdpa_lru *c, int *evicted)
{
    int i, oldest = 0;
    *evicted = 0;
    for (i = 0; i < CUDNN_SDPA_CACHE_ENTRIES; i++)
        if (!c->used[i]) return i;
    for (i = 1; i < CUDNN_SDPA_CACHE_ENTRIES; i++)
        if (c->last_used[i] < c->last_used[oldest]) oldest = i;
    *evicted = 1;
    return oldest;
}

void cudnn_sdpa_lru_put(cudnn_sdpa_lru *c, int i, const cudnn_sdpa_key *key)
{
    c->keys[i] = *key;
    c->used[i] = 1;
    c->last_used[i] = ++c->clock;
}

/* ---- the SDPA graph ------------------------------------------------------------------- */

static cudnnDataType_t sdpa_io_type(attn_dtype t) { return t == ATTN_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

/* The by-value L of the window's keep test col + L > row: W keeps the W keys ending at the
 * row's position, which bottom-right alignment shifts by skv − sq (cudnn-frontend folds
 * that shift into L when the sequence lengths are fixed, as in a dense batch). */
static float sdpa_left_bound(const attn_problem *p)
{
    int64_t l = p->window_keys;
    if (p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT) l -= p->seq_kv - p->seq_q;
    return (float)l;
}

/* A serving batch's per-sequence inputs (cudnn_serving.h); NULL members in a dense graph. */
typedef struct sdpa_seq_tensors {
    cudnnBackendDescriptor_t len_q, len_kv;                  /* INT32 [b,1,1,1] */
    cudnnBackendDescriptor_t off_q, off_k, off_v, off_o;     /* INT32 [b+1,1,1,1], ragged only */
    cudnnBackendDescriptor_t table_k, table_v;               /* INT32 [b,1,⌈skv/page⌉,1], paged only */
} sdpa_seq_tensors;

static int sdpa_seq_inputs(cudnn_graph *g, const attn_problem *p, sdpa_seq_tensors *st)
{
    const int64_t b = p->batch, ones[4] = {1, 1, 1, 1}, len_dims[4] = {b, 1, 1, 1}, off_dims[4] = {b + 1, 1, 1, 1};
    const cudnnDataType_t i32 = CUDNN_DATA_INT32;
    memset(st, 0, sizeof *st);
    if (!cudnn_serving(p)) return 0;
    TRY(cudnn_graph_tensor(g, "seq_len_q tensor", SDPA_UID_SEQ_LEN_Q, i32, len_dims, ones, 0, 0, &st->len_q));
    TRY(cudnn_graph_tensor(g, "seq_len_kv tensor", SDPA_UID_SEQ_LEN_KV, i32, len_dims, ones, 0, 0, &st->len_kv));
    if (p->ragged) {
        TRY(cudnn_graph_tensor(g, "Q ragged offset tensor", SDPA_UID_OFFSET_Q, i32, off_dims, ones, 0, 0, &st->off_q));
        TRY(cudnn_graph_tensor(g, "O ragged offset tensor", SDPA_UID_OFFSET_O, i32, off_dims, ones, 0, 0, &st->off_o));
        if (p->page_size <= 0) {
            TRY(cudnn_graph_tensor(g, "K ragged offset tensor", SDPA_UID_OFFSET_K, i32, off_dims, ones, 0, 0,
                                   &st->off_k));
            TRY(cudnn_graph_tensor(g, "V ragged offset tensor", SDPA_UID_OFFSET_V, i32, off_dims, ones, 0, 0,
                                   &st->off_v));
        }
    }
    if (p->page_size > 0) {
        /* cuDNN reads ⌈skv/page⌉ entries a sequence (cudnn-frontend checks the table's dim is
         * exactly that); a row of an uploaded table may be longer: its stride says so. */
        const int64_t w = cudnn_serving_table_width(p), rows = (p->seq_kv + p->page_size - 1) / p->page_size;
        const int64_t dims[4] = {b, 1, rows, 1}, strides[4] = {w, w, 1, 1};
        TRY(cudnn_graph_tensor(g, "K page table tensor", SDPA_UID_PAGE_TABLE_K, i32, dims, strides, 0, 0,
                               &st->table_k));
        TRY(cudnn_graph_tensor(g, "V page table tensor", SDPA_UID_PAGE_TABLE_V, i32, dims, strides, 0, 0,
                               &st->table_v));
    }
    return 0;
}

/* K (as Kᵀ [b,hkv,d,skv]) or V ([b,hkv,skv,dv]) where the bmm reads it, with x = d or dv. Dense:
 * BHSD. Ragged: token-major (THD) strides and the ragged offsets. Paged: the real tensor is
 * the cache seen as cuDNN's container [pages, hkv, page, x] (attnd's [pages, page, hkv, x]:
 * strides only), loaded into a virtual tensor of the frontend's strides by PAGED_CACHE_LOAD. */
static int sdpa_kv_input(cudnn_graph *g, const attn_problem *p, const sdpa_seq_tensors *st, int is_k,
                         cudnnBackendDescriptor_t *out)
{
    const int64_t b = p->batch, hkv = attn_kv_heads(p), skv = p->seq_kv, x = is_k ? p->head_dim : attn_dv(p);
    const cudnnDataType_t io = sdpa_io_type(p->dtype);
    const int64_t uid = is_k ? SDPA_UID_K : SDPA_UID_V;
    const char *what = is_k ? "K^T tensor" : "V tensor";
    int64_t dims[4] = {b, hkv, skv, x}, strides[4] = {hkv * skv * x, skv * x, x, 1};

    if (p->page_size > 0) {
        const int64_t ps = p->page_size;
        const int64_t c_dims[4] = {p->num_pages, hkv, ps, x}, c_strides[4] = {ps * hkv * x, x, hkv * x, 1};
        cudnnBackendDescriptor_t container;
        TRY(cudnn_graph_tensor(g, is_k ? "K cache container tensor" : "V cache container tensor", uid, io, c_dims,
                               c_strides, 0, 0, &container));
        strides[0] = x * skv * hkv, strides[1] = x * skv, strides[2] = x, strides[3] = 1;
        if (is_k) dims[2] = x, dims[3] = skv, strides[2] = 1, strides[3] = x;
        TRY(cudnn_graph_tensor(g, what, 0, io, dims, strides, 1, 0, out));
        return cudnn_graph_paged_load(g, is_k ? "paged K cache load" : "paged V cache load", container,
                                      is_k ? st->table_k : st->table_v, st->len_kv, *out);
    }
    if (p->ragged) strides[1] = x, strides[2] = hkv * x;
    if (is_k) { /* Kᵀ is a view of K: dims 2 and 3 swapped with their strides */
        const int64_t s2 = strides[2];
        dims[2] = x, dims[3] = skv, strides[2] = 1, strides[3] = s2;
    }
    return cudnn_graph_tensor_ragged(g, what, uid, io, dims, strides, 0, 0, is_k ? st->off_k : st->off_v, out);
}

/* Keep (row, col) when row < seq_len_q and col < seq_len_kv of its sequence: cudnn-frontend's
 * padding mask, before the band masks. */
static int sdpa_padding_mask(cudnn_graph *g, const attn_problem *p, const sdpa_seq_tensors *st,
                             cudnnBackendDescriptor_t neg_inf, cudnnBackendDescriptor_t *s1)
{
    const int64_t b = p->batch, h = p->heads, sq = p->seq_q, skv = p->seq_kv;
    const int64_t s_dims[4] = {b, h, sq, skv}, s_strides[4] = {h * sq * skv, sq * skv, skv, 1};
    const cudnnDataType_t i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row, col, row_in, col_in, keep, masked;
    TRY(cudnn_graph_tensor(g, "padding row index tensor", 0, i32, s_dims, s_strides, 1, 0, &row));
    TRY(cudnn_graph_pointwise(g, "padding gen_row_index", CUDNN_POINTWISE_GEN_INDEX, i32, 2, *s1, NULL, NULL, row));
    TRY(cudnn_graph_tensor(g, "padding col index tensor", 0, i32, s_dims, s_strides, 1, 0, &col));
    TRY(cudnn_graph_pointwise(g, "padding gen_col_index", CUDNN_POINTWISE_GEN_INDEX, i32, 3, *s1, NULL, NULL, col));
    TRY(cudnn_graph_tensor(g, "row<seq_len_q tensor", 0, boolean, s_dims, s_strides, 1, 0, &row_in));
    TRY(cudnn_graph_pointwise(g, "row<seq_len_q CMP_LT", CUDNN_POINTWISE_CMP_LT, boolean, -1, row, st->len_q, NULL,
                              row_in));
    TRY(cudnn_graph_tensor(g, "col<seq_len_kv tensor", 0, boolean, s_dims, s_strides, 1, 0, &col_in));
    TRY(cudnn_graph_pointwise(g, "col<seq_len_kv CMP_LT", CUDNN_POINTWISE_CMP_LT, boolean, -1, col, st->len_kv, NULL,
                              col_in));
    TRY(cudnn_graph_tensor(g, "padding keep tensor", 0, boolean, s_dims, s_strides, 1, 0, &keep));
    TRY(cudnn_graph_pointwise(g, "padding LOGICAL_AND", CUDNN_POINTWISE_LOGICAL_AND, boolean, -1, row_in, col_in, NULL,
                              keep));
    TRY(cudnn_graph_tensor(g, "padded scores tensor", 0, CUDNN_DATA_FLOAT, s_dims, s_strides, 1, 0, &masked));
    TRY(cudnn_graph_pointwise(g, "padding BINARY_SELECT", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, *s1,
                              neg_inf, keep, masked));
    *s1 = masked;
    return 0;
}

/* Every tensor and operation of p's graph into g (no handle needed). stats_real: the stats
 * output is a real FLOAT [b,h,sq,1] tensor (uid SDPA_UID_STATS) instead of a virtual one. */
static int sdpa_build_ops(cudnn_graph *g, const attn_problem *p, int stats_real)
{
    const int64_t b = p->batch, h = p->heads, sq = p->seq_q, skv = p->seq_kv;
    const int64_t d = p->head_dim, dv = attn_dv(p);
    const int serving = cudnn_serving(p), bottom_right = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    const cudnnDataType_t io = sdpa_io_type(p->dtype);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;
    /* Q and O: BHSD, or token-major (THD) with ragged offsets in a ragged batch. */
    const int64_t q_dims[4] = {b, h, sq, d}, o_dims[4] = {b, h, sq, dv};
    const int64_t q_strides[4] = {h * sq * d, p->ragged ? d : sq * d, p->ragged ? h * d : d, 1};
    const int64_t o_strides[4] = {h * sq * dv, p->ragged ? dv : sq * dv, p->ragged ? h * dv : dv, 1};
    const int64_t s_dims[4] = {b, h, sq, skv}, s_strides[4] = {h * sq * skv, sq * skv, skv, 1};
    const int64_t r_dims[4] = {b, h, sq, 1}, r_strides[4] = {h * sq, sq, 1, 1};
    cudnnBackendDescriptor_t q, kt, v, o, s, scale, s1, m, sub, e, z, lg, stats, pr, neg_inf = NULL;
    sdpa_seq_tensors st;

    g->next_uid = SDPA_UID_VIRTUAL;
    TRY(sdpa_seq_inputs(g, p, &st));
    TRY(cudnn_graph_tensor_ragged(g, "Q tensor", SDPA_UID_Q, io, q_dims, q_strides, 0, 0, st.off_q, &q));
    TRY(cudnn_graph_tensor_ragged(g, "O tensor", SDPA_UID_O, io, o_dims, o_strides, 0, 0, st.off_o, &o));
    TRY(sdpa_kv_input(g, p, &st, 1, &kt));

    TRY(cudnn_graph_tensor(g, "scores tensor", 0, f32, s_dims, s_strides, 1, 0, &s));
    TRY(cudnn_graph_matmul(g, "bmm1 Q*K^T", q, kt, s, st.len_q, st.len_kv, NULL));

    TRY(cudnn_graph_scalar(g, "scale scalar", SDPA_UID_SCALE, f32, &scale));
    TRY(cudnn_graph_tensor(g, "scaled scores tensor", 0, f32, s_dims, s_strides, 1, 0, &s1));
    TRY(cudnn_graph_pointwise(g, "attn_scale MUL", CUDNN_POINTWISE_MUL, f32, -1, s, scale, NULL, s1));

    if (serving || p->mask != ATTN_MASK_NONE || p->window_keys > 0)
        TRY(cudnn_graph_scalar(g, "-inf scalar", SDPA_UID_NEG_INF, f32, &neg_inf));
    if (serving) TRY(sdpa_padding_mask(g, p, &st, neg_inf, &s1));

    if (p->mask != ATTN_MASK_NONE) {
        /* Keep (row, col) when row ≥ col, with row shifted by skv − sq for bottom-right (each
         * sequence's lengths in a serving batch): the shape of cudnn-frontend's diagonal band
         * mask with right bound 0, which cuDNN's SDPA fusion recognises. */
        cudnnBackendDescriptor_t row, col, keep, masked;
        TRY(cudnn_graph_tensor(g, "row index tensor", 0, i32, s_dims, s_strides, 1, 0, &row));
        TRY(cudnn_graph_pointwise(g, "gen_row_index", CUDNN_POINTWISE_GEN_INDEX, f32, 2, s1, NULL, NULL, row));
        TRY(cudnn_graph_tensor(g, "col index tensor", 0, i32, s_dims, s_strides, 1, 0, &col));
        TRY(cudnn_graph_pointwise(g, "gen_col_index", CUDNN_POINTWISE_GEN_INDEX, f32, 3, s1, NULL, NULL, col));
        if (bottom_right) {
            cudnnBackendDescriptor_t skv_t = st.len_kv, sq_t = st.len_q, row_skv, row_shift;
            if (!serving) TRY(cudnn_graph_scalar(g, "seq_kv scalar", SDPA_UID_SEQ_KV, i32, &skv_t));
            TRY(cudnn_graph_tensor(g, "row+skv tensor", 0, i32, s_dims, s_strides, 1, 0, &row_skv));
            TRY(cudnn_graph_pointwise(g, "row+skv ADD", CUDNN_POINTWISE_ADD, i32, -1, row, skv_t, NULL, row_skv));
            if (!serving) TRY(cudnn_graph_scalar(g, "seq_q scalar", SDPA_UID_SEQ_Q, i32, &sq_t));
            TRY(cudnn_graph_tensor(g, "row+skv-sq tensor", 0, i32, s_dims, s_strides, 1, 0, &row_shift));
            TRY(cudnn_graph_pointwise(g, "row+skv-sq SUB", CUDNN_POINTWISE_SUB, i32, -1, row_skv, sq_t, NULL,
                                      row_shift));
            row = row_shift;
        }
        TRY(cudnn_graph_tensor(g, "causal keep tensor", 0, boolean, s_dims, s_strides, 1, 0, &keep));
        TRY(cudnn_graph_pointwise(g, "row>=col CMP_GE", CUDNN_POINTWISE_CMP_GE, boolean, -1, row, col, NULL, keep));
        TRY(cudnn_graph_tensor(g, "masked scores tensor", 0, f32, s_dims, s_strides, 1, 0, &masked));
        TRY(cudnn_graph_pointwise(g, "causal BINARY_SELECT", CUDNN_POINTWISE_BINARY_SELECT, f32, -1, s1, neg_inf, keep,
                           masked));
        s1 = masked;
    }

    if (p->window_keys > 0) {
        /* Keep (row, col) when col + L > row: cudnn-frontend's left-bound diagonal band node,
         * with index tensors of its own (generated from the causally masked scores). L is a
         * FLOAT by-value scalar, so col + L is FLOAT (exact while skv ≤ 2^24, which
         * variant_check_cudnn demands) — except bottom-right in a serving batch, where the
         * frontend's general form shifts by each sequence's lengths in INT32: col + W −
         * seq_len_kv + seq_len_q. The −inf scalar is shared with the other selects. */
        const int per_seq = serving && bottom_right;
        cudnnBackendDescriptor_t row, col, lb, col_lb, keep, masked;
        TRY(cudnn_graph_tensor(g, "window row index tensor", 0, i32, s_dims, s_strides, 1, 0, &row));
        TRY(cudnn_graph_pointwise(g, "window gen_row_index", CUDNN_POINTWISE_GEN_INDEX, f32, 2, s1, NULL, NULL, row));
        TRY(cudnn_graph_tensor(g, "window col index tensor", 0, i32, s_dims, s_strides, 1, 0, &col));
        TRY(cudnn_graph_pointwise(g, "window gen_col_index", CUDNN_POINTWISE_GEN_INDEX, f32, 3, s1, NULL, NULL, col));
        if (per_seq) {
            cudnnBackendDescriptor_t col_skv, col_sq;
            TRY(cudnn_graph_scalar(g, "left bound scalar", SDPA_UID_LEFT_BOUND_KEYS, i32, &lb));
            TRY(cudnn_graph_tensor(g, "col+left bound tensor", 0, i32, s_dims, s_strides, 1, 0, &col_lb));
            TRY(cudnn_graph_pointwise(g, "col+left bound ADD", CUDNN_POINTWISE_ADD, i32, -1, col, lb, NULL, col_lb));
            TRY(cudnn_graph_tensor(g, "col+L-skv tensor", 0, i32, s_dims, s_strides, 1, 0, &col_skv));
            TRY(cudnn_graph_pointwise(g, "col+L-skv SUB", CUDNN_POINTWISE_SUB, i32, -1, col_lb, st.len_kv, NULL,
                                      col_skv));
            TRY(cudnn_graph_tensor(g, "col+L-skv+sq tensor", 0, i32, s_dims, s_strides, 1, 0, &col_sq));
            TRY(cudnn_graph_pointwise(g, "col+L-skv+sq ADD", CUDNN_POINTWISE_ADD, i32, -1, col_skv, st.len_q, NULL,
                                      col_sq));
            col_lb = col_sq;
        } else {
            TRY(cudnn_graph_scalar(g, "left bound scalar", SDPA_UID_LEFT_BOUND, f32, &lb));
            TRY(cudnn_graph_tensor(g, "col+left bound tensor", 0, f32, s_dims, s_strides, 1, 0, &col_lb));
            TRY(cudnn_graph_pointwise(g, "col+left bound ADD", CUDNN_POINTWISE_ADD, f32, -1, col, lb, NULL, col_lb));
        }
        TRY(cudnn_graph_tensor(g, "window keep tensor", 0, boolean, s_dims, s_strides, 1, 0, &keep));
        TRY(cudnn_graph_pointwise(g, "col+L>row CMP_GT", CUDNN_POINTWISE_CMP_GT, boolean, -1, col_lb, row, NULL, keep));
        TRY(cudnn_graph_tensor(g, "window masked scores tensor", 0, f32, s_dims, s_strides, 1, 0, &masked));
        TRY(cudnn_graph_pointwise(g, "window BINARY_SELECT", CUDNN_POINTWISE_BINARY_SELECT, f32, -1, s1, neg_inf, keep,
                           masked));
        s1 = masked;
    }

    TRY(cudnn_graph_tensor(g, "row max tensor", 0, f32, r_dims, r_strides, 1, 0, &m));
    TRY(cudnn_graph_reduction(g, "softmax MAX", CUDNN_REDUCE_TENSOR_MAX, s1, m));
    TRY(cudnn_graph_tensor(g, "scores-max tensor", 0, f32, s_dims, s_strides, 1, 0, &sub));
    TRY(cudnn_graph_pointwise(g, "softmax SUB", CUDNN_POINTWISE_SUB, f32, -1, s1, m, NULL, sub));
    TRY(cudnn_graph_tensor(g, "exp tensor", 0, f32, s_dims, s_strides, 1, 0, &e));
    TRY(cudnn_graph_pointwise(g, "softmax EXP", CUDNN_POINTWISE_EXP, f32, -1, sub, NULL, NULL, e));
    TRY(cudnn_graph_tensor(g, "row sum tensor", 0, f32, r_dims, r_strides, 1, 0, &z));
    TRY(cudnn_graph_reduction(g, "softmax ADD reduction", CUDNN_REDUCE_TENSOR_ADD, e, z));
    TRY(cudnn_graph_tensor(g, "log sum tensor", 0, f32, r_dims, r_strides, 1, 0, &lg));
    TRY(cudnn_graph_pointwise(g, "stats LOG", CUDNN_POINTWISE_LOG, f32, -1, z, NULL, NULL, lg));
    TRY(cudnn_graph_tensor(g, "stats tensor", stats_real ? SDPA_UID_STATS : 0, f32, r_dims, r_strides, !stats_real, 0,
                    &stats));
    TRY(cudnn_graph_pointwise(g, "stats ADD", CUDNN_POINTWISE_ADD, f32, -1, m, lg, NULL, stats));
    TRY(cudnn_graph_tensor(g, "P tensor", 0, io, s_dims, s_strides, 1, 0, &pr));
    TRY(cudnn_graph_pointwise(g, "softmax DIV", CUDNN_POINTWISE_DIV, f32, -1, e, z, NULL, pr));

    TRY(sdpa_kv_input(g, p, &st, 0, &v));
    TRY(cudnn_graph_matmul(g, "bmm2 P*V", pr, v, o, st.len_q, NULL, st.len_kv));
    return 0;
}

/* ---- plans ----------------------------------------------------------------------------- */

typedef struct sdpa_plan {
    cudnn_sdpa_key key;
    cudnn_graph_descs descs;               /* everything the plan was built from, plan included */
    cudnnBackendDescriptor_t plan;  /* in descs */
    cudnnBackendDescriptor_t pack;  /* variant pack, NOT in descs: rebuilt when inputs change */
    cudnnHandle_t handle;           /* the device's handle the plan was built with */
    int stats_real;
    size_t plan_ws_bytes;           /* CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE */
    size_t stats_offset;            /* where the real stats go in the workspace */
    size_t meta_offset;             /* where a serving batch's per-sequence arrays go */
    size_t meta[CUDNN_META_ARRAYS]; /* each array's offset from meta_offset (cudnn_meta_layout) */
    size_t ws_total;                /* what the forward needs: plan ws (+ stats) (+ arrays) */
    size_t ws_granted;              /* what cudnn_sdpa_workspace_bytes reported; 0: unknown */
    /* By-value inputs: the variant pack points here, so these addresses must stay put (the
     * entry is heap-allocated and never moves). */
    float scale_value, neg_inf_value, left_bound_value;
    int32_t seq_kv_value, seq_q_value, left_bound_keys;
    /* What the current pack was built for. */
    const void *pack_q, *pack_k, *pack_v, *pack_table;
    void *pack_o, *pack_ws;
    double pack_scale;
    char engine_desc[256];
} sdpa_plan;

static pthread_mutex_t sdpa_lock = PTHREAD_MUTEX_INITIALIZER;
static cudnn_sdpa_lru sdpa_lru;
static sdpa_plan *sdpa_plans[CUDNN_SDPA_CACHE_ENTRIES];
static cudnnHandle_t sdpa_handles[SDPA_MAX_DEVICES];
static cudaStream_t sdpa_handle_stream[SDPA_MAX_DEVICES]; /* the stream last bound */
static int sdpa_handle_stream_set[SDPA_MAX_DEVICES];

static void sdpa_plan_free(const cudnn_api *api, sdpa_plan *pl)
{
    if (!pl) return;
    if (pl->pack) (void)api->BackendDestroyDescriptor(pl->pack);
    cudnn_graph_descs_destroy(api, &pl->descs);
    free(pl);
}

static size_t sdpa_align_up(size_t n) { return (n + SDPA_ALIGN - 1) / SDPA_ALIGN * SDPA_ALIGN; }

/* One float per query row of every query head: the stats follow Q and O ([b,h,sq,1]), not
 * the grouped K/V heads. */
static size_t sdpa_stats_bytes(const attn_problem *p)
{
    return (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q * sizeof(float);
}

/* What workspace_bytes answers when no plan could be built: the front's bound for the
 * variant (common/variant_info.c), the same formula as sdpa_stats_bytes plus 16 MiB. */
static size_t sdpa_workspace_bound(const attn_problem *p) { return variant_info_cudnn.workspace_bound(p); }

/* The cuDNN handle of `device` (the current CUDA device), created on first use. */
static int sdpa_handle(exec_context *ctx, const cudnn_api *api, int device, cudnnHandle_t *out)
{
    if (device < 0 || device >= SDPA_MAX_DEVICES)
        return exec_fail(ctx, __FILE__, __LINE__, "sdpa_handle", "CUDA device ordinal out of range");
    if (!sdpa_handles[device]) {
        CUDNN_TRY(ctx, api->Create(&sdpa_handles[device]));
        sdpa_handle_stream_set[device] = 0;
    }
    *out = sdpa_handles[device];
    return 0;
}

static const char *sdpa_knob_name(int type)
{
    switch (type) {
    case CUDNN_KNOB_TYPE_SWIZZLE: return "SWIZZLE";
    case CUDNN_KNOB_TYPE_TILE_SIZE: return "TILE_SIZE";
    case CUDNN_KNOB_TYPE_EDGE: return "EDGE";
    case CUDNN_KNOB_TYPE_MULTIPLY: return "MULTIPLY";
    case CUDNN_KNOB_TYPE_SPLIT_K_BUF: return "SPLIT_K_BUF";
    case CUDNN_KNOB_TYPE_TILEK: return "TILEK";
    case CUDNN_KNOB_TYPE_STAGES: return "STAGES";
    case CUDNN_KNOB_TYPE_REDUCTION_MODE: return "REDUCTION_MODE";
    case CUDNN_KNOB_TYPE_SPLIT_K_SLC: return "SPLIT_K_SLC";
    case CUDNN_KNOB_TYPE_IDX_MODE: return "IDX_MODE";
    case CUDNN_KNOB_TYPE_SPECFILT: return "SPECFILT";
    case CUDNN_KNOB_TYPE_KERNEL_CFG: return "KERNEL_CFG";
    case CUDNN_KNOB_TYPE_WORKSPACE: return "WORKSPACE";
    case CUDNN_KNOB_TYPE_TILE_CGA_M: return "TILE_CGA_M";
    case CUDNN_KNOB_TYPE_TILE_CGA_N: return "TILE_CGA_N";
    case CUDNN_KNOB_TYPE_BLOCK_SIZE: return "BLOCK_SIZE";
    case CUDNN_KNOB_TYPE_OCCUPANCY: return "OCCUPANCY";
    case CUDNN_KNOB_TYPE_ARRAY_SIZE_PER_THREAD: return "ARRAY_SIZE_PER_THREAD";
    case CUDNN_KNOB_TYPE_SPLIT_COLS: return "SPLIT_COLS";
    case CUDNN_KNOB_TYPE_TILE_ROWS: return "TILE_ROWS";
    case CUDNN_KNOB_TYPE_TILE_COLS: return "TILE_COLS";
    case CUDNN_KNOB_TYPE_LOAD_SIZE: return "LOAD_SIZE";
    case CUDNN_KNOB_TYPE_CTA_COUNT: return "CTA_COUNT";
    case CUDNN_KNOB_TYPE_STREAM_K: return "STREAM_K";
    case CUDNN_KNOB_TYPE_SPLIT_P_SLC: return "SPLIT_P_SLC";
    case CUDNN_KNOB_TYPE_TILE_M: return "TILE_M";
    case CUDNN_KNOB_TYPE_TILE_N: return "TILE_N";
    case CUDNN_KNOB_TYPE_WARP_SPEC_CFG: return "WARP_SPEC_CFG";
    case CUDNN_KNOB_TYPE_SWAP_AB: return "SWAP_AB";
    default: return NULL;
    }
}

/* "engine 8 (knobs KERNEL_CFG=7)" from an engine config. Best effort: a query cuDNN refuses
 * shows as "?" and never fails the plan, since the plan itself is good. Temporary
 * descriptors are destroyed here. */
static void sdpa_describe_engine(const cudnn_api *api, cudnnBackendDescriptor_t cfg, char *buf, size_t len)
{
    cudnnBackendDescriptor_t engine = NULL, knobs[CUDNN_KNOB_TYPE_COUNTS];
    int64_t n = 0, id = -1, n_knobs = 0, i;
    size_t used;
    int made = 0;

    snprintf(buf, len, "engine ?");
    if (api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) == CUDNN_STATUS_SUCCESS) {
        if (api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                     &engine) == CUDNN_STATUS_SUCCESS &&
            api->BackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &id) ==
                CUDNN_STATUS_SUCCESS)
            snprintf(buf, len, "engine %lld", (long long)id);
        (void)api->BackendDestroyDescriptor(engine);
    }
    used = strlen(buf);

    for (made = 0; made < CUDNN_KNOB_TYPE_COUNTS; made++)
        if (api->BackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[made]) != CUDNN_STATUS_SUCCESS)
            break;
    if (made == CUDNN_KNOB_TYPE_COUNTS &&
        api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 CUDNN_KNOB_TYPE_COUNTS, &n_knobs, knobs) == CUDNN_STATUS_SUCCESS) {
        if (n_knobs > CUDNN_KNOB_TYPE_COUNTS) n_knobs = CUDNN_KNOB_TYPE_COUNTS;
        for (i = 0; i < n_knobs && used + 1 < len; i++) {
            cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
            int64_t value = 0;
            const char *name;
            int w;
            if (api->BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n,
                                         &type) != CUDNN_STATUS_SUCCESS ||
                api->BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n,
                                         &value) != CUDNN_STATUS_SUCCESS)
                continue;
            name = sdpa_knob_name((int)type);
            if (name)
                w = snprintf(buf + used, len - used, "%s%s=%lld", i == 0 ? " (knobs " : " ", name, (long long)value);
            else
                w = snprintf(buf + used, len - used, "%sknob%d=%lld", i == 0 ? " (knobs " : " ", (int)type,
                             (long long)value);
            if (w < 0 || (size_t)w >= len - used) {
                used = len - 1;
                break;
            }
            used += (size_t)w;
        }
        if (n_knobs > 0 && used + 2 < len) {
            buf[used++] = ')';
            buf[used] = '\0';
        }
    }
    while (made > 0) (void)api->BackendDestroyDescriptor(knobs[--made]);
}

/* Build p's graph (stats virtual or real) into pl, choose an engine and finalize the plan.
 * On failure everything created is destroyed, ctx->error says why and *refused is 1 when
 * that was cuDNN declining the graph (a NOT_SUPPORTED status, or no engine config that
 * finalizes) rather than a failure of the call itself. */
static int sdpa_plan_try(exec_context *ctx, const cudnn_api *api, cudnnHandle_t handle, const attn_problem *p,
                         int stats_real, sdpa_plan *pl, int *refused)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const char *const mode_names[2] = {"A", "FALLBACK"};
    cudnn_graph g;
    cudnnBackendDescriptor_t graph, cfgs[SDPA_MAX_ENGINE_CFGS];
    int64_t n_cfgs = 0, ws = 0, n = 0;
    char refusal[384] = "";
    int mi, i, chosen = -1, tried = 0;

    memset(&g, 0, sizeof g);
    g.ctx = ctx;
    g.api = api;
    g.descs = &pl->descs;
    pl->stats_real = stats_real;
    *refused = 0;

    if (sdpa_build_ops(&g, p, stats_real) != 0) goto fail;

    if (cudnn_graph_operation_graph(&g, handle, &graph) != 0) goto fail;

    for (mi = 0; mi < 2 && chosen < 0; mi++) {
        cudnnBackendDescriptor_t heur;
        cudnnBackendHeurMode_t mode = modes[mi];
        int made = 0;
        cudnnStatus_t st;

        if (cudnn_graph_create(&g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics", &heur, __FILE__,
                               __LINE__) ||
            cudnn_graph_set(&g, heur, "engine heuristics", CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                            "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
                            __FILE__, __LINE__) ||
            cudnn_graph_set(&g, heur, "engine heuristics", CUDNN_ATTR_ENGINEHEUR_MODE, "CUDNN_ATTR_ENGINEHEUR_MODE",
                            CUDNN_TYPE_HEUR_MODE, 1, &mode, __FILE__, __LINE__) ||
            cudnn_graph_finalize(&g, heur, "engine heuristics", __FILE__, __LINE__))
            goto fail;

        n_cfgs = 0;
        st = api->BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n_cfgs,
                                      NULL);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnn_fail(ctx, __FILE__, __LINE__, "cudnnBackendGetAttribute(engine heuristics, RESULTS count)", st);
            goto fail;
        }
        if (n_cfgs <= 0) {
            snprintf(refusal, sizeof refusal, "heuristics mode %s returned no engine config", mode_names[mi]);
            continue;
        }
        if (n_cfgs > SDPA_MAX_ENGINE_CFGS) n_cfgs = SDPA_MAX_ENGINE_CFGS;

        /* Engine configs live outside g.descs until one is chosen: the rest are destroyed. */
        for (made = 0; made < n_cfgs; made++) {
            st = api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]);
            if (st != CUDNN_STATUS_SUCCESS) {
                cudnn_fail(ctx, __FILE__, __LINE__, "cudnnBackendCreateDescriptor(engine config)", st);
                while (made > 0) (void)api->BackendDestroyDescriptor(cfgs[--made]);
                goto fail;
            }
        }
        st = api->BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_cfgs,
                                      &n, cfgs);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnn_fail(ctx, __FILE__, __LINE__, "cudnnBackendGetAttribute(engine heuristics, RESULTS)", st);
            while (made > 0) (void)api->BackendDestroyDescriptor(cfgs[--made]);
            goto fail;
        }
        if (n < n_cfgs) n_cfgs = n;

        /* The first config whose plan finalizes: heuristics order them best first. */
        for (i = 0; i < n_cfgs && chosen < 0; i++) {
            cudnnBackendDescriptor_t plan = NULL;
            tried++;
            st = api->BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (st == CUDNN_STATUS_SUCCESS)
                st = api->BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            if (st == CUDNN_STATUS_SUCCESS)
                st = api->BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (st == CUDNN_STATUS_SUCCESS) st = api->BackendFinalize(plan);
            if (st == CUDNN_STATUS_SUCCESS && pl->descs.n + 2 <= CUDNN_GRAPH_MAX_DESCS) {
                char engine[192];
                sdpa_describe_engine(api, cfgs[i], engine, sizeof engine);
                pl->descs.d[pl->descs.n++] = cfgs[i];
                pl->descs.d[pl->descs.n++] = plan;
                cfgs[i] = NULL;
                pl->plan = plan;
                chosen = i;
                snprintf(pl->engine_desc, sizeof pl->engine_desc, "%s, heuristics mode %s choice %d of %lld", engine,
                         mode_names[mi], i + 1, (long long)n_cfgs);
            } else {
                cudnn_format_error(refusal, sizeof refusal, "cudnnBackendFinalize(execution plan)", st);
                if (plan) (void)api->BackendDestroyDescriptor(plan);
            }
        }
        for (i = 0; i < n_cfgs; i++)
            if (cfgs[i]) (void)api->BackendDestroyDescriptor(cfgs[i]);
    }
    if (chosen < 0) {
        char why[480];
        snprintf(why, sizeof why, "no cuDNN engine runs this graph (%d configs tried); last: %s", tried,
                 refusal[0] ? refusal : "none");
        exec_fail(ctx, __FILE__, __LINE__, "cuDNN SDPA engine selection", why);
        *refused = 1;
        goto fail;
    }

    {
        cudnnStatus_t st = api->BackendGetAttribute(pl->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, &n, &ws);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnn_fail(ctx, __FILE__, __LINE__, "cudnnBackendGetAttribute(execution plan, WORKSPACE_SIZE)", st);
            goto fail;
        }
        if (ws < 0) {
            exec_fail(ctx, __FILE__, __LINE__, "cuDNN SDPA workspace", "cuDNN reported a negative workspace size");
            goto fail;
        }
    }
    pl->plan_ws_bytes = (size_t)ws;
    pl->stats_offset = sdpa_align_up(pl->plan_ws_bytes);
    pl->ws_total = stats_real ? pl->stats_offset + sdpa_stats_bytes(p) : pl->plan_ws_bytes;
    if (cudnn_serving(p)) {
        pl->meta_offset = sdpa_align_up(pl->ws_total);
        pl->ws_total = pl->meta_offset + cudnn_meta_layout(p, pl->meta);
    }
    pl->handle = handle;
    {
        size_t used = strlen(pl->engine_desc);
        char ver[32];
        cudnn_version_string(ver, sizeof ver);
        snprintf(pl->engine_desc + used, sizeof pl->engine_desc - used, ", workspace %zu B%s, cuDNN %s",
                 pl->plan_ws_bytes, stats_real ? " + stats buffer" : "", ver);
    }
    return 0;

fail:
    if (CUDNN_STATUS_CATEGORY(g.status) == CUDNN_STATUS_NOT_SUPPORTED) *refused = 1;
    cudnn_graph_descs_destroy(api, &pl->descs);
    pl->plan = NULL;
    return -1;
}

/* Append src to the string in dst (capacity cap), truncating. */
static void sdpa_append(char *dst, size_t cap, const char *src)
{
    size_t used = strlen(dst);
    while (*src && used + 1 < cap) dst[used++] = *src++;
    dst[used] = '\0';
}

/* "bf16 causal batch 2 heads 8 kv_heads 1 seq_q 77 seq_kv 300 head_dim 192 head_dim_v 128
 * window_keys 7 ragged page_size 16 num_pages 40": the problem a refusal names, in the API's
 * words (seq_q and seq_kv are the bounds of a ragged batch). */
static void sdpa_problem_desc(const attn_problem *p, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s %s batch %lld heads %lld kv_heads %lld seq_q %lld seq_kv %lld head_dim %lld "
                     "head_dim_v %lld window_keys %lld", attn_dtype_name(p->dtype), attn_mask_name(p->mask),
                     (long long)p->batch, (long long)p->heads, (long long)attn_kv_heads(p), (long long)p->seq_q,
                     (long long)p->seq_kv, (long long)p->head_dim, (long long)attn_dv(p),
                     (long long)(p->window_keys > 0 ? p->window_keys : 0));
    if (n < 0 || (size_t)n >= len) return;
    if (p->ragged) n += snprintf(buf + n, len - (size_t)n, " ragged");
    if (p->page_size > 0 && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " page_size %lld num_pages %lld", (long long)p->page_size,
                 (long long)p->num_pages);
}

/* A new plan entry for p: the frontend-shaped graph (virtual stats) first; if cuDNN refuses
 * it, once more with a real stats output, which is the training graph cuDNN always knows.
 * NULL with ctx->error set when both fail; *refused is 1 when both were cuDNN declining the
 * graph, and the error then opens with "cuDNN 9.19.0 has no engine for <problem>: ". */
static sdpa_plan *sdpa_plan_build(exec_context *ctx, const cudnn_api *api, cudnnHandle_t handle,
                                  const attn_problem *p, const cudnn_sdpa_key *key, int *refused)
{
    exec_context first, second;
    int refused_first = 0, refused_second = 0;
    sdpa_plan *pl = calloc(1, sizeof *pl);
    *refused = 0;
    if (!pl) {
        exec_fail(ctx, __FILE__, __LINE__, "calloc(sdpa_plan)", "out of host memory");
        return NULL;
    }
    pl->key = *key;
    memset(&first, 0, sizeof first);
    memset(&second, 0, sizeof second);
    if (sdpa_plan_try(&first, api, handle, p, 0, pl, &refused_first) == 0) return pl;
    if (sdpa_plan_try(&second, api, handle, p, 1, pl, &refused_second) == 0) return pl;
    *refused = refused_first && refused_second;
    /* first.error already reads "call failed at file:line: reason"; keep it whole (the
     * frontend-shaped graph is the one expected to work) and append the second attempt. */
    if (ctx->error[0] == '\0') {
        if (*refused) {
            char ver[32], desc[200], head[280];
            cudnn_version_string(ver, sizeof ver);
            sdpa_problem_desc(p, desc, sizeof desc);
            snprintf(head, sizeof head, "cuDNN %s has no engine for %s: ", ver, desc);
            sdpa_append(ctx->error, sizeof ctx->error, head);
        }
        sdpa_append(ctx->error, sizeof ctx->error, first.error);
        sdpa_append(ctx->error, sizeof ctx->error, " [with a real stats tensor too: ");
        sdpa_append(ctx->error, sizeof ctx->error, second.error);
        sdpa_append(ctx->error, sizeof ctx->error, "]");
    }
    free(pl);
    return NULL;
}

/* The cached plan for p on `device`, built when absent; NULL with ctx->error set, and
 * *refused (may be NULL) saying whether cuDNN declined p. Caller holds sdpa_lock. */
static sdpa_plan *sdpa_plan_get(exec_context *ctx, const cudnn_api *api, const attn_problem *p, int device,
                                int *refused)
{
    cudnn_sdpa_key key;
    cudnnHandle_t handle;
    sdpa_plan *pl;
    int i, evicted, declined = 0;

    if (refused) *refused = 0;
    cudnn_sdpa_key_make(p, device, &key);
    i = cudnn_sdpa_lru_find(&sdpa_lru, &key);
    if (i >= 0 && sdpa_plans[i]) return sdpa_plans[i];
    if (sdpa_handle(ctx, api, device, &handle) != 0) return NULL;
    pl = sdpa_plan_build(ctx, api, handle, p, &key, &declined);
    if (refused) *refused = declined;
    if (!pl) return NULL;
    {
        /* Planning is when cuDNN opens its engine libraries: with cudnn_library set, they
         * must come from that directory too, or the numbers are another release's. */
        char why[1024];
        if (cudnn_check_loaded(why, sizeof why) != 0) {
            sdpa_plan_free(api, pl);
            exec_fail(ctx, __FILE__, __LINE__, "cudnn_check_loaded", why);
            return NULL;
        }
    }
    pl->scale_value = (float)p->scale;
    /* Older cuDNN prefers the lowest finite float to -inf in the mask (cudnn-frontend). */
    pl->neg_inf_value = cudnn_version() >= 91000 ? -INFINITY : -FLT_MAX;
    pl->seq_kv_value = (int32_t)p->seq_kv;
    pl->seq_q_value = (int32_t)p->seq_q;
    pl->left_bound_value = sdpa_left_bound(p);
    pl->left_bound_keys = (int32_t)p->window_keys;

    i = cudnn_sdpa_lru_slot(&sdpa_lru, &evicted);
    if (evicted || sdpa_plans[i]) sdpa_plan_free(api, sdpa_plans[i]);
    sdpa_plans[i] = pl;
    cudnn_sdpa_lru_put(&sdpa_lru, i, &key);
    return pl;
}

/* ---- the variant ----------------------------------------------------------------------- */

/* cudnn-frontend's validate_sdpa_support_surface (fp16/bf16 forward), the rules that depend
 * on the release, for the graph shapes built here (a serving batch's own are
 * cudnn_serving_check's). The
 * Hopper-only rule of 9.9 and older is applied on every GPU: refusing is safer than a plan
 * that finalizes and computes the wrong band. */
int cudnn_sdpa_version_check(const attn_problem *p, size_t version, char *why, size_t why_len)
{
    const int window = p->window_keys > 0, bottom_right = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    char ver[32];

    snprintf(ver, sizeof ver, "%zu.%zu.%zu", version / 10000, version / 100 % 100, version % 100);
    if (version == 91000 || version == 91001) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s has known fp16/bf16 SDPA forward bugs (cudnn-frontend refuses "
                 "it); use 9.10.2 or newer", ver);
        return -1;
    }
    if (bottom_right && version < 90600 && (p->seq_q % 64 != 0 || p->seq_kv % 64 != 0)) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs causal_bottom_right only with seq_q and seq_kv multiples "
                 "of 64 (9.6.0 lifts it)", ver);
        return -1;
    }
    if (p->seq_q == 1 && p->mask != ATTN_MASK_NONE && version < 91000) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs seq_q 1 only without a causal mask (9.10.0 lifts it)",
                 ver);
        return -1;
    }
    if (!window) return 0;
    if (version < 90200) {
        snprintf(why, why_len, "backend cudnn: window_keys needs cuDNN 9.2.0 or newer; loaded %s", ver);
        return -1;
    }
    if (p->mask == ATTN_MASK_NONE && version < 91002) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs window_keys only with a causal mask (9.10.2 lifts it)",
                 ver);
        return -1;
    }
    if (bottom_right && version < 90600 && p->seq_q != p->seq_kv) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs window_keys with causal_bottom_right only when seq_q == "
                 "seq_kv (9.6.0 lifts it)", ver);
        return -1;
    }
    if (bottom_right && version < 91000 && p->seq_q == p->seq_kv) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s does not run window_keys with causal_bottom_right and seq_q == "
                 "seq_kv on Hopper (9.10 lifts it)", ver);
        return -1;
    }
    if (p->mask == ATTN_MASK_NONE && version == 91400 && p->seq_kv > 1024) {
        snprintf(why, why_len, "backend cudnn: cuDNN 9.14.0 has a known bug with window_keys, no causal mask and "
                 "seq_kv > 1024 (cudnn-frontend refuses it); use 9.14.1 or newer");
        return -1;
    }
    return 0;
}

int cudnn_sdpa_check(const attn_problem *p, char *why, size_t why_len)
{
    static const char prefix[] = "cuDNN is not available: ";
    if (why_len > sizeof prefix && cudnn_load(why + sizeof prefix - 1, why_len - sizeof prefix + 1) != 0) {
        memcpy(why, prefix, sizeof prefix - 1);
        return -1;
    }
    if (variant_check_cudnn(p, why, why_len) != 0) return -1;
    if (cudnn_sdpa_version_check(p, cudnn_version(), why, why_len) != 0) return -1;
    return cudnn_serving_check(p, cudnn_version(), 0, why, why_len);
}

/* Compute capability of `device`; 0 when unknown. */
static int sdpa_device_cc(int device)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

int cudnn_sdpa_plan_check(const attn_problem *p, char *why, size_t why_len)
{
    exec_context scratch;
    const cudnn_api *api;
    sdpa_plan *pl;
    int device = -1, refused = 0;

    if (cudnn_load(why, why_len) != 0) return -1; /* the variant is unavailable, not the problem */
    if (cudnn_sdpa_check(p, why, why_len) != 0) return 1;
    api = cudnn_api_get();
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_len, "cudnn_sdpa_plan_check needs a CUDA device");
        return -1;
    }
    if (cudnn_serving_check(p, cudnn_version(), sdpa_device_cc(device), why, why_len) != 0) return 1;
    memset(&scratch, 0, sizeof scratch);
    pthread_mutex_lock(&sdpa_lock);
    pl = sdpa_plan_get(&scratch, api, p, device, &refused);
    pthread_mutex_unlock(&sdpa_lock);
    if (pl) return 0;
    snprintf(why, why_len, "%s", scratch.error);
    return refused ? 1 : -1;
}

size_t cudnn_sdpa_workspace_bytes(const attn_problem *p)
{
    exec_context scratch;
    const cudnn_api *api;
    sdpa_plan *pl;
    int device = -1;
    size_t bytes;
    char why[256];

    if (cudnn_sdpa_check(p, why, sizeof why) != 0) return 0; /* forward refuses it anyway */
    api = cudnn_api_get();
    if (!api || cudaGetDevice(&device) != cudaSuccess) return sdpa_workspace_bound(p);

    memset(&scratch, 0, sizeof scratch);
    pthread_mutex_lock(&sdpa_lock);
    pl = sdpa_plan_get(&scratch, api, p, device, NULL);
    if (pl) {
        pl->ws_granted = pl->ws_total;
        bytes = pl->ws_total;
    } else {
        bytes = sdpa_workspace_bound(p); /* forward rebuilds and reports the real error */
    }
    pthread_mutex_unlock(&sdpa_lock);
    return bytes;
}

/* A variant pack for t, the workspace and the current scale; the old one is destroyed.
 * Caller holds sdpa_lock. */
static int sdpa_pack(exec_context *ctx, const cudnn_api *api, sdpa_plan *pl, const attn_problem *p,
                     const attn_tensors *t, void *workspace)
{
    int64_t uids[24];
    void *ptrs[24];
    char *meta = (char *)workspace + pl->meta_offset;
    const int serving = cudnn_serving(p), paged = p->page_size > 0;
    const int bottom_right = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    int64_t n = 0;
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t st;
    const char *call = NULL;

    if (pl->pack) {
        (void)api->BackendDestroyDescriptor(pl->pack);
        pl->pack = NULL;
    }
    pl->scale_value = (float)p->scale;
    uids[n] = SDPA_UID_Q, ptrs[n++] = (void *)t->q;
    uids[n] = SDPA_UID_K, ptrs[n++] = (void *)t->k;
    uids[n] = SDPA_UID_V, ptrs[n++] = (void *)t->v;
    uids[n] = SDPA_UID_O, ptrs[n++] = t->out;
    uids[n] = SDPA_UID_SCALE, ptrs[n++] = &pl->scale_value;
    if (serving || p->mask != ATTN_MASK_NONE || p->window_keys > 0)
        uids[n] = SDPA_UID_NEG_INF, ptrs[n++] = &pl->neg_inf_value;
    if (p->window_keys > 0 && serving && bottom_right)
        uids[n] = SDPA_UID_LEFT_BOUND_KEYS, ptrs[n++] = &pl->left_bound_keys;
    else if (p->window_keys > 0)
        uids[n] = SDPA_UID_LEFT_BOUND, ptrs[n++] = &pl->left_bound_value;
    if (bottom_right && !serving) {
        uids[n] = SDPA_UID_SEQ_KV, ptrs[n++] = &pl->seq_kv_value;
        uids[n] = SDPA_UID_SEQ_Q, ptrs[n++] = &pl->seq_q_value;
    }
    if (pl->stats_real) uids[n] = SDPA_UID_STATS, ptrs[n++] = (char *)workspace + pl->stats_offset;
    if (serving) { /* the arrays cudnn_serving_meta_fill writes before every execute */
        uids[n] = SDPA_UID_SEQ_LEN_Q, ptrs[n++] = meta + pl->meta[CUDNN_META_SEQ_LEN_Q];
        uids[n] = SDPA_UID_SEQ_LEN_KV, ptrs[n++] = meta + pl->meta[CUDNN_META_SEQ_LEN_KV];
    }
    if (p->ragged) {
        uids[n] = SDPA_UID_OFFSET_Q, ptrs[n++] = meta + pl->meta[CUDNN_META_OFFSET_Q];
        uids[n] = SDPA_UID_OFFSET_O, ptrs[n++] = meta + pl->meta[CUDNN_META_OFFSET_O];
        if (!paged) {
            uids[n] = SDPA_UID_OFFSET_K, ptrs[n++] = meta + pl->meta[CUDNN_META_OFFSET_K];
            uids[n] = SDPA_UID_OFFSET_V, ptrs[n++] = meta + pl->meta[CUDNN_META_OFFSET_V];
        }
    }
    if (paged) {
        uids[n] = SDPA_UID_PAGE_TABLE_K, ptrs[n++] = (void *)t->block_table;
        uids[n] = SDPA_UID_PAGE_TABLE_V, ptrs[n++] = (void *)t->block_table;
    }

    st = api->BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (st != CUDNN_STATUS_SUCCESS)
        return cudnn_fail(ctx, __FILE__, __LINE__, "cudnnBackendCreateDescriptor(variant pack)", st);
    call = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)";
    st = api->BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)";
        st = api->BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)";
        st = api->BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendFinalize(variant pack)";
        st = api->BackendFinalize(pack);
    }
    if (st != CUDNN_STATUS_SUCCESS) {
        int rc = cudnn_fail(ctx, __FILE__, __LINE__, call, st);
        (void)api->BackendDestroyDescriptor(pack);
        return rc;
    }
    pl->pack = pack;
    pl->pack_q = t->q;
    pl->pack_k = t->k;
    pl->pack_v = t->v;
    pl->pack_o = t->out;
    pl->pack_table = t->block_table;
    pl->pack_ws = workspace;
    pl->pack_scale = p->scale;
    return 0;
}

static int sdpa_forward_locked(exec_context *ctx, const cudnn_api *api, const attn_problem *p,
                               const attn_tensors *t, void *workspace)
{
    sdpa_plan *pl = sdpa_plan_get(ctx, api, p, ctx->device, NULL);
    size_t allowed;
    int dev = ctx->device;

    if (!pl) return -1;
    /* The caller allocated what workspace_bytes answered for this plan; if the plan was
     * built here instead (evicted meanwhile, or workspace_bytes failed), only the bound is
     * known to be there. */
    allowed = pl->ws_granted ? pl->ws_granted : sdpa_workspace_bound(p);
    if (pl->ws_total > allowed) {
        char why[200];
        snprintf(why, sizeof why, "the plan needs %zu B of workspace but at most %zu B were reserved", pl->ws_total,
                 allowed);
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_forward", why);
    }
    if (pl->ws_total > 0 && !workspace) {
        char why[200];
        snprintf(why, sizeof why, "the plan needs %zu B of workspace and none was given (call "
                 "cudnn_sdpa_workspace_bytes before allocating)", pl->ws_total);
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_forward", why);
    }

    if (!sdpa_handle_stream_set[dev] || sdpa_handle_stream[dev] != ctx->stream) {
        CUDNN_TRY(ctx, api->SetStream(pl->handle, ctx->stream));
        sdpa_handle_stream[dev] = ctx->stream;
        sdpa_handle_stream_set[dev] = 1;
    }
    if (!pl->pack || pl->pack_q != t->q || pl->pack_k != t->k || pl->pack_v != t->v || pl->pack_o != t->out ||
        pl->pack_table != t->block_table || pl->pack_ws != workspace || pl->pack_scale != p->scale)
        TRY(sdpa_pack(ctx, api, pl, p, t, workspace));
    if (cudnn_serving(p)) TRY(cudnn_serving_meta_fill(ctx, p, t, (char *)workspace + pl->meta_offset));
    CUDNN_TRY(ctx, api->BackendExecute(pl->handle, pl->plan, pl->pack));
    return 0;
}

int cudnn_sdpa_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    const cudnn_api *api;
    char why[256];
    const char *missing;
    int rc;

    if (cudnn_sdpa_check(p, why, sizeof why) != 0) return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_check", why);
    api = cudnn_api_get();
    if (!api) return exec_fail(ctx, __FILE__, __LINE__, "cudnn_load", "cuDNN is not available");
    if (ctx->device < 0 || ctx->device >= SDPA_MAX_DEVICES)
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_forward", "needs a CUDA device (ctx->device)");
    /* The tensors were declared with 16-byte alignment: a misaligned pointer would make
     * cuDNN's vector loads fault instead of failing cleanly. */
    if (((uintptr_t)t->q | (uintptr_t)t->k | (uintptr_t)t->v | (uintptr_t)t->out | (uintptr_t)t->block_table) % 16 != 0)
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_forward",
                         "q, k, v, out and the block table must be 16-byte aligned");
    if ((missing = attn_serving_arrays_missing(p, t)) != NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_sdpa_forward", missing);

    pthread_mutex_lock(&sdpa_lock);
    rc = sdpa_forward_locked(ctx, api, p, t, workspace);
    pthread_mutex_unlock(&sdpa_lock);
    return rc;
}

const char *cudnn_sdpa_engine_desc(const attn_problem *p)
{
    static _Thread_local char buf[sizeof ((sdpa_plan *)0)->engine_desc];
    cudnn_sdpa_key key;
    int device = -1, i;
    const char *out = NULL;

    if (!cudnn_api_get() || cudaGetDevice(&device) != cudaSuccess) return NULL;
    cudnn_sdpa_key_make(p, device, &key);
    pthread_mutex_lock(&sdpa_lock);
    i = cudnn_sdpa_lru_find(&sdpa_lru, &key);
    if (i >= 0 && sdpa_plans[i]) {
        snprintf(buf, sizeof buf, "%s", sdpa_plans[i]->engine_desc);
        out = buf;
    }
    pthread_mutex_unlock(&sdpa_lock);
    return out;
}

void cudnn_sdpa_release(void)
{
    const cudnn_api *api = cudnn_api_get();
    int i;
    if (!api) return;
    pthread_mutex_lock(&sdpa_lock);
    for (i = 0; i < CUDNN_SDPA_CACHE_ENTRIES; i++) {
        sdpa_plan_free(api, sdpa_plans[i]);
        sdpa_plans[i] = NULL;
    }
    memset(&sdpa_lru, 0, sizeof sdpa_lru);
    for (i = 0; i < SDPA_MAX_DEVICES; i++) {
        if (sdpa_handles[i]) (void)api->Destroy(sdpa_handles[i]); /* nothing to do on failure at shutdown */
        sdpa_handles[i] = NULL;
        sdpa_handle_stream_set[i] = 0;
    }
    pthread_mutex_unlock(&sdpa_lock);
}

/* ---- self-test ------------------------------------------------------------------------- */

int cudnn_sdpa_graph_selftest(const attn_problem *p, int stats_real, int with_graph, int *n_ops, char *err,
                              size_t err_len)
{
    exec_context scratch;
    const cudnn_api *api;
    cudnn_graph_descs descs;
    cudnn_graph g;
    char why[256];
    int rc = 0;

    if (n_ops) *n_ops = 0;
    if (cudnn_sdpa_check(p, why, sizeof why) != 0) {
        snprintf(err, err_len, "%s", why);
        return -1;
    }
    api = cudnn_api_get();
    memset(&scratch, 0, sizeof scratch);
    memset(&descs, 0, sizeof descs);
    memset(&g, 0, sizeof g);
    g.ctx = &scratch;
    g.api = api;
    g.descs = &descs;
    if (sdpa_build_ops(&g, p, stats_real) != 0) rc = -1;
    if (rc == 0 && with_graph) {
        cudnnHandle_t handle = NULL;
        cudnnBackendDescriptor_t graph;
        int device = -1;
        pthread_mutex_lock(&sdpa_lock);
        if (cudaGetDevice(&device) != cudaSuccess)
            rc = exec_fail(&scratch, __FILE__, __LINE__, "cudaGetDevice", "no CUDA device");
        else
            rc = sdpa_handle(&scratch, api, device, &handle);
        pthread_mutex_unlock(&sdpa_lock);
        if (rc == 0 && cudnn_graph_operation_graph(&g, handle, &graph) != 0) rc = -1;
    }
    if (n_ops) *n_ops = g.n_ops;
    if (rc != 0) snprintf(err, err_len, "%s", scratch.error);
    cudnn_graph_descs_destroy(api, &descs);
    return rc;
}
