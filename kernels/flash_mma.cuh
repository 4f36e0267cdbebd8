/* flash_mma.cuh — the sm_80+ warp-level primitives the fused kernels are built from:
 * cp.async (16-byte, zero-filling), ldmatrix (.x4, plain and .trans), mma.sync m16n8k16 with
 * fp32 accumulation for fp16 and bf16, ex2.approx, and packing two floats into a 16-bit pair.
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), g = lane/4, t = lane%4:
 *   A 16x16 row-major, 4 regs: {row g, k 2t..2t+1}, {row g+8, k 2t..}, {row g, k 2t+8..}, {row g+8, k 2t+8..}
 *   B 16x8 (k x n),    2 regs: {k 2t..2t+1, n g}, {k 2t+8.., n g}
 *   C 16x8 fp32,       4 floats: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
 * Two adjacent C tiles (n 0..7, 8..15) are exactly one A fragment of k 0..15 once packed to
 * 16 bits: that is how P = softmax(S) feeds P·V without leaving registers.
 * Everything here needs sm_80 or newer (every architecture attnd builds).
 */
#ifndef FLASH_MMA_CUH
#define FLASH_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t flash_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Copy 16 bytes global -> shared asynchronously; src_bytes 0 writes 16 zero bytes (the
 * source address must still be a valid one: callers pass the tensor base). */
__device__ __forceinline__ void flash_cp_async16(void *smem_dst, const void *gmem_src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(flash_smem_addr(smem_dst)),
                 "l"(gmem_src), "r"(src_bytes));
}
__device__ __forceinline__ void flash_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void flash_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void flash_ldmatrix_x4(uint32_t r[4], const void *smem_row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(flash_smem_addr(smem_row)));
}
__device__ __forceinline__ void flash_ldmatrix_x4_trans(uint32_t r[4], const void *smem_row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(flash_smem_addr(smem_row)));
}

/* c += a·b, one m16n8k16 tile, fp32 accumulate. */
template <bool BF16> __device__ __forceinline__ void flash_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    if constexpr (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* 2^x, one MUFU op; ex2.approx(-inf) = +0, which the masking relies on. */
__device__ __forceinline__ float flash_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats -> one register of two 16-bit values, `lo` in the low half (lower column). */
template <bool BF16> __device__ __forceinline__ uint32_t flash_pack2(float lo, float hi)
{
    if constexpr (BF16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    } else {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
}

#endif
