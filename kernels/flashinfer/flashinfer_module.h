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
                                         const attnd_fi_decode_plan &plan, cudaStream_t s);
ATTND_FI_DECLARE(64)
ATTND_FI_DECLARE(128)
ATTND_FI_DECLARE(256)
#undef ATTND_FI_DECLARE

#endif
