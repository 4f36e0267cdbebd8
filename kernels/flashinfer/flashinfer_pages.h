/* flashinfer_pages.h — inside libattnd_flashinfer.so: the paged view of attnd's cache that both
 * decode routes hand to FlashInfer (the CUDA-core batch decode, flashinfer_decode.cu, and the
 * tensor-core one through the batch prefill, flashinfer_decode_tc.cu), so that the two read
 * the same pages. Host-built in prepare, uploaded into the workspace at the offsets of
 * attnd_fi_decode_layout; never touched by a forward.
 *
 * Three caches, one paged_kv_t each:
 *   dense [B,Hkv,Skv,D]: HND pages of ATTND_FI_DECODE_PAGE keys over the same memory, ids in
 *     rows of the [B·Hkv·Skv, D] view (page stride D, head stride Skv·D): sequence b's page j
 *     is row b·Hkv·Skv + j·page;
 *   paged [num_pages,page_size,Hkv,D] (NHD): its own pages, the block table's first ⌈len/page⌉
 *     ids of row b;
 *   ragged [total_kv,Hkv,D]: NHD pages of ATTND_FI_DECODE_PAGE keys whose ids count tokens
 *     (page stride one token): sequence b's page j is token cu_seqlens_kv[b] + j·page.
 */
#ifndef FLASHINFER_PAGES_H
#define FLASHINFER_PAGES_H

#include <flashinfer/layout.cuh>
#include <flashinfer/page.cuh>

#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"

/* FlashInfer's page table on the host: indptr (pages per sequence, prefix sums), the page ids,
 * the keys on each last page (1..page; 0 for a sequence of no keys). */
struct attnd_fi_page_table {
    std::vector<int32_t> indptr, indices, last_page_len;
};

static inline int attnd_fi_is_serving(const attnd_fi_case &c) { return c.ragged || c.page_size > 0; }

static inline attnd_fi_page_table attnd_fi_page_table_of(const attnd_fi_case &c, int64_t page)
{
    attnd_fi_page_table t;

    t.indptr.assign(1, 0);
    for (int64_t b = 0; b < c.batch; b++) {
        const int64_t len = attnd_fi_is_serving(c) ? attnd_fi_kv_seen(c, b) : c.kv_len,
                      pages = (len + page - 1) / page;
        for (int64_t j = 0; j < pages; j++) {
            int64_t id;
            if (c.page_size > 0) id = c.block_table[b * c.pages_per_seq + j];
            else if (c.ragged) id = c.cu_seqlens_kv[b] + j * page;
            else id = b * c.kv_heads * c.seq_kv + j * page;
            t.indices.push_back((int32_t)id);
        }
        t.indptr.push_back((int32_t)t.indices.size());
        t.last_page_len.push_back((int32_t)(pages ? len - (pages - 1) * page : 0));
    }
    return t;
}

/* The table into the workspace (the layout has room for pages_per_seq a sequence); waits for
 * the copies, since the host vectors die after the plan. */
static inline cudaError_t attnd_fi_upload_page_table(const attnd_fi_page_table &pt, const attnd_fi_decode_layout &l,
                                                     void *workspace, cudaStream_t s)
{
    char *ws = (char *)workspace;
    cudaError_t e = cudaMemcpyAsync(ws + l.indptr_off, pt.indptr.data(), pt.indptr.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && !pt.indices.empty())
        e = cudaMemcpyAsync(ws + l.indices_off, pt.indices.data(), pt.indices.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ws + l.last_page_len_off, pt.last_page_len.data(), pt.last_page_len.size() * 4,
                            cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return e;
}

/* paged_kv_t's strides {page, then HND's head, key or NHD's key, head}, in elements, and its
 * layout: the dense view's pages are rows of D (HND), the ragged view's tokens (NHD), a paged
 * cache's its pages (NHD). */
struct attnd_fi_page_strides {
    int64_t s[3];
    flashinfer::QKVLayout layout;
};

static inline attnd_fi_page_strides attnd_fi_page_strides_of(const attnd_fi_case &c)
{
    const int64_t d = c.head_dim, token = c.kv_heads * d;
    if (c.page_size > 0) return {{c.page_size * token, token, d}, flashinfer::QKVLayout::kNHD};
    if (c.ragged) return {{token, token, d}, flashinfer::QKVLayout::kNHD};
    return {{d, c.seq_kv * d, d}, flashinfer::QKVLayout::kHND};
}

/* The paged_kv_t both decode routes hand FlashInfer: t's K and V seen through the page table
 * uploaded at l's offsets of t's workspace. */
template <typename DType, uint32_t HEAD_DIM>
static inline flashinfer::paged_kv_t<DType, int32_t> attnd_fi_paged_kv_of(const attnd_fi_case &c,
                                                                        const attnd_fi_decode_layout &l,
                                                                        const attnd_fi_tensors &t)
{
    const attnd_fi_page_strides ps = attnd_fi_page_strides_of(c);
    char *ws = (char *)t.workspace;
    return flashinfer::paged_kv_t<DType, int32_t>(
        (uint32_t)c.kv_heads, (uint32_t)l.page, HEAD_DIM, (uint32_t)c.batch, ps.layout, (DType *)t.k, (DType *)t.v,
        ps.s, (int32_t *)(ws + l.indices_off), (int32_t *)(ws + l.indptr_off), (int32_t *)(ws + l.last_page_len_off));
}

#endif
