/* tensor_runs.c — runs that read resident tensors as q, k, v or keep their output as one
 * (tensors.h, docs/tensors.md).
 *
 * Runs hold what they read: tensors_prepare_run pins each resident input and reserves the
 * kept output's id as a pending entry; tensors_finish_run, the pool's end hook of the run,
 * undoes both whichever way the run ended, so an async run is covered from its 202 to its
 * end exactly as a synchronous one is.
 */
#include "server/front/tensors/tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/variant_info.h"
#include "server/front/store/store.h"
#include "server/front/tensors/tensor_serving.h"
#include "server/front/tensors/tensor_table.h"

static void tensors_shape_text(const tensor_entry *t, char *buf, size_t len)
{
    size_t n = 0;
    int i;
    n += (size_t)snprintf(buf, len, "[");
    for (i = 0; i < t->ndim && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

int tensors_apply_run(run_request *r, api_error *e)
{
    const char *ids[3] = {r->q_tensor, r->k_tensor, r->v_tensor}, *names[3] = {"q", "k", "v"};
    tensor_entry t[3];
    int have[3], i, first = -1;
    char a[96], b[96];
    attn_problem *p = &r->problem;

    if (tensors_run_is_serving(r)) return tensors_apply_serving(r, e); /* its own layouts */
    r->output_tensor[0] = '\0'; /* the front chooses it (tensors_prepare_run) */
    for (i = 0; i < 3; i++) {
        have[i] = ids[i][0] != '\0';
        if (!have[i]) continue;
        if (tensor_table_lookup(ids[i], names[i], &t[i], e) != 0) return -1;
        if (t[i].dtype == ATTN_INT32)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is int32; q, k and v are bf16, fp16 "
                            "or fp32", names[i], t[i].id);
        if (t[i].ndim != 4) {
            tensors_shape_text(&t[i], a, sizeof a);
            return api_fail(e, 422, "shape_mismatch", names[i], "%s (tensor %s) has shape %s; a run needs [batch, heads, seq, head_dim]",
                            names[i], t[i].id, a);
        }
        if (first < 0) {
            first = i;
            continue;
        }
        if (strcmp(t[i].device, t[first].device) != 0)
            return api_fail(e, 422, "device_mismatch", names[i], "%s (tensor %s) is on %s but %s (tensor %s) is on %s", names[first],
                            t[first].id, t[first].device, names[i], t[i].id, t[i].device);
        if (t[i].dtype != t[first].dtype)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is %s but %s (tensor %s) is %s", names[first], t[first].id,
                            attn_dtype_name(t[first].dtype), names[i], t[i].id, attn_dtype_name(t[i].dtype));
    }
    if (first < 0) return 0;
    if (r->device[0] && strcmp(r->device, t[first].device) != 0)
        return api_fail(e, 422, "device_mismatch", "device", "device=%s but tensor %s (tensor %s) is on %s", r->device,
                        t[first].id, names[first], t[first].device);
    snprintf(r->device, sizeof r->device, "%s", t[first].device);
    /* k [B, Hkv, Skv, D] and v [B, Hkv, Skv, Dv] agree but for the last dim (head_dim_v). */
    if (have[1] && have[2]) {
        for (i = 0; i < 3; i++)
            if (t[1].shape[i] != t[2].shape[i]) {
                tensors_shape_text(&t[1], a, sizeof a), tensors_shape_text(&t[2], b, sizeof b);
                return api_fail(e, 422, "shape_mismatch", "v",
                                "k (tensor %s) has shape %s but v (tensor %s) has shape %s: batch, heads and seq must agree",
                                t[1].id, a, t[2].id, b);
            }
    }
    /* q [B, H, Sq, D]: the batch, k's head_dim, and heads a multiple of K/V's (grouped-query). */
    if (have[0]) {
        int kv = have[1] ? 1 : have[2] ? 2 : -1;
        if (kv > 0 && (t[0].shape[0] != t[kv].shape[0] || t[0].shape[1] % t[kv].shape[1] != 0 ||
                       (kv == 1 && t[0].shape[3] != t[1].shape[3]))) {
            tensors_shape_text(&t[0], a, sizeof a), tensors_shape_text(&t[kv], b, sizeof b);
            return api_fail(e, 422, "shape_mismatch", names[kv],
                            "q (tensor %s) has shape %s but %s (tensor %s) has shape %s: the batch and head_dim must "
                            "agree, and q's heads be a multiple of %s's (grouped-query attention)",
                            t[0].id, a, names[kv], t[kv].id, b, names[kv]);
        }
    }
    {
        /* The problem from the tensors; parameters the client gave must agree. A side that is
         * generated follows the resident ones, or the parameters where they say nothing. */
        const tensor_entry *src = &t[first];
        int kvi = have[1] ? 1 : have[2] ? 2 : -1;
        int64_t B = src->shape[0];
        int64_t H = have[0] ? t[0].shape[1] : p->heads;
        int64_t Hkv = kvi >= 0 ? t[kvi].shape[1] : p->kv_heads > 0 ? p->kv_heads : H;
        int64_t D = have[0] ? t[0].shape[3] : have[1] ? t[1].shape[3] : p->head_dim;
        int64_t Dv = have[2] ? t[2].shape[3] : p->head_dim_v > 0 ? p->head_dim_v : D;
        int64_t Sq = have[0] ? t[0].shape[2] : -1, Skv = kvi >= 0 ? t[kvi].shape[2] : -1;
        struct {
            unsigned bit;
            const char *name;
            int64_t *field, value;
        } dims[] = {
            {RUN_GIVEN_BATCH, "batch", &p->batch, B},
            {RUN_GIVEN_HEADS, "heads", &p->heads, H},
            {RUN_GIVEN_KV_HEADS, "kv_heads", &p->kv_heads, Hkv},
            {RUN_GIVEN_SEQ_Q, "seq_q", &p->seq_q, Sq},
            {RUN_GIVEN_SEQ_KV, "seq_kv", &p->seq_kv, Skv},
            {RUN_GIVEN_HEAD_DIM, "head_dim", &p->head_dim, D},
            {RUN_GIVEN_HEAD_DIM_V, "head_dim_v", &p->head_dim_v, Dv},
        };
        /* A generated side follows the other's length unless given. */
        if (Sq < 0) Sq = (r->given & RUN_GIVEN_SEQ_Q) ? p->seq_q : Skv;
        if (Skv < 0) Skv = (r->given & RUN_GIVEN_SEQ_KV) ? p->seq_kv : Sq;
        dims[3].value = Sq, dims[4].value = Skv;
        for (i = 0; i < (int)(sizeof dims / sizeof dims[0]); i++) {
            int64_t now = i == 2 ? attn_kv_heads(p) : i == 6 ? attn_dv(p) : *dims[i].field;
            if ((r->given & dims[i].bit) && now != dims[i].value)
                return api_fail(e, 422, "shape_mismatch", dims[i].name, "%s=%lld disagrees with the tensors (%s %lld)",
                                dims[i].name, (long long)now, dims[i].name, (long long)dims[i].value);
            *dims[i].field = dims[i].value;
        }
        if (p->heads % attn_kv_heads(p) != 0)
            return api_fail(e, 422, "shape_mismatch", "kv_heads", "kv_heads %lld (the tensors') does not divide heads %lld",
                            (long long)attn_kv_heads(p), (long long)p->heads);
        if ((r->given & RUN_GIVEN_DTYPE) && p->dtype != src->dtype)
            return api_fail(e, 422, "dtype_mismatch", "dtype", "dtype=%s disagrees with tensor %s (tensor %s), which is %s",
                            attn_dtype_name(p->dtype), src->id, names[first], attn_dtype_name(src->dtype));
        p->dtype = src->dtype;
        if (!r->scale_given) p->scale = 1.0 / sqrt((double)p->head_dim);
    }
    return 0;
}

/* Bytes a run allocates on its device beyond the resident tensors it reads. */
static double tensors_run_bytes(const run_request *r)
{
    const attn_problem *p = &r->problem;
    const variant_info *v = variant_info_find(r->backend);
    double esz = (double)attn_dtype_bytes(p->dtype);
    double need = (double)attn_out_elems(p) * esz;
    if (!r->q_tensor[0]) need += (double)attn_q_elems(p) * esz;
    if (!r->k_tensor[0]) need += (double)attn_k_elems(p) * esz;
    if (!r->v_tensor[0]) need += (double)attn_v_elems(p) * esz;
    if (v && v->workspace_bound) need += (double)v->workspace_bound(p);
    return need;
}

/* The resident tensors a run reads, in pin order: q, k, v, the block table, the lengths ("" where
 * generated or given otherwise). */
#define RUN_INPUTS 6
static void tensors_run_inputs(const run_request *r, const char *ids[RUN_INPUTS])
{
    ids[0] = r->q_tensor, ids[1] = r->k_tensor, ids[2] = r->v_tensor, ids[3] = r->block_table_tensor;
    ids[4] = r->seqlens_q.kind == RUN_SEQLENS_TENSOR ? r->seqlens_q.tensor : "";
    ids[5] = r->seqlens_kv.kind == RUN_SEQLENS_TENSOR ? r->seqlens_kv.tensor : "";
}

/* Drop the pins tensors_prepare_run took on r's inputs (bit i of mask: tensors_run_inputs' i).
 * A tensor that left the table meanwhile (deleted as gone) has none to drop. Under the
 * table's lock. */
static void tensors_unpin_locked(const run_request *r, unsigned mask)
{
    const char *ids[RUN_INPUTS];
    int i;

    tensors_run_inputs(r, ids);
    for (i = 0; i < RUN_INPUTS; i++)
        if ((mask & (1u << i)) && ids[i][0]) tensor_table_unpin_locked(ids[i]);
}

int tensors_prepare_run(run_request *r, long long budget_bytes, api_error *e)
{
    static const char *const names[RUN_INPUTS] = {"q", "k", "v", "block_table", "seqlens_q", "seqlens_kv"};
    const char *ids[RUN_INPUTS];
    double need = tensors_run_bytes(r);
    unsigned pinned = 0;
    int i, rc = 0, out_issued = 0;

    tensors_run_inputs(r, ids);
    if (ids[0][0] || ids[1][0] || ids[2][0]) r->verify_cpu_max_macs = 0; /* GPU fp32 reference */
    if (tensor_table_reserve(r->device, need, budget_bytes, "the run", e) != 0) return -1;
    tensor_table_lock();
    /* Pin the inputs: from here to the run's end (tensors_finish_run) DELETE answers 409. A
     * tensor deleted since tensors_apply_run looked it up is not pinned: the run is refused. */
    for (i = 0; i < RUN_INPUTS && rc == 0; i++) {
        if (!ids[i][0]) continue;
        if (tensor_table_pin_locked(ids[i]) != 0) {
            rc = api_fail(e, 404, "not_found", names[i], "tensor %s (%s) was deleted while the run was being checked",
                          ids[i], names[i]);
            break;
        }
        pinned |= 1u << i;
    }
    if (rc == 0 && r->keep_output) { /* the output's id, held as a pending (unlisted) entry */
        tensor_entry t;
        memset(&t, 0, sizeof t);
        tensor_table_new_id_locked(r->output_tensor, sizeof r->output_tensor, r->device);
        out_issued = 1;
        snprintf(t.id, sizeof t.id, "%s", r->output_tensor);
        snprintf(t.name, sizeof t.name, "output of a run not finished yet");
        snprintf(t.device, sizeof t.device, "%s", r->device);
        t.generation = -1;
        t.pending = 1;
        if (tensor_table_take_slots_locked(1, 0, "keeping the output needs", e) != 0) {
            snprintf(e->field, sizeof e->field, "keep_output");
            rc = -1;
        } else { /* the room was made: the add cannot fail */
            tensor_table_return_slots_locked(1);
            (void)tensor_table_add_locked(&t);
        }
    }
    if (rc != 0) {
        tensors_unpin_locked(r, pinned);
        tensor_table_unreserve_locked(r->device, need);
    }
    tensor_table_unlock();
    if (rc != 0 && out_issued) {
        store_tensor_forget(strtoll(r->output_tensor + 1, NULL, 10));
        r->output_tensor[0] = '\0';
    }
    return rc;
}

void tensors_finish_run(const run_request *r, pool_run_outcome outcome, const cJSON *record, int generation)
{
    const cJSON *out = cJSON_GetObjectItem(record, "output");
    const cJSON *tensor = cJSON_GetObjectItem(out, "tensor"), *fp = cJSON_GetObjectItem(out, "fingerprint");
    const cJSON *id = cJSON_GetObjectItem(record, "id");
    const attn_problem *p = &r->problem;
    int has_output = r->keep_output && r->output_tensor[0];
    int kept = has_output && outcome == POOL_RUN_DONE && cJSON_IsString(tensor) &&
               !strcmp(tensor->valuestring, r->output_tensor);
    tensor_entry *at;

    tensor_table_lock();
    tensor_table_unreserve_locked(r->device, tensors_run_bytes(r));
    tensors_unpin_locked(r, (1u << RUN_INPUTS) - 1);
    at = has_output ? tensor_table_find_locked(r->output_tensor) : NULL;
    if (kept) { /* the worker holds it now: fill in the pending entry (re-add it if it went) */
        tensor_entry t;
        memset(&t, 0, sizeof t);
        snprintf(t.id, sizeof t.id, "%s", r->output_tensor);
        snprintf(t.name, sizeof t.name, "output of run %.0f", cJSON_IsNumber(id) ? id->valuedouble : 0.0);
        snprintf(t.device, sizeof t.device, "%s", r->device);
        t.generation = generation; /* the worker that ran it holds it */
        t.dtype = p->dtype;
        if (p->ragged) { /* packed, token-major: [total_q, heads, head_dim_v] */
            t.ndim = 3;
            t.shape[0] = p->total_q, t.shape[1] = p->heads, t.shape[2] = attn_dv(p);
        } else {
            t.ndim = 4;
            t.shape[0] = p->batch, t.shape[1] = p->heads, t.shape[2] = p->seq_q, t.shape[3] = attn_dv(p);
        }
        t.bytes = (uint64_t)attn_out_elems(p) * attn_dtype_bytes(p->dtype);
        snprintf(t.fingerprint, sizeof t.fingerprint, "%s", cJSON_IsString(fp) ? fp->valuestring : "");
        clock_text_now_iso(t.created, sizeof t.created);
        if (at)
            *at = t;
        else if (tensor_table_add_locked(&t) != 0)
            log_error("tensor table: no room for output tensor %s", t.id);
        tensor_table_publish_locked(r->device, generation);
    } else if (at && at->pending) { /* not done, or no output: its id is released */
        tensor_table_remove_locked(at);
    }
    tensor_table_unlock();
    if (has_output && !kept) store_tensor_forget(strtoll(r->output_tensor + 1, NULL, 10));
}
