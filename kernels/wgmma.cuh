/* wgmma.cuh — Hopper's warpgroup matrix multiply (wgmma, sm_90a only) as the flash kernels
 * (v5 flash_wgmma.cuh, v6 flash_tma.cuh) use it: shared-memory matrix descriptors for
 * 128-byte-swizzled tiles, the m64nNk16 instructions with fp32 accumulators (A from shared
 * memory or from registers, B from shared memory), and the fences that order them.
 *
 * A warpgroup is 4 consecutive warps (128 threads) starting at a warp index divisible by 4;
 * every wgmma here is issued by all 128 together and runs asynchronously on the tensor cores:
 *   wgmma_fence()       before the first wgmma that reads registers written by ordinary code
 *                       (accumulators, A fragments);
 *   wgmma_*()           issue, any number;
 *   wgmma_commit()      close them into one group;
 *   wgmma_wait<N>()     wait until at most N groups are in flight. Only then may ordinary
 *                       code touch their accumulators (wgmma_fence_operand keeps the compiler
 *                       from moving such accesses across the wait).
 * Shared memory written by ordinary stores or cp.async and read next by wgmma (the "async
 * proxy") needs fence_proxy_async() in each writing thread before the barrier that publishes it.
 *
 * Tile layout (the only one used here): 128-byte swizzle. A tile of R rows x 64 16-bit
 * elements (128 bytes per row) starts on a 1024-byte boundary; the 16-byte chunk c of row r
 * is stored at chunk c ^ (r % 8) of that row — the pattern the hardware undoes when it reads
 * through a descriptor with swizzle mode 1. Wider rows (head_dim 128) are split into
 * 64-column sub-tiles stored one after the other.
 *   K-major operand (Q as A, K as B: the reduction dimension is the contiguous one): 8-row
 *     groups 1024 bytes apart (SBO); one k16 step = 32 bytes into the 128-byte row; the
 *     leading offset is unused.
 *   MN-major operand (V as B with the transpose bit: keys are the reduction dimension, the
 *     head dim is contiguous): 8-key groups 1024 bytes apart; one k16 step = 16 rows = 2048
 *     bytes; at n64 one sub-tile (wgmma_rs_tb), at n96 and n128 two, their distance in the
 *     leading byte offset (wgmma_rs_tb96, wgmma_rs_tb128).
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for wgmma .m64nNk16"), warp w of the group,
 * g = lane / 4, t = lane % 4 — the mma.sync m16n8k16 layouts of flash_mma.cuh, warp w owning
 * rows 16w..16w+15:
 *   accumulator, N/2 floats: d[4i + e] = (row 16w + g + 8·(e/2), column 8i + 2t + e%2)
 *   A in registers, 4 x 16-bit pairs: {g, 2t}, {g+8, 2t}, {g, 2t+8}, {g+8, 2t+8}
 * so an S accumulator packed to 16 bits is the A operand of P·V without leaving registers.
 *
 * Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is defined (nvcc -gencode
 * arch=compute_90a,code=sm_90a); WGMMA_AVAILABLE says so to the code that includes this.
 */
#ifndef WGMMA_CUH
#define WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_AVAILABLE 1
#else
#define WGMMA_AVAILABLE 0
#endif

/* Descriptor of a 128-byte-swizzled tile at shared address `addr` (1024-byte aligned atom
 * base plus an in-row offset for k steps). Bits: 0-13 address/16, 16-29 leading byte
 * offset/16, 32-45 stride byte offset/16, 49-51 base offset (0: atoms are 1024-aligned),
 * 62-63 swizzle mode (1 = 128 bytes). */
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((lbo_bytes & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo_bytes & 0x3FFFFu) >> 4) << 32 | (uint64_t)1 << 62;
}

/* d moved `bytes` (a multiple of 16) further into shared memory: one add to the address field,
 * which never carries out of its 14 bits (shared memory ends below 256 KB). In an unrolled
 * k loop the steps are constants, so each product costs an add, not the encoding. */
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t d, uint32_t bytes)
{
    const uint32_t lo = (uint32_t)d + (bytes >> 4), hi = (uint32_t)(d >> 32);
    return (uint64_t)hi << 32 | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* An empty asm that "reads and writes" r: ordinary accesses to r stay on their side of it. */
__device__ __forceinline__ void wgmma_fence_operand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

/* Writes by this thread to shared memory (ordinary or cp.async, completed) become visible to
 * the async proxy (wgmma) once a barrier follows. */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WGMMA_ACC8(d, i)                                                                                     \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define WGMMA_ACC32(d) WGMMA_ACC8(d, 0), WGMMA_ACC8(d, 8), WGMMA_ACC8(d, 16), WGMMA_ACC8(d, 24)
#define WGMMA_ACC40(d) WGMMA_ACC32(d), WGMMA_ACC8(d, 32)
#define WGMMA_ACC48(d) WGMMA_ACC40(d), WGMMA_ACC8(d, 40)
#define WGMMA_ACC64(d) WGMMA_ACC32(d), WGMMA_ACC8(d, 32), WGMMA_ACC8(d, 40), WGMMA_ACC8(d, 48), WGMMA_ACC8(d, 56)
#define WGMMA_REGS32                                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_REGS40                                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                       \
    "%32, %33, %34, %35, %36, %37, %38, %39}"
#define WGMMA_REGS48                                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                       \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define WGMMA_REGS64                                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                       \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                       \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* d (+)= A·B, m64 x N x k16: A and B both K-major in shared memory. accumulate == 0
 * overwrites d (the first k step of a fresh product). */
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
#if WGMMA_AVAILABLE
    static_assert(N == 64 || N == 80 || N == 128, "N 64, 80 or 128");
    if constexpr (N == 80 && BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 " WGMMA_REGS40 ", %40, %41, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC40(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    } else if constexpr (N == 80) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 " WGMMA_REGS40 ", %40, %41, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC40(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    } else if constexpr (N == 128 && BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC64(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    } else if constexpr (N == 128) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC64(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    } else if constexpr (BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC32(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WGMMA_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_ACC32(d)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    }
#endif
}

/* d (+)= A·B, m64 x n128 x k16: A from registers (4 x 16-bit pairs, layout above), B K-major in
 * shared memory (K as the B of Q·Kᵀ: no transpose). accumulate == 0 overwrites d. */
template <bool BF16>
__device__ __forceinline__ void wgmma_rs128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate)
{
#if WGMMA_AVAILABLE
    if constexpr (BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_REGS64
                     ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                     : WGMMA_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_REGS64
                     ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                     : WGMMA_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
    }
#endif
}

/* d += A·B, m64 x n64 x k16: A from registers (4 x 16-bit pairs, layout above), B in shared
 * memory MN-major (transpose bit set). Always accumulates. n64 only: one product then reads
 * exactly one 64-column sub-tile, so the operand's two offsets (8-key groups, and 64-column
 * atoms, which n64 never crosses) can both be given as 1024 and nothing depends on which
 * field the hardware takes for which. */
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b)
{
#if WGMMA_AVAILABLE
    if constexpr (BF16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_REGS32
                     ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                     : WGMMA_ACC32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else {
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WGMMA_REGS32
                     ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                     : WGMMA_ACC32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    }
#endif
}

/* d += A·B, m64 x n128 x k16, A from registers, B MN-major with the transpose bit, spanning two
 * 64-column sub-tiles: the descriptor's leading byte offset is the distance between them and
 * the stride byte offset (8-key groups) 1024 — the assignment checked on the H200 with
 * TMA-loaded V (an SS product; swapped, the result is garbage). Always accumulates. */
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_tb128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b)
{
#if WGMMA_AVAILABLE
    if constexpr (BF16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_REGS64
                     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                     : WGMMA_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_REGS64
                     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                     : WGMMA_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    }
#endif
}

/* d += A·B, m64 x n96 x k16, A from registers, B MN-major with the transpose bit over one whole
 * 64-column sub-tile and the first half of the next (head dim 96: TMA zero-filled the rest),
 * their distance in the leading byte offset as for n128. Always accumulates. */
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_tb96(float (&d)[48], const uint32_t (&a)[4], uint64_t desc_b)
{
#if WGMMA_AVAILABLE
    if constexpr (BF16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 " WGMMA_REGS48
                     ", {%48, %49, %50, %51}, %52, 1, 1, 1, 1;\n"
                     : WGMMA_ACC48(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else {
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 " WGMMA_REGS48
                     ", {%48, %49, %50, %51}, %52, 1, 1, 1, 1;\n"
                     : WGMMA_ACC48(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    }
#endif
}

#endif
