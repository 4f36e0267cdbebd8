/* tma.cuh — Hopper's bulk tensor copies (TMA) and the shared-memory barriers (mbarrier) that
 * count their bytes, as flash_tma.cuh uses them; sm_90a device code, plus the host-side
 * encoding of a tensor map through the driver entry point (nothing new to link).
 *
 * mbarrier protocol (one phase at a time, parity = phase & 1):
 *   tma_mbar_init(bar, n)          n arrivals complete a phase; then tma_fence_mbar_init() and a
 *                                  CTA barrier before any other thread touches it;
 *   tma_mbar_expect_tx(bar, bytes) one arrival that also announces `bytes` of incoming copies:
 *                                  the phase completes when the arrivals are in and the bytes
 *                                  have landed (out-of-bounds boxes count in full: zero fill);
 *   tma_mbar_arrive(bar)           a plain arrival (a consumer releasing a buffer);
 *   tma_mbar_wait(bar, parity)     spin until the phase of that parity completed. A fresh
 *                                  barrier reads parity 1 as complete, so a producer waiting on
 *                                  "empty" barriers starts at parity 1 and passes at once.
 * Data written by TMA and waited for here is visible to wgmma and ordinary loads without a
 * proxy fence.
 *
 * Tensor maps: 128-byte swizzle, boxes of 64 16-bit columns (128 bytes, the swizzle span) x
 * ROWS rows, destination 1024-byte aligned: the layout wgmma.cuh's descriptors read.
 */
#ifndef TMA_CUH
#define TMA_CUH

#include <cuda.h> /* CUtensorMap and its enums only: libcuda is not linked */
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TMA_AVAILABLE 1
#else
#define TMA_AVAILABLE 0
#endif

/* Device functions exist on every target, their instructions only where TMA_AVAILABLE (as in
 * wgmma.cuh): the kernel templates that call them compile everywhere, run on sm_90a only. */
__device__ __forceinline__ void tma_mbar_init(uint32_t bar, uint32_t count)
{
#if TMA_AVAILABLE
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void tma_fence_mbar_init()
{
#if TMA_AVAILABLE
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tma_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
#if TMA_AVAILABLE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void tma_mbar_arrive(uint32_t bar)
{
#if TMA_AVAILABLE
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void tma_mbar_wait(uint32_t bar, uint32_t parity)
{
#if TMA_AVAILABLE
    /* labels inside { } are local to the block in PTX: one copy per inlined call is fine */
    asm volatile("{\n.reg .pred p;\n"
                 "TMA_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TMA_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
#endif
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map)
{
#if TMA_AVAILABLE
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}
/* One box of a 3-D map (c0 column, c1 row, c2 head) into shared memory at dst; its bytes
 * complete the current phase of bar. */
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1, int c2)
{
#if TMA_AVAILABLE
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
#endif
}
/* Named barriers (ids 1..15; 0 is __syncthreads): `count` threads, a multiple of 32. */
__device__ __forceinline__ void tma_bar_sync(int id, int count)
{
#if TMA_AVAILABLE
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void tma_bar_arrive(int id, int count)
{
#if TMA_AVAILABLE
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}

/* Host: encode a 3-D map over a [heads][rows][cols] view of 16-bit elements whose rows lie
 * row_stride elements apart and heads head_stride apart (multiples of 8: TMA takes strides in
 * 16-byte units), box = 64 columns x box_rows rows x 1 head, 128-byte swizzle, out-of-bounds
 * boxes read as zeros. A token-major [tokens, heads, cols] tensor (a ragged batch, a paged
 * cache) is the view rows = tokens, row_stride = heads·cols, head_stride = cols. Returns a
 * CUresult (0 = success). The encoder is fetched once through the runtime
 * (cudaGetDriverEntryPointByVersion), so no driver library is linked. */
static inline int tma_encode_3d_strided(CUtensorMap *map, const void *base, bool bf16, uint64_t cols, uint64_t rows,
                                        uint64_t heads, uint64_t row_stride, uint64_t head_stride, uint32_t box_rows)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    if (!encode) return (int)CUDA_ERROR_NOT_FOUND;
    const cuuint64_t dims[3] = {cols, rows, heads};
    const cuuint64_t strides[2] = {row_stride * 2, head_stride * 2};
    const cuuint32_t box[3] = {64, box_rows, 1}, elem_strides[3] = {1, 1, 1};
    return (int)encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                       const_cast<void *>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                       CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* The same over a contiguous [heads][rows][cols] tensor. */
static inline int tma_encode_3d(CUtensorMap *map, const void *base, bool bf16, uint64_t cols, uint64_t rows,
                                uint64_t heads, uint32_t box_rows)
{
    return tma_encode_3d_strided(map, base, bf16, cols, rows, heads, cols, rows * cols, box_rows);
}

#endif
