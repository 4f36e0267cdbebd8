/* tensor_serving.c — resident tensors in a serving run (tensor_serving.h): the uploaded case
 * of vLLM and FlashInfer. The lengths (int32 [batch]) and the block table (int32 [batch,
 * pages per sequence]) name tensors where a list goes; q, k, v take the run's layout:
 *
 *   q, out   [batch, heads, seq_q, head_dim], or [total_q, heads, head_dim] when ragged
 *   k, v     [num_pages, page_size, kv_heads, head_dim] when paged, [total_kv, kv_heads,
 *            head_dim] when ragged, else [batch, kv_heads, seq_kv, head_dim]
 *
 * The front keeps a copy of every small int32 vector it was sent (tensor_entry.values), so
 * the lengths are known here, and the run is checked whole before it is queued; the block
 * table can be large, and its entries are checked by the worker that holds it.
 */
#include "server/front/tensors/tensor_serving.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/front/tensors/tensor_table.h"

enum { SQ, SK, SV, SBT, SLQ, SLKV, SERVING_TENSORS };

static int shape_fail(const tensor_entry *t, const char *field, const char *want, api_error *e)
{
    char a[96];
    size_t n = (size_t)snprintf(a, sizeof a, "[");
    int i;

    for (i = 0; i < t->ndim && n < sizeof a; i++) n += (size_t)snprintf(a + n, sizeof a - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < sizeof a) snprintf(a + n, sizeof a - n, "]");
    return api_fail(e, 422, "shape_mismatch", field, "%s (tensor %s) has shape %s; %s", field, t->id, a, want);
}

/* A parameter the tensors fix (now: its value as the problem reads it): given and different
 * is 422; else it takes the tensors' value, as if given. */
static int take_dim(run_request *r, unsigned bit, const char *name, int64_t *field, int64_t now, int64_t value,
                    api_error *e)
{
    if ((r->given & bit) && now != value)
        return api_fail(e, 422, "shape_mismatch", name, "%s=%lld disagrees with the tensors (%s %lld)", name,
                        (long long)now, name, (long long)value);
    *field = value;
    r->given |= bit;
    return 0;
}

int tensors_run_is_serving(const run_request *r)
{
    return r->problem.page_size > 0 || r->seqlens_q.kind || r->seqlens_kv.kind || r->block_table_tensor[0];
}

/* Look the tensors up: int32 for the block table and lengths, a float dtype for q, k, v, and
 * all on one device, which becomes the run's. */
static int serving_lookup(run_request *r, const char *const names[], const char *const ids[], tensor_entry t[],
                          int have[], api_error *e)
{
    int i, first = -1, data = -1;

    for (i = 0; i < SERVING_TENSORS; i++) {
        int index = i >= SBT;
        have[i] = ids[i][0] != '\0';
        if (!have[i]) continue;
        if (tensor_table_lookup(ids[i], names[i], &t[i], e) != 0) return -1;
        if (index && t[i].dtype != ATTN_INT32)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is %s; block tables and lengths are "
                            "int32", names[i], t[i].id, attn_dtype_name(t[i].dtype));
        if (!index && t[i].dtype == ATTN_INT32)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is int32; q, k and v are bf16, fp16 "
                            "or fp32", names[i], t[i].id);
        if (!index && data >= 0 && t[i].dtype != t[data].dtype)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is %s but %s (tensor %s) is %s",
                            names[data], t[data].id, attn_dtype_name(t[data].dtype), names[i], t[i].id,
                            attn_dtype_name(t[i].dtype));
        if (!index && data < 0) data = i;
        if (first >= 0 && strcmp(t[i].device, t[first].device) != 0)
            return api_fail(e, 422, "device_mismatch", names[i], "%s (tensor %s) is on %s but %s (tensor %s) is on %s",
                            names[first], t[first].id, t[first].device, names[i], t[i].id, t[i].device);
        if (first < 0) first = i;
    }
    if (first < 0) return 0;
    if (r->device[0] && strcmp(r->device, t[first].device) != 0)
        return api_fail(e, 422, "device_mismatch", "device", "device=%s but %s (tensor %s) is on %s", r->device,
                        names[first], t[first].id, t[first].device);
    snprintf(r->device, sizeof r->device, "%s", t[first].device);
    if (data >= 0) {
        if ((r->given & RUN_GIVEN_DTYPE) && r->problem.dtype != t[data].dtype)
            return api_fail(e, 422, "dtype_mismatch", "dtype", "dtype=%s disagrees with %s (tensor %s), which is %s",
                            attn_dtype_name(r->problem.dtype), names[data], t[data].id, attn_dtype_name(t[data].dtype));
        r->problem.dtype = t[data].dtype;
        r->given |= RUN_GIVEN_DTYPE;
    }
    return 0;
}

/* Heads, head dims, the cache's pages and the dense sides' batch and lengths, from q, k, v. */
static int serving_dims(run_request *r, const tensor_entry t[], const int have[], int ragged, api_error *e)
{
    attn_problem *p = &r->problem;
    const int paged = p->page_size > 0, qdims = ragged ? 3 : 4, kvdims = paged ? 4 : ragged ? 3 : 4;
    const char *qwant = ragged ? "a ragged batch's q is [total_q, heads, head_dim]" : "q is [batch, heads, seq_q, head_dim]";
    const char *kvwant = paged    ? "a paged cache is [num_pages, page_size, kv_heads, head_dim]"
                         : ragged ? "a ragged batch's k and v are [total_kv, kv_heads, head_dim]"
                                  : "k and v are [batch, kv_heads, seq_kv, head_dim]";
    int kv = have[SK] ? SK : have[SV] ? SV : -1, i;

    if (have[SQ] && t[SQ].ndim != qdims) return shape_fail(&t[SQ], "q", qwant, e);
    for (i = SK; i <= SV; i++)
        if (have[i] && t[i].ndim != kvdims) return shape_fail(&t[i], i == SK ? "k" : "v", kvwant, e);
    if (have[SK] && have[SV])
        for (i = 0; i < kvdims - 1; i++)
            if (t[SK].shape[i] != t[SV].shape[i])
                return shape_fail(&t[SV], "v", "k and v agree but for head_dim_v", e);
    if (have[SQ]) {
        if (take_dim(r, RUN_GIVEN_HEADS, "heads", &p->heads, p->heads, t[SQ].shape[1], e) != 0 ||
            take_dim(r, RUN_GIVEN_HEAD_DIM, "head_dim", &p->head_dim, p->head_dim, t[SQ].shape[qdims - 1], e) != 0)
            return -1;
        if (!ragged && (take_dim(r, RUN_GIVEN_BATCH, "batch", &p->batch, p->batch, t[SQ].shape[0], e) != 0 ||
                        take_dim(r, RUN_GIVEN_SEQ_Q, "seq_q", &p->seq_q, p->seq_q, t[SQ].shape[2], e) != 0))
            return -1;
    }
    if (kv >= 0) {
        const tensor_entry *c = &t[kv];
        if (take_dim(r, RUN_GIVEN_KV_HEADS, "kv_heads", &p->kv_heads, attn_kv_heads(p), c->shape[paged ? 2 : 1], e))
            return -1;
        if (have[SK] && take_dim(r, RUN_GIVEN_HEAD_DIM, "head_dim", &p->head_dim, p->head_dim, t[SK].shape[kvdims - 1], e))
            return -1;
        if (paged) {
            if (c->shape[1] != p->page_size) {
                char want[96];
                snprintf(want, sizeof want, "its pages hold %lld tokens but page_size is %lld", (long long)c->shape[1],
                         (long long)p->page_size);
                return shape_fail(c, kv == SK ? "k" : "v", want, e);
            }
            if (take_dim(r, RUN_GIVEN_NUM_PAGES, "num_pages", &p->num_pages, p->num_pages, c->shape[0], e) != 0) return -1;
        } else if (!ragged && (take_dim(r, RUN_GIVEN_BATCH, "batch", &p->batch, p->batch, c->shape[0], e) != 0 ||
                               take_dim(r, RUN_GIVEN_SEQ_KV, "seq_kv", &p->seq_kv, p->seq_kv, c->shape[2], e) != 0)) {
            return -1;
        }
    }
    /* A generated dense side follows the other's length unless given, as in a dense run. */
    if (!ragged && have[SQ] && !(kv >= 0 && !paged) && !(r->given & RUN_GIVEN_SEQ_KV)) p->seq_kv = p->seq_q;
    if (!ragged && !have[SQ] && kv >= 0 && !paged && !(r->given & RUN_GIVEN_SEQ_Q)) p->seq_q = p->seq_kv;
    if (have[SV] && take_dim(r, RUN_GIVEN_HEAD_DIM_V, "head_dim_v", &p->head_dim_v, attn_dv(p), t[SV].shape[kvdims - 1], e))
        return -1;
    if (p->heads % attn_kv_heads(p) != 0)
        return api_fail(e, 422, "shape_mismatch", "kv_heads", "kv_heads %lld (the tensors') does not divide heads %lld",
                        (long long)attn_kv_heads(p), (long long)p->heads);
    return 0;
}

int tensors_apply_serving(run_request *r, api_error *e)
{
    static const char *const names[SERVING_TENSORS] = {"q", "k", "v", "block_table", "seqlens_q", "seqlens_kv"};
    run_seqlens *sides[2] = {&r->seqlens_q, &r->seqlens_kv};
    const char *ids[SERVING_TENSORS];
    tensor_entry t[SERVING_TENSORS];
    int have[SERVING_TENSORS], i;
    const int ragged = r->seqlens_q.kind || r->seqlens_kv.kind;
    attn_problem *p = &r->problem;
    int32_t lengths[RUN_MAX_SEQS];

    r->output_tensor[0] = '\0'; /* the front chooses it (tensors_prepare_run) */
    ids[SQ] = r->q_tensor, ids[SK] = r->k_tensor, ids[SV] = r->v_tensor, ids[SBT] = r->block_table_tensor;
    for (i = 0; i < 2; i++) ids[SLQ + i] = sides[i]->kind == RUN_SEQLENS_TENSOR ? sides[i]->tensor : "";
    if (serving_lookup(r, names, ids, t, have, e) != 0) return -1;
    for (i = 0; i < 2; i++) { /* the lengths, from the front's copy of them */
        int64_t n;
        if (!have[SLQ + i]) continue;
        n = t[SLQ + i].ndim == 1 ? tensor_table_values(ids[SLQ + i], lengths, RUN_MAX_SEQS) : -1;
        if (n < 0) return shape_fail(&t[SLQ + i], names[SLQ + i], "lengths are int32 [batch], at most 4096 of them", e);
        if (run_request_tensor_lengths(r, sides[i], lengths, n, e) != 0) return -1;
    }
    if (serving_dims(r, t, have, ragged, e) != 0 || run_request_resolve_serving(r, e) != 0) return -1;
    /* The shapes the resolved problem needs. */
    if (ragged && have[SQ] && t[SQ].shape[0] != p->total_q) {
        char want[96];
        snprintf(want, sizeof want, "the batch's query lengths add up to %lld tokens", (long long)p->total_q);
        return shape_fail(&t[SQ], "q", want, e);
    }
    for (i = SK; i <= SV; i++)
        if (ragged && p->page_size <= 0 && have[i] && t[i].shape[0] != p->total_kv) {
            char want[96];
            snprintf(want, sizeof want, "the batch's key lengths add up to %lld tokens", (long long)p->total_kv);
            return shape_fail(&t[i], names[i], want, e);
        }
    if (have[SBT]) {
        int64_t pages = (p->seq_kv + p->page_size - 1) / p->page_size;
        if (t[SBT].ndim != 2 || t[SBT].shape[0] != p->batch || t[SBT].shape[1] < pages) {
            char want[128];
            snprintf(want, sizeof want, "a block table is int32 [batch %lld, at least %lld pages] (seq_kv %lld in pages "
                     "of %lld)", (long long)p->batch, (long long)pages, (long long)p->seq_kv, (long long)p->page_size);
            return shape_fail(&t[SBT], "block_table", want, e);
        }
    }
    if (!r->scale_given) p->scale = 1.0 / sqrt((double)p->head_dim);
    return 0;
}
