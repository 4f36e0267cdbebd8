/* flashinfer_module.h — inside libattnd_flashinfer.so: what its translation units share.
 *
 * nvcc on FlashInfer's templates is slow, so each route's file is compiled once per head
 * dim (-DATTND_FI_HEAD_DIM=64, 128 or 256 by the Makefile) into a launcher named after it
 * (attnd_fi_prefill_sm90_d128, …); flashinfer_module.cu picks one. A route the Makefile did
 * not compile (no sm_80 in FLASHINFER_GENCODE, say) is absent, and the module says so
 * (ATTND_FI_HAVE_SM90, ATTND_FI_HAVE_SM80: which archs were built). C++, CUDA; attnd's worker
 * never includes it.
 */
#ifndef FLASHINFER_MODULE_H
#define FLASHINFER_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/flashinfer/flashinfer_abi.h"
#include "kernels/flashinfer/flashinfer_layout.h"

/* The pointers of one forward. */
struct attnd_fi_tensors {
    const void *q, *k, *v;
    void *out;
    void *workspace;
};

/* FlashInfer's DecodePlanInfo (scheduler.cuh), as its ToVector gives it, from prepare to the
 * forwards of one job. */
struct attnd_fi_decode_plan {
    int64_t info[10];
    int64_t chunks; /* CTAs per KV head, one per (sequence, chunk): padded_batch_size */
    int split;      /* split-KV with a merge kernel */
};

/* FlashInfer's PrefillPlanSM90Info or PrefillPlanInfo (scheduler.cuh), as their ToVector
 * gives them, from prepare to the forwards of one job: the ragged routes' plan, the paged
 * prefill's (PrefillSM90Plan over pages), and the tensor-core decode's (PrefillPlan over pages). */
struct attnd_fi_ragged_plan {
    int64_t info[16];
    int64_t ctas;  /* FA2: CTAs per KV head ((query tile, chunk) pairs); Hopper: work items (tiles × heads) */
    int split;     /* FA2: split-KV with a merge kernel (never for the ragged route: its plan has it off) */
};

/* Sequence b's query rows, its keys, and the keys its rows see (top-left causal: its first
 * qo_len keys), from the case's host arrays; the bounds for a dense case. */
static inline int64_t attnd_fi_qo_len(const attnd_fi_case &c, int64_t b)
{
    return c.ragged ? (int64_t)c.cu_seqlens_q[b + 1] - c.cu_seqlens_q[b] : c.seq_q;
}
static inline int64_t attnd_fi_kv_len(const attnd_fi_case &c, int64_t b)
{
    return c.ragged ? (int64_t)c.cu_seqlens_kv[b + 1] - c.cu_seqlens_kv[b] : c.seq_kv;
}
static inline int64_t attnd_fi_kv_seen(const attnd_fi_case &c, int64_t b)
{
    const int64_t q = attnd_fi_qo_len(c, b), kv = attnd_fi_kv_len(c, b);
    return c.top_left && q < kv ? q : kv;
}

/* A page-locked host buffer of at least bytes for a plan to fill before its copy to the
 * device; kept for the process. Prepare synchronises after each plan, so it is free again
 * when the next one writes it. NULL with *e when it cannot be had. */
void *attnd_fi_pinned_buffer(size_t bytes, cudaError_t *e);

#define ATTND_FI_CAT2(a, b) a##b
#define ATTND_FI_CAT(a, b) ATTND_FI_CAT2(a, b)
/* attnd_fi_prefill_sm90_d + 128 → attnd_fi_prefill_sm90_d128 */
#define ATTND_FI_NAME(prefix) ATTND_FI_CAT(prefix, ATTND_FI_HEAD_DIM)

/* The launchers, one set per head dim. They throw FlashInfer's exceptions;
 * flashinfer_module.cu catches them. */
#define ATTND_FI_DECLARE(d)                                                                              \
    cudaError_t attnd_fi_prefill_sm90_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t s); \
    cudaError_t attnd_fi_prefill_sm80_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t s); \
    cudaError_t attnd_fi_decode_plan_d##d(const attnd_fi_case &c, void *workspace, cudaStream_t s,         \
                                          attnd_fi_decode_plan *plan);                                   \
    cudaError_t attnd_fi_decode_run_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t,               \
                                         const attnd_fi_decode_plan &plan, cudaStream_t s);              \
    cudaError_t attnd_fi_ragged_sm90_plan_d##d(const attnd_fi_case &c, void *workspace, cudaStream_t s,    \
                                               attnd_fi_ragged_plan *plan);                              \
    cudaError_t attnd_fi_ragged_sm90_run_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t,          \
                                              const attnd_fi_ragged_plan &plan, cudaStream_t s);          \
    cudaError_t attnd_fi_ragged_sm80_plan_d##d(const attnd_fi_case &c, void *workspace, cudaStream_t s,    \
                                               attnd_fi_ragged_plan *plan);                              \
    cudaError_t attnd_fi_ragged_sm80_run_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t,          \
                                              const attnd_fi_ragged_plan &plan, cudaStream_t s);         \
    cudaError_t attnd_fi_decode_tc_plan_d##d(const attnd_fi_case &c, void *workspace, cudaStream_t s,      \
                                             attnd_fi_ragged_plan *plan);                                \
    cudaError_t attnd_fi_decode_tc_run_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t,            \
                                            const attnd_fi_ragged_plan &plan, cudaStream_t s);           \
    cudaError_t attnd_fi_paged_sm90_plan_d##d(const attnd_fi_case &c, void *workspace, cudaStream_t s,     \
                                              attnd_fi_ragged_plan *plan);                               \
    cudaError_t attnd_fi_paged_sm90_run_d##d(const attnd_fi_case &c, const attnd_fi_tensors &t,           \
                                             const attnd_fi_ragged_plan &plan, cudaStream_t s);
ATTND_FI_DECLARE(64)
ATTND_FI_DECLARE(128)
ATTND_FI_DECLARE(256)
#undef ATTND_FI_DECLARE

#endif
