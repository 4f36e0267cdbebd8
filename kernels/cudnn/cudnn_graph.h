/* cudnn_graph.h — building a cuDNN backend operation graph from C, one descriptor at a time:
 * what cudnn-frontend's nodes do when they lower to the backend API, without C++. The SDPA
 * graph itself (which operations, in which order) is cudnn_sdpa.c's.
 *
 * Every descriptor a graph creates is recorded in its cudnn_graph_descs and destroyed with
 * them; every failure is recorded in the graph's exec_context with the descriptor and the
 * attribute named, cuDNN's status and cuDNN's own text (cudnn_fail):
 * "cudnnBackendSetAttribute(scores tensor, CUDNN_ATTR_TENSOR_STRIDES) failed at …".
 * Each builder below returns 0, or -1 with the error recorded.
 */
#ifndef CUDNN_GRAPH_H
#define CUDNN_GRAPH_H

#include <stdint.h>

#include <cudnn_graph.h>

#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDNN_GRAPH_MAX_DESCS 192 /* tensors + ops + pointwise/matmul/reduction descs of one graph */
#define CUDNN_GRAPH_MAX_OPS 40

/* Every descriptor created for one graph, destroyed together (in reverse order). */
typedef struct cudnn_graph_descs {
    cudnnBackendDescriptor_t d[CUDNN_GRAPH_MAX_DESCS];
    int n;
} cudnn_graph_descs;

/* Destroy every descriptor of l (statuses are not actionable: the descriptor is gone either way). */
void cudnn_graph_descs_destroy(const cudnn_api *api, cudnn_graph_descs *l);

/* One graph being built: where errors go, the cuDNN table, what was created, its operations. */
typedef struct cudnn_graph {
    exec_context *ctx;
    const cudnn_api *api;
    cudnn_graph_descs *descs;
    cudnnBackendDescriptor_t ops[CUDNN_GRAPH_MAX_OPS];
    int n_ops;
    int64_t next_uid;     /* the unique id the next virtual tensor gets */
    cudnnStatus_t status; /* the first failed call's status: NOT_SUPPORTED means cuDNN refuses */
} cudnn_graph;

/* The three backend calls, recorded in g: `what` names the descriptor in an error, file and
 * line say where it was asked for. */
int cudnn_graph_create(cudnn_graph *g, cudnnBackendDescriptorType_t type, const char *what,
                       cudnnBackendDescriptor_t *out, const char *file, int line);
int cudnn_graph_set(cudnn_graph *g, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t attr,
                    const char *attr_name, cudnnBackendAttributeType_t type, int64_t count, const void *values,
                    const char *file, int line);
int cudnn_graph_finalize(cudnn_graph *g, cudnnBackendDescriptor_t d, const char *what, const char *file, int line);

/* The OPERATIONGRAPH of g's operations, finalized. With the handle: without it, cuDNN
 * 9.19.0 finalizes the graph but its heuristics return no engine configs at all (measured on
 * the H200; the attribute is marked deprecated). */
int cudnn_graph_operation_graph(cudnn_graph *g, cudnnHandle_t handle, cudnnBackendDescriptor_t *out);

/* A tensor descriptor, 16-byte aligned; `ragged` (NULL: none) is its ragged offset tensor
 * (CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC). uid 0 takes the next virtual id. */
int cudnn_graph_tensor_ragged(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type,
                              const int64_t dims[4], const int64_t strides[4], int is_virtual, int by_value,
                              cudnnBackendDescriptor_t ragged, cudnnBackendDescriptor_t *out);
int cudnn_graph_tensor(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
                       const int64_t strides[4], int is_virtual, int by_value, cudnnBackendDescriptor_t *out);
/* A by-value scalar (a host pointer in the variant pack): all dims and strides 1. */
int cudnn_graph_scalar(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type,
                       cudnnBackendDescriptor_t *out);

/* y = mode(x [, b [, t]]) computed in `prec`; axis ≥ 0 only for GEN_INDEX. alpha1 = alpha2
 * = 1 as cudnn-frontend sets them. */
int cudnn_graph_pointwise(cudnn_graph *g, const char *what, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                          int64_t axis, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y);
/* c = a · b, accumulated in FLOAT. m, n, k (NULL: none): INT32 [b,1,1,1] tensors whose entry
 * b overrides the GEMM's M, N or K for batch b (a serving batch's lengths). */
int cudnn_graph_matmul(cudnn_graph *g, const char *what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                       cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m, cudnnBackendDescriptor_t n,
                       cudnnBackendDescriptor_t k);
/* y (a virtual K or V of the batch) = the rows of `container` that `table` lists for each
 * sequence, up to its seq_len: cudnn-frontend's paged cache load node (cuDNN 9.5+). */
int cudnn_graph_paged_load(cudnn_graph *g, const char *what, cudnnBackendDescriptor_t container,
                           cudnnBackendDescriptor_t table, cudnnBackendDescriptor_t seq_len,
                           cudnnBackendDescriptor_t y);
/* y [b,h,sq,1] = reduce(x [b,h,sq,skv]) over the last dimension, in FLOAT. */
int cudnn_graph_reduction(cudnn_graph *g, const char *what, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                          cudnnBackendDescriptor_t y);

#ifdef __cplusplus
}
#endif
#endif
