/* cudnn_graph.c — the backend graph builders of cudnn_graph.h, through cudnn_loader.h's table. */
#include "kernels/cudnn/cudnn_graph.h"

#include <stdbool.h>
#include <stdio.h>

void cudnn_graph_descs_destroy(const cudnn_api *api, cudnn_graph_descs *l)
{
    while (l->n > 0) {
        cudnnBackendDescriptor_t d = l->d[--l->n];
        if (d) (void)api->BackendDestroyDescriptor(d);
    }
}

static void cudnn_graph_note_status(cudnn_graph *g, cudnnStatus_t st)
{
    if (g->status == CUDNN_STATUS_SUCCESS) g->status = st;
}

int cudnn_graph_create(cudnn_graph *g, cudnnBackendDescriptorType_t type, const char *what,
                       cudnnBackendDescriptor_t *out, const char *file, int line)
{
    char call[160];
    cudnnStatus_t st;
    *out = NULL;
    if (g->descs->n >= CUDNN_GRAPH_MAX_DESCS)
        return exec_fail(g->ctx, file, line, what, "CUDNN_GRAPH_MAX_DESCS too small");
    st = g->api->BackendCreateDescriptor(type, out);
    if (st != CUDNN_STATUS_SUCCESS) {
        *out = NULL;
        cudnn_graph_note_status(g, st);
        snprintf(call, sizeof call, "cudnnBackendCreateDescriptor(%s)", what);
        return cudnn_fail(g->ctx, file, line, call, st);
    }
    g->descs->d[g->descs->n++] = *out;
    return 0;
}

int cudnn_graph_set(cudnn_graph *g, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t attr,
                    const char *attr_name, cudnnBackendAttributeType_t type, int64_t count, const void *values,
                    const char *file, int line)
{
    char call[192];
    cudnnStatus_t st = g->api->BackendSetAttribute(d, attr, type, count, values);
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    cudnn_graph_note_status(g, st);
    snprintf(call, sizeof call, "cudnnBackendSetAttribute(%s, %s)", what, attr_name);
    return cudnn_fail(g->ctx, file, line, call, st);
}

int cudnn_graph_finalize(cudnn_graph *g, cudnnBackendDescriptor_t d, const char *what, const char *file, int line)
{
    char call[160];
    cudnnStatus_t st = g->api->BackendFinalize(d);
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    cudnn_graph_note_status(g, st);
    snprintf(call, sizeof call, "cudnnBackendFinalize(%s)", what);
    return cudnn_fail(g->ctx, file, line, call, st);
}

/* The call text in an error names the descriptor and the attribute, not the C expression:
 * "cudnnBackendSetAttribute(scores tensor, CUDNN_ATTR_TENSOR_STRIDES) failed at …". */
#define GRAPH_CREATE(g, type, what, out) TRY(cudnn_graph_create((g), (type), (what), (out), __FILE__, __LINE__))
#define GRAPH_SET(g, d, what, attr, type, count, values)                                        \
    TRY(cudnn_graph_set((g), (d), (what), (attr), #attr, (type), (count), (values), __FILE__, __LINE__))
#define GRAPH_FINALIZE(g, d, what) TRY(cudnn_graph_finalize((g), (d), (what), __FILE__, __LINE__))

int cudnn_graph_operation_graph(cudnn_graph *g, cudnnHandle_t handle, cudnnBackendDescriptor_t *out)
{
    static const char what[] = "operation graph";
    GRAPH_CREATE(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what, out);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    GRAPH_FINALIZE(g, *out, what);
    return 0;
}

int cudnn_graph_tensor_ragged(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type,
                              const int64_t dims[4], const int64_t strides[4], int is_virtual, int by_value,
                              cudnnBackendDescriptor_t ragged, cudnnBackendDescriptor_t *out)
{
    bool virt = is_virtual != 0, byval = by_value != 0;
    int64_t align = 16;
    if (uid == 0) uid = g->next_uid++;
    GRAPH_CREATE(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what, out);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (byval) GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    if (ragged)
        GRAPH_SET(g, *out, what, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged);
    GRAPH_FINALIZE(g, *out, what);
    return 0;
}

int cudnn_graph_tensor(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
                       const int64_t strides[4], int is_virtual, int by_value, cudnnBackendDescriptor_t *out)
{
    return cudnn_graph_tensor_ragged(g, what, uid, type, dims, strides, is_virtual, by_value, NULL, out);
}

int cudnn_graph_scalar(cudnn_graph *g, const char *what, int64_t uid, cudnnDataType_t type,
                       cudnnBackendDescriptor_t *out)
{
    static const int64_t ones[4] = {1, 1, 1, 1};
    return cudnn_graph_tensor(g, what, uid, type, ones, ones, 0, 1, out);
}

static int cudnn_graph_add_op(cudnn_graph *g, cudnnBackendDescriptor_t op, const char *what)
{
    if (g->n_ops >= CUDNN_GRAPH_MAX_OPS)
        return exec_fail(g->ctx, __FILE__, __LINE__, what, "CUDNN_GRAPH_MAX_OPS too small");
    g->ops[g->n_ops++] = op;
    return 0;
}

int cudnn_graph_pointwise(cudnn_graph *g, const char *what, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                          int64_t axis, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t pw, op;
    float alpha = 1.0f;
    GRAPH_CREATE(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what, &pw);
    GRAPH_SET(g, pw, what, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    GRAPH_SET(g, pw, what, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) GRAPH_SET(g, pw, what, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    GRAPH_FINALIZE(g, pw, what);

    GRAPH_CREATE(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what, &op);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    GRAPH_FINALIZE(g, op, what);
    return cudnn_graph_add_op(g, op, what);
}

int cudnn_graph_matmul(cudnn_graph *g, const char *what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                       cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m, cudnnBackendDescriptor_t n,
                       cudnnBackendDescriptor_t k)
{
    cudnnBackendDescriptor_t mm, op;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    GRAPH_CREATE(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what, &mm);
    GRAPH_SET(g, mm, what, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    GRAPH_FINALIZE(g, mm, what);

    GRAPH_CREATE(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what, &op);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    if (m)
        GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
    if (n)
        GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n);
    if (k)
        GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k);
    GRAPH_FINALIZE(g, op, what);
    return cudnn_graph_add_op(g, op, what);
}

int cudnn_graph_paged_load(cudnn_graph *g, const char *what, cudnnBackendDescriptor_t container,
                           cudnnBackendDescriptor_t table, cudnnBackendDescriptor_t seq_len,
                           cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op;
    GRAPH_CREATE(g, CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, what, &op);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &container);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &table);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &seq_len);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    GRAPH_FINALIZE(g, op, what);
    return cudnn_graph_add_op(g, op, what);
}

int cudnn_graph_reduction(cudnn_graph *g, const char *what, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                          cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t red, op;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    GRAPH_CREATE(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what, &red);
    GRAPH_SET(g, red, what, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    GRAPH_SET(g, red, what, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    GRAPH_FINALIZE(g, red, what);

    GRAPH_CREATE(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what, &op);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    GRAPH_SET(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
    GRAPH_FINALIZE(g, op, what);
    return cudnn_graph_add_op(g, op, what);
}

