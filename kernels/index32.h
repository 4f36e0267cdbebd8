/* index32.h — PyTorch's 32-bit indexing split, planned on the host, so that naive and math
 * launch an elementwise or reduction pass as many times as PyTorch does.
 *
 * PyTorch's CUDA TensorIterator kernels index with 32-bit offsets. When an op's iteration
 * does not fit (TensorIteratorBase::can_use_32bit_indexing, aten/src/ATen/TensorIterator.cpp:
 * numel > INT32_MAX, or some operand's largest byte offset 1 + Σ (size−1)·stride_bytes >
 * INT32_MAX), gpu_kernel (aten/src/ATen/native/cuda/Loops.cuh) and gpu_reduce_kernel
 * (Reduce.cuh) walk iter.with_32bit_indexing() and launch one kernel per part.
 * SplitUntil32Bit halves the part on top of a stack until it fits, at the dimension
 * get_dim_to_split picks (the largest (size−1)·|stride_bytes| over all operands, the outer
 * dimension on a tie), and hands out the parts first half first: ascending offsets.
 * attnd's kernels index with 64 bits and would need no split; the parts are copied only so
 * that a profile of attnd counts the launches a profile of PyTorch counts.
 *
 * An iteration is described as TensorIterator sees it after coalescing: dimensions fastest
 * first, each operand's stride in bytes per dimension (0 where it is broadcast).
 *
 *   index32_fits       can_use_32bit_indexing of a sub-range
 *   index32_dim_to_split  get_dim_to_split of a sub-range
 *   index32_start / index32_next   SplitUntil32Bit's walk: one part per call, in order
 *   index32_flat       a part as a range [begin, begin + count) of the dense iteration order
 *
 * Header-only, plain C: naive.cu and math.cu plan their launches with it, and the unit test
 * (tests/unit/kernels/test_index32.c) checks the plans at the bench shapes. */
#ifndef INDEX32_H
#define INDEX32_H

#include <stdint.h>
#include <string.h>

#define INDEX32_MAX_DIMS 4
#define INDEX32_MAX_OPERANDS 4
#define INDEX32_LIMIT INT64_C(2147483647) /* std::numeric_limits<int32_t>::max() */
/* Each split halves one dimension of size < 2^63: at most 63 per dimension on one path. */
#define INDEX32_MAX_DEPTH (63 * INDEX32_MAX_DIMS + 1)

/* One op's iteration: shape[d] for d < ndim (fastest first), stride_bytes[o][d] per operand. */
typedef struct index32_iter {
    int ndim, nops;
    int64_t shape[INDEX32_MAX_DIMS];
    int64_t stride_bytes[INDEX32_MAX_OPERANDS][INDEX32_MAX_DIMS];
} index32_iter;

/* A sub-range of an iteration: begin[d] .. begin[d] + size[d] in each dimension. */
typedef struct index32_part {
    int64_t begin[INDEX32_MAX_DIMS], size[INDEX32_MAX_DIMS];
} index32_part;

/* The walk's state (SplitUntil32Bit::iterator): parts still to split or hand out. */
typedef struct index32_walk {
    const index32_iter *it;
    int depth;
    index32_part stack[INDEX32_MAX_DEPTH];
} index32_walk;

static inline int64_t index32_abs(int64_t x) { return x < 0 ? -x : x; }

/* can_use_32bit_indexing: the part's element count and every operand's largest byte offset
 * (plus one) are at most INT32_MAX. */
static inline int index32_fits(const index32_iter *it, const index32_part *part)
{
    int64_t numel = 1;
    for (int d = 0; d < it->ndim; d++) numel *= part->size[d];
    if (numel > INDEX32_LIMIT) return 0;
    for (int o = 0; o < it->nops; o++) {
        int64_t max_offset = 1;
        for (int d = 0; d < it->ndim; d++) max_offset += (part->size[d] - 1) * it->stride_bytes[o][d];
        if (max_offset > INDEX32_LIMIT) return 0;
    }
    return 1;
}

/* get_dim_to_split: the dimension with the largest (size−1)·|stride_bytes| over all
 * operands, looked at from the outermost dimension down (a tie keeps the outer one). */
static inline int index32_dim_to_split(const index32_iter *it, const index32_part *part)
{
    int64_t max_extent = -1;
    int dim = -1;
    for (int d = it->ndim - 1; d >= 0; d--) {
        if (part->size[d] == 0) continue;
        for (int o = 0; o < it->nops; o++) {
            const int64_t extent = (part->size[d] - 1) * index32_abs(it->stride_bytes[o][d]);
            if (extent > max_extent) {
                max_extent = extent;
                dim = d;
            }
        }
    }
    return dim;
}

/* Split the part on top of the stack until it fits (SplitUntil32Bit::iterator::operator++):
 * TensorIteratorBase::split(dim) keeps the upper half [size/2, size) in place and pushes the
 * lower half [0, size/2) above it, so the lower half comes out first. 0, or -1 if a part
 * cannot be split further (a dimension of one element that still does not fit). */
static inline int index32_settle(index32_walk *w)
{
    while (w->depth > 0 && !index32_fits(w->it, &w->stack[w->depth - 1])) {
        index32_part *top = &w->stack[w->depth - 1];
        const int dim = index32_dim_to_split(w->it, top);
        if (dim < 0 || top->size[dim] < 2 || w->depth >= INDEX32_MAX_DEPTH) return -1;
        index32_part lower = *top;
        lower.size[dim] = top->size[dim] / 2;
        top->begin[dim] += lower.size[dim];
        top->size[dim] -= lower.size[dim];
        w->stack[w->depth++] = lower;
    }
    return 0;
}

/* Begin the walk over the whole iteration `it` (which must outlive the walk). */
static inline void index32_start(index32_walk *w, const index32_iter *it)
{
    w->it = it;
    w->depth = 1;
    for (int d = 0; d < INDEX32_MAX_DIMS; d++) {
        w->stack[0].begin[d] = 0;
        w->stack[0].size[d] = d < it->ndim ? it->shape[d] : 1;
    }
}

/* The next part in PyTorch's launch order: 1 with *part set, 0 when all parts were handed
 * out, -1 when the iteration cannot be split into parts that fit. */
static inline int index32_next(index32_walk *w, index32_part *part)
{
    if (index32_settle(w) != 0) return -1;
    if (w->depth == 0) return 0;
    *part = w->stack[--w->depth];
    return 1;
}

/* The number of parts of `it`: 1 when it fits as a whole; -1 as index32_next. */
static inline int64_t index32_count(const index32_iter *it)
{
    index32_walk w;
    index32_part part;
    int64_t n = 0;
    int rc;
    index32_start(&w, it);
    while ((rc = index32_next(&w, &part)) == 1) n++;
    return rc < 0 ? -1 : n;
}

/* A part as a run [*begin, *begin + *count) of the iteration's dense order (dimension 0
 * fastest): 0, or -1 when the part is not one run (a partial dimension below a dimension
 * that has more than one index in the part). Every part of the iterations naive and math
 * describe is one run: dimensions are split outermost first while they can be. */
static inline int index32_flat(const index32_iter *it, const index32_part *part, int64_t *begin, int64_t *count)
{
    int64_t b = 0, n = 1, pitch = 1;
    int partial_below = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (partial_below && part->size[d] != 1) return -1;
        if (part->size[d] != it->shape[d]) partial_below = 1;
        b += part->begin[d] * pitch;
        n *= part->size[d];
        pitch *= it->shape[d];
    }
    *begin = b;
    *count = n;
    return 0;
}

/* ---------------------------------------------------------------- the ops' iterations */

/* A contiguous elementwise op over n elements (fast_set_up coalesces it to one dimension):
 * out_bytes and in_bytes are the element sizes of the output and its input (a second input
 * of the same size, or a broadcast scalar, changes nothing). */
static inline index32_iter index32_flat_op(int64_t n, int out_bytes, int in_bytes)
{
    index32_iter it;
    memset(&it, 0, sizeof it);
    it.ndim = 1;
    it.nops = 2;
    it.shape[0] = n;
    it.stride_bytes[0][0] = out_bytes;
    it.stride_bytes[1][0] = in_bytes;
    return it;
}

/* An op over `outer` contiguous blocks of `inner` elements (out and in: elem_bytes each) with
 * a third operand of `other_bytes` per element that repeats with each block (a [Sq, Skv]
 * mask or bias broadcast over B·H: stride 0 across blocks) or, with per_block set, holds one
 * value per block (the all-masked-row flags of safe softmax, broadcast along a row). */
static inline index32_iter index32_blocks_op(int64_t inner, int64_t outer, int elem_bytes, int other_bytes,
                                            int per_block)
{
    index32_iter it;
    memset(&it, 0, sizeof it);
    it.ndim = 2;
    it.nops = 3;
    it.shape[0] = inner;
    it.shape[1] = outer;
    it.stride_bytes[0][0] = it.stride_bytes[1][0] = elem_bytes;
    it.stride_bytes[0][1] = it.stride_bytes[1][1] = elem_bytes * inner;
    it.stride_bytes[2][0] = per_block ? 0 : other_bytes;
    it.stride_bytes[2][1] = per_block ? other_bytes : 0;
    return it;
}

/* An op over [batch, heads, plane] elements (out and in: elem_bytes each) with a third operand
 * of other_bytes per element that is [batch, 1, plane]: a padded batch's mask or bias, one plane
 * per sequence, broadcast over the heads. Size-1 dimensions dropped and neighbours whose strides
 * chain merged, as TensorIterator's coalescing does (heads 1 or batch 1 leave fewer dims). */
static inline index32_iter index32_batched_mask_op(int64_t plane, int64_t heads, int64_t batch, int elem_bytes,
                                                  int other_bytes)
{
    const int64_t shape[3] = {plane, heads, batch};
    const int64_t strides[3][3] = {{elem_bytes, elem_bytes * plane, elem_bytes * plane * heads},
                                   {elem_bytes, elem_bytes * plane, elem_bytes * plane * heads},
                                   {other_bytes, 0, other_bytes * plane}};
    index32_iter it;
    memset(&it, 0, sizeof it);
    it.nops = 3;
    for (int d = 0; d < 3; d++) {
        int merge = it.ndim > 0;
        if (shape[d] == 1) continue;
        for (int o = 0; o < 3 && merge; o++)
            merge = strides[o][d] == it.shape[it.ndim - 1] * it.stride_bytes[o][it.ndim - 1];
        if (merge) {
            it.shape[it.ndim - 1] *= shape[d];
            continue;
        }
        it.shape[it.ndim] = shape[d];
        for (int o = 0; o < 3; o++) it.stride_bytes[o][it.ndim] = strides[o][d];
        it.ndim++;
    }
    if (it.ndim == 0) { /* one element */
        it.ndim = 1;
        it.shape[0] = 1;
        for (int o = 0; o < 3; o++) it.stride_bytes[o][0] = strides[o][0];
    }
    return it;
}

/* A reduction over the last dimension: `rows` rows of `len` elements of in_bytes each into
 * one out_bytes value per row (the output's stride is 0 along the reduced dimension). */
static inline index32_iter index32_row_reduce(int64_t len, int64_t rows, int in_bytes, int out_bytes)
{
    index32_iter it;
    memset(&it, 0, sizeof it);
    it.ndim = 2;
    it.nops = 2;
    it.shape[0] = len;
    it.shape[1] = rows;
    it.stride_bytes[0][0] = 0;
    it.stride_bytes[0][1] = out_bytes;
    it.stride_bytes[1][0] = in_bytes;
    it.stride_bytes[1][1] = in_bytes * len;
    return it;
}

#endif
