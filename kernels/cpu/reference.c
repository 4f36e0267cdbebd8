/* reference.c — the cpu reference of attention in fp64: the oracle `verify` trusts, and the
 * `reference` variant of the cpu device.
 *
 * Per (b, h) head, the k and v heads it reads (its K/V head under grouped-query attention)
 * are converted to double once; then for each query row: scores = scale · q·kᵀ over the
 * visible keys (attn_visible_range_seq: the mask and the sliding window leave a range of keys),
 * p = exp(s − max s), out = Σ p·v / Σ p. A fully masked row (no visible key) is zeros,
 * SDPA's safe softmax. Nothing here is approximate: every product and sum
 * is a double, so against bf16/fp16/fp32 outputs its own error is negligible.
 *
 * Ragged batches and paged caches: rows are found where the layout puts them (attn_q_row,
 * attn_kv_row: cu_seqlens, the block table), each sequence with its own lengths. The
 * arithmetic does not depend on where a row was read from, so a paged cache gives the bits
 * its contiguous twin gives.
 *
 * Parallel over items of up to REF_ROWS query rows of one head, handed out by an atomic
 * counter: causal rows differ in cost, and a few heads with long sequences still spread
 * over every core. A thread keeps its converted head while its next item is in the same
 * head (items are handed out in order, so usually it is). The threads are host_threads.c's
 * parked helpers, as many as the forward's work deserves (REF_MIN_MACS_PER_THREAD): a tiny
 * forward runs on the calling thread alone, as fast as waking a helper.
 */
#include "kernels/decomposed.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype_convert.h"
#include "kernels/exec_context.h"
#include "kernels/cpu/host_threads.h"

#define REF_ROWS 32 /* query rows per work item */
/* Multiply-adds a thread should get before another is woken: about 100 us of this code on
 * one core, several times what waking and joining a helper costs. */
#define REF_MIN_MACS_PER_THREAD ((double)(1 << 17))

/* Threads of the `reference` variant (reference_forward cannot see settings). */
static int reference_threads;

void reference_set_threads(int n) { reference_threads = n; }

typedef struct ref_job {
    const attn_problem *p;
    const void *q, *k, *v;
    double *out;
    int64_t items_per_head, items;
    int64_t *item_first; /* ragged: [batch + 1], sequence b's first item (its H heads' row chunks); else NULL */
    atomic_llong next;   /* the next unclaimed item */
} ref_job;

/* One thread's scratch: the converted k and v of one head, one q row, the scores. */
typedef struct ref_scratch {
    double *k, *v, *q, *s;
    int64_t kv_head;   /* (b·Hkv + hkv) held in k, v; -1: none */
} ref_scratch;

static int ref_scratch_alloc(ref_scratch *w, const attn_problem *p)
{
    w->k = malloc((size_t)p->seq_kv * (size_t)p->head_dim * sizeof(double));
    w->v = malloc((size_t)p->seq_kv * (size_t)attn_dv(p) * sizeof(double));
    w->q = malloc((size_t)p->head_dim * sizeof(double));
    w->s = malloc((size_t)p->seq_kv * sizeof(double));
    w->kv_head = -1;
    if (w->k && w->v && w->q && w->s) return 0;
    free(w->k), free(w->v), free(w->q), free(w->s);
    return -1;
}

static void ref_scratch_free(ref_scratch *w) { free(w->k), free(w->v), free(w->q), free(w->s); }

static void ref_convert(double *dst, const void *src, attn_dtype t, int64_t first, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++) dst[i] = (double)dtype_load_f32(src, t, first + i);
}

/* Keys 0..n-1 of sequence b, K/V head g, from k (or v: dim Dv) wherever the layout keeps them. */
static void ref_convert_keys(double *dst, const attn_problem *p, const void *src, int64_t b, int64_t g, int64_t n,
                             int64_t dim)
{
    int64_t j;
    for (j = 0; j < n; j++) ref_convert(dst + j * dim, src, p->dtype, attn_kv_row(p, b, g, j, dim), dim);
}

/* s_j = scale · q·k_j for keys j < n. Four keys at a time: four independent accumulator
 * chains instead of one (the loop is bound by add latency, not by arithmetic), while each
 * dot product still sums over c in order 0…d−1, exactly as the textbook loop does. */
static void ref_scores(const double *restrict q, const double *restrict k, int64_t d, int64_t n, double scale,
                       double *restrict s)
{
    int64_t j = 0, c;
    for (; j + 4 <= n; j += 4) {
        const double *k0 = k + j * d, *k1 = k0 + d, *k2 = k1 + d, *k3 = k2 + d;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        for (c = 0; c < d; c++) {
            a0 += q[c] * k0[c];
            a1 += q[c] * k1[c];
            a2 += q[c] * k2[c];
            a3 += q[c] * k3[c];
        }
        s[j] = scale * a0, s[j + 1] = scale * a1, s[j + 2] = scale * a2, s[j + 3] = scale * a3;
    }
    for (; j < n; j++) {
        const double *kj = k + j * d;
        double a = 0.0;
        for (c = 0; c < d; c++) a += q[c] * kj[c];
        s[j] = scale * a;
    }
}

/* o += Σ_j p_j · v_j over keys j < n, in order of j for every o_c (four keys per pass over
 * o, so o is loaded and stored a quarter as often). */
static void ref_weighted_sum(const double *restrict p, const double *restrict v, int64_t d, int64_t n,
                             double *restrict o)
{
    int64_t j = 0, c;
    for (; j + 4 <= n; j += 4) {
        const double *v0 = v + j * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
        double p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
        for (c = 0; c < d; c++) o[c] = o[c] + p0 * v0[c] + p1 * v1[c] + p2 * v2[c] + p3 * v3[c];
    }
    for (; j < n; j++) {
        const double *vj = v + j * d;
        for (c = 0; c < d; c++) o[c] += p[j] * vj[c];
    }
}

/* Rows [r0, r1) of head h of sequence b. */
static void ref_rows(const ref_job *job, ref_scratch *w, int64_t b, int64_t h, int64_t r0, int64_t r1)
{
    const attn_problem *p = job->p;
    int64_t sq = attn_seqlen_q(p, b), skv = attn_seqlen_kv(p, b), d = p->head_dim, dv = attn_dv(p), i, j, c;
    int64_t g = attn_kv_head_of(p, h), kv_head = b * attn_kv_heads(p) + g;

    if (w->kv_head != kv_head) {
        ref_convert_keys(w->k, p, job->k, b, g, skv, d);
        ref_convert_keys(w->v, p, job->v, b, g, skv, dv);
        w->kv_head = kv_head;
    }
    for (i = r0; i < r1; i++) {
        int64_t lo, hi, nvis;
        double *o = job->out + attn_q_row(p, b, h, i, dv);
        double mx = -INFINITY, sum = 0.0;

        attn_visible_range_seq(p, sq, skv, i, &lo, &hi);
        nvis = hi - lo;
        memset(o, 0, (size_t)dv * sizeof(double));
        if (nvis == 0) continue; /* fully masked: zeros */
        ref_convert(w->q, job->q, p->dtype, attn_q_row(p, b, h, i, d), d);
        ref_scores(w->q, w->k + lo * d, d, nvis, p->scale, w->s);
        for (j = 0; j < nvis; j++)
            if (w->s[j] > mx) mx = w->s[j];
        for (j = 0; j < nvis; j++) {
            w->s[j] = exp(w->s[j] - mx);
            sum += w->s[j];
        }
        ref_weighted_sum(w->s, w->v + lo * dv, dv, nvis, o);
        for (c = 0; c < dv; c++) o[c] /= sum;
    }
}

/* Item `item` as (sequence, head, first row): items go head by head, REF_ROWS rows each. */
static void ref_item(const ref_job *job, int64_t item, int64_t *b, int64_t *h, int64_t *r0)
{
    const attn_problem *p = job->p;
    int64_t per_head = job->items_per_head, lo = 0, hi = p->batch;

    if (job->item_first) { /* ragged: the sequence whose items hold it, by bisection */
        while (hi - lo > 1) {
            int64_t mid = (lo + hi) / 2;
            if (job->item_first[mid] <= item) lo = mid;
            else hi = mid;
        }
        *b = lo;
        item -= job->item_first[lo];
        per_head = (attn_seqlen_q(p, lo) + REF_ROWS - 1) / REF_ROWS;
        *h = item / per_head;
    } else {
        *b = item / per_head / p->heads;
        *h = item / per_head % p->heads;
    }
    *r0 = (item % per_head) * REF_ROWS;
}

static void ref_work(ref_job *job, ref_scratch *w)
{
    for (;;) {
        int64_t item = (int64_t)atomic_fetch_add(&job->next, 1);
        int64_t b, h, r0, r1, sq;
        if (item >= job->items) return;
        ref_item(job, item, &b, &h, &r0);
        sq = attn_seqlen_q(job->p, b);
        r1 = r0 + REF_ROWS < sq ? r0 + REF_ROWS : sq;
        ref_rows(job, w, b, h, r0, r1);
    }
}

/* One thread's part: it works if it gets its scratch; if not, it leaves the items to the
 * others (reference_attention_f64 fails only when no thread got any). */
static void ref_thread(void *arg)
{
    ref_job *job = arg;
    ref_scratch w;
    if (ref_scratch_alloc(&w, job->p) != 0) return;
    ref_work(job, &w);
    ref_scratch_free(&w);
}

int reference_attention_f64(const attn_problem *p, const void *q, const void *k, const void *v, double *out,
                            int threads)
{
    ref_job job;
    int64_t heads = p->batch * p->heads;
    double macs;

    if (heads <= 0 || p->seq_q <= 0 || p->head_dim <= 0) return 0;
    if (p->seq_kv <= 0) { /* no keys at all: every row is fully masked */
        memset(out, 0, (size_t)attn_out_elems(p) * sizeof(double));
        return 0;
    }
    job.p = p, job.q = q, job.k = k, job.v = v, job.out = out, job.item_first = NULL;
    job.items_per_head = (p->seq_q + REF_ROWS - 1) / REF_ROWS;
    job.items = heads * job.items_per_head;
    if (p->ragged) { /* each sequence its own rows: count its items */
        int64_t b;
        if (!(job.item_first = malloc((size_t)(p->batch + 1) * sizeof *job.item_first))) return -1;
        job.item_first[0] = 0;
        for (b = 0; b < p->batch; b++)
            job.item_first[b + 1] = job.item_first[b] + p->heads * ((attn_seqlen_q(p, b) + REF_ROWS - 1) / REF_ROWS);
        job.items = job.item_first[p->batch];
    }
    atomic_init(&job.next, 0);

    /* At most one thread per item, and per REF_MIN_MACS_PER_THREAD of work (unmasked: an
     * upper bound, so a causal forward may get twice the threads its work deserves). */
    macs = (double)heads * (double)p->seq_q * (double)p->seq_kv * (double)(p->head_dim + attn_dv(p));
    threads = host_threads_for_work(threads, macs, REF_MIN_MACS_PER_THREAD);
    if ((int64_t)threads > job.items) threads = (int)job.items;
    host_threads_run(threads, ref_thread, &job);
    free(job.item_first);
    /* No thread got its scratch: the items were never claimed. */
    return atomic_load(&job.next) >= job.items ? 0 : -1;
}

size_t reference_workspace_bytes(const attn_problem *p) { return (size_t)attn_out_elems(p) * sizeof(double); }

/* The fp64 result stays in the workspace (the cpu worker verifies against it); t->out gets
 * it rounded double → float → dtype. For bf16/fp16 that is a double rounding, which can
 * differ from one direct rounding in a last-bit tie; every GPU kernel rounds its fp32
 * accumulator the same way, so this is the rounding the outputs we compare with have. */
int reference_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    double *ref = workspace;
    int64_t n = attn_out_elems(p), i;

    if (reference_attention_f64(p, t->q, t->k, t->v, ref, reference_threads) != 0)
        return exec_fail(ctx, __FILE__, __LINE__, "reference_attention_f64", "out of host memory");
    for (i = 0; i < n; i++) dtype_store_f32(t->out, p->dtype, i, (float)ref[i]);
    return 0;
}
