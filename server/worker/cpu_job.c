/* cpu_job.c — the cpu device (cpu_job.h): runs of cpu variants (`reference`) and
 * `verify` of GPU outputs against the fp64 reference.
 *
 * Host memory is checked before anything is allocated: a request that cannot fit is a
 * 413, never an OOM kill of the worker. Every path frees what it allocated.
 */
#include "server/worker/cpu_job.h"

#include "common/host_memory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/decomposed.h"
#include "kernels/cpu/host_threads.h"
#include "kernels/inputs.h"
#include "kernels/seq_layout.h"
#include "kernels/variants.h"
#include "server/worker/measure.h"
#include "server/worker/output_stats.h"
#include "server/worker/roofline.h"
#include "server/worker/tensors/tensors.h"

/* ---- the device object ------------------------------------------------------------ */

/* "model name" from /proc/cpuinfo (x86); other architectures name the CPU differently,
 * so fall back to the machine type from uname. */
static void cpu_model_name(char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];

    snprintf(buf, len, "unknown cpu");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
        break;
    }
    fclose(f);
}

cJSON *cpu_device_json(void)
{
    cJSON *d = cJSON_CreateObject();
    char name[256];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

    if (!d) return NULL;
    cpu_model_name(name, sizeof name);
    cJSON_AddStringToObject(d, "id", "cpu");
    cJSON_AddStringToObject(d, "kind", "cpu");
    cJSON_AddStringToObject(d, "name", name);
    cJSON_AddNumberToObject(d, "cores", cores > 0 ? (double)cores : 1.0);
    cJSON_AddNumberToObject(d, "memory_total_bytes", (pages > 0 && page > 0) ? (double)pages * (double)page : 0.0);
    return d;
}

/* ---- memory --------------------------------------------------------------------- */

/* The reference's per-thread scratch (reference.c): k and v of one head in double, one q
 * row, one row of scores. */
static double cpu_reference_scratch_bytes(const attn_problem *p, int threads)
{
    long n = threads > 0 ? threads : host_threads_cores();
    double per = 8.0 * ((double)p->seq_kv * (double)(p->head_dim + attn_dv(p)) + (double)p->seq_kv + (double)p->head_dim);
    return (double)(n > 0 ? n : 1) * per;
}

/* Host bytes of q, k, v and out as stored (a paged cache whole) and the layout's arrays. */
static double cpu_tensor_bytes(const attn_problem *p)
{
    double elems = (double)attn_q_elems(p) + (double)attn_k_elems(p) + (double)attn_v_elems(p) +
                   (double)attn_out_elems(p);
    return elems * (double)attn_dtype_bytes(p->dtype) + seq_layout_bytes(p);
}

static int cpu_check_fits(double need, api_error *e)
{
    double avail = host_memory_available_bytes();
    if (need > avail)
        return api_fail(e, 413, "too_large_for_device", "",
                        "the problem needs %.3g GB of host memory; the cpu device has %.3g GB available",
                        need / 1e9, avail / 1e9);
    return 0;
}

/* malloc that never returns NULL for 0 bytes, so NULL always means failure. */
static void *cpu_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }

/* ---- runs ----------------------------------------------------------------------- */

typedef struct cpu_job {
    const variant *v;
    const attn_problem *p;
    attn_tensors t;
    void *workspace;
} cpu_job;

static int cpu_forward(exec_context *ctx, void *arg)
{
    cpu_job *j = arg;
    return j->v->forward(ctx, j->p, &j->t, j->workspace);
}

/* The problem of r with its serving layout's arrays (cu_seqlens, block table) in *lay and
 * p->seqs pointing at them: what the variant, the reference and the work measures read. An
 * uploaded block table (block_table=tN) replaces the seeded one, once its entries are checked.
 * 0, or -1 with e (413; the block table's 410, 422, 400). Free with seq_layout_free. */
static int cpu_problem(const run_request *r, attn_problem *p, seq_layout *lay, api_error *e)
{
    const int32_t *table, *resident;
    int32_t *host_copy;
    int64_t width;

    *p = r->problem;
    if (seq_layout_build(lay, p, r->seqlens_q.len, r->seqlens_kv.len, r->seed) != 0)
        return api_fail(e, 413, "too_large_for_device", "", "host allocation of the block table and cu_seqlens "
                        "(%.3g GB) failed", seq_layout_bytes(p) / 1e9);
    if (!r->block_table_tensor[0] || p->page_size <= 0) return 0;
    if (worker_tensors_block_table(r, p, &table, &width, &resident, &host_copy, e) != 0) { /* host memory here: no copy */
        seq_layout_free(lay);
        return -1;
    }
    free(lay->block_table); /* the seeded one: the upload's stands in for it */
    lay->block_table = NULL;
    lay->seqs.block_table = table, lay->seqs.pages_per_seq = width;
    return 0;
}

/* q, k, v of p (cpu_problem's) from the seed, into fresh host buffers, in p's layout; an
 * input in `resident` (a resident tensor; NULL: none is) gets no buffer (NULL). Returns 0,
 * or -1 with e (413). */
static int cpu_make_inputs_except(const run_request *r, const attn_problem *p, const void *const resident[3], void **q,
                                  void **k, void **v, api_error *e)
{
    size_t esz = attn_dtype_bytes(p->dtype);
    size_t qb = (size_t)attn_q_elems(p) * esz, kb = (size_t)attn_k_elems(p) * esz, vb = (size_t)attn_v_elems(p) * esz;

    *q = *k = *v = NULL;
    if (!(resident && resident[0]) && !(*q = cpu_alloc(qb))) goto oom;
    if (!(resident && resident[1]) && !(*k = cpu_alloc(kb))) goto oom;
    if (!(resident && resident[2]) && !(*v = cpu_alloc(vb))) goto oom;
    inputs_generate_problem_cpu(p, r->seed, *q, *k, *v);
    return 0;
oom:
    free(*q), free(*k), free(*v);
    *q = *k = *v = NULL;
    return api_fail(e, 413, "too_large_for_device", "", "host allocation of the inputs (%.3g GB) failed",
                    (double)(qb + kb + vb) / 1e9);
}

cJSON *cpu_worker_run(const run_request *r, int threads, phases *ph, api_error *e)
{
    attn_problem problem = r->problem; /* cpu_problem adds the layout's arrays */
    const attn_problem *p = &problem;
    const variant *v = variant_find(r->backend);
    exec_context ctx;
    cpu_job job;
    timing_stats ts;
    output_summary os;
    verify_result vr;
    seq_layout lay;
    void *q = NULL, *k = NULL, *vv = NULL, *out = NULL, *ws = NULL;
    const void *resident[3] = {NULL, NULL, NULL};
    size_t esz = attn_dtype_bytes(p->dtype), out_bytes = (size_t)attn_out_elems(p) * esz, ws_bytes;
    cJSON *res = NULL;

    if (!v) {
        api_fail(e, 422, "unknown_backend", "backend", "no backend named '%s'", r->backend);
        return NULL;
    }
    if (!v->info->on_cpu) {
        api_fail(e, 422, "unsupported", "device", "backend %s runs on a GPU, not on the cpu device", v->info->name);
        return NULL;
    }
    if (run_request_check(r, 0, e) != 0) return NULL; /* the same check as the front's */
    ws_bytes = v->workspace_bytes ? v->workspace_bytes(p) : 0;
    if (cpu_check_fits(cpu_tensor_bytes(p) + (double)ws_bytes + cpu_reference_scratch_bytes(p, threads), e) != 0)
        return NULL;

    if (worker_tensors_inputs(r, &resident[0], &resident[1], &resident[2], e) != 0) return NULL;

    phases_mark(ph, "checks");
    reference_set_threads(threads);
    if (cpu_problem(r, &problem, &lay, e) != 0) return NULL;
    if (cpu_make_inputs_except(r, p, resident, &q, &k, &vv, e) != 0) {
        seq_layout_free(&lay);
        return NULL;
    }
    out = cpu_alloc(out_bytes);
    ws = cpu_alloc(ws_bytes);
    if (!out || !ws) {
        api_fail(e, 413, "too_large_for_device", "", "host allocation of the output and workspace (%.3g GB) failed",
                 (double)(out_bytes + ws_bytes) / 1e9);
        goto done;
    }

    memset(&ctx, 0, sizeof ctx); /* no stream, no handles: the cpu device */
    ctx.device = -1;
    job.v = v, job.p = p, job.workspace = ws;
    job.t.q = resident[0] ? resident[0] : q;
    job.t.k = resident[1] ? resident[1] : k;
    job.t.v = resident[2] ? resident[2] : vv;
    job.t.out = out;
    phases_mark(ph, "inputs");

    if (measure_cpu(&ctx, cpu_forward, &job, r, &ts) != 0) {
        api_fail(e, 500, "run_failed", "", "%s", ctx.error[0] ? ctx.error : "timing the forward failed");
        goto done;
    }
    phases_mark(ph, "measure");
    /* Poison, then one more forward: an element the variant never writes shows as NaN in
     * the summary instead of a stale value from the timed forwards. */
    memset(out, 0xFF, out_bytes);
    if (cpu_forward(&ctx, &job) != 0) {
        api_fail(e, 500, "run_failed", "", "%s", ctx.error[0] ? ctx.error : "the forward failed");
        goto done;
    }
    phases_mark(ph, "final_forward");
    output_summarize_cpu(out, p->dtype, attn_out_elems(p), &os);
    phases_mark(ph, "output");

    res = cJSON_CreateObject();
    if (!res) {
        api_fail(e, 500, "internal", "", "out of memory building the result");
        goto done;
    }
    cJSON_AddItemToObject(res, "timing", measure_stats_timing_json(&ts));
    cJSON_AddNullToObject(res, "kernels");
    cJSON_AddItemToObject(res, "output", output_to_json(&os, p));
    if (r->verify) {
        /* The variant left its unrounded fp64 result in the workspace: this checks the
         * rounding only, but keeps the schema the same as for GPU runs. */
        verify_compare_host(out, p->dtype, (const double *)ws, attn_out_elems(p), "cpu_fp64", &vr);
        cJSON_AddItemToObject(res, "verify", verify_to_json(&vr));
    } else {
        cJSON_AddNullToObject(res, "verify");
    }
    {
        cJSON *perf = measure_stats_perf_json(p, ts.median_us);
        /* The same fields as a GPU run's, null with the reason: the schema does not depend on the device. */
        if (perf) roofline_add_to_perf(perf, NULL, "the cpu device runs the fp64 reference: no peak table");
        cJSON_AddItemToObject(res, "perf", perf);
        ts.energy_j = NAN;
        ts.energy_window_ms = ts.total_ms;
        ts.energy_why = "the cpu device has no energy counter";
        cJSON_AddItemToObject(res, "energy", measure_stats_energy_json(&ts, attn_flops(p), 0.0, ""));
    }
    if (r->keep_output) { /* the output becomes a resident tensor */
        if (worker_tensors_keep_output(r, out, out_bytes, cJSON_GetObjectItem(res, "output"), e) != 0) {
            cJSON_Delete(res);
            res = NULL;
            goto done;
        }
        out = NULL;
    }
    phases_mark(ph, "report");

done:
    free(q), free(k), free(vv), free(out), free(ws);
    seq_layout_free(&lay);
    phases_mark(ph, "free");
    if (res) cJSON_AddItemToObject(res, "worker_ms", phases_json(ph));
    return res;
}

cJSON *cpu_worker_verify(const run_request *r, int fd, size_t bytes, int threads, api_error *e)
{
    attn_problem problem = r->problem; /* cpu_problem adds the layout's arrays */
    const attn_problem *p = &problem;
    seq_layout lay;
    int64_t n = attn_out_elems(p);
    size_t expect = (size_t)n * attn_dtype_bytes(p->dtype);
    void *q = NULL, *k = NULL, *v = NULL, *map = MAP_FAILED;
    double *ref = NULL;
    struct stat st;
    verify_result vr;
    cJSON *res = NULL;

    if (bytes != expect) {
        api_fail(e, 400, "bad_output_size", "", "the output has %zu bytes; [%lld,%lld,%lld,%lld] %s needs %zu",
                 bytes, (long long)p->batch, (long long)p->heads, (long long)p->seq_q, (long long)attn_dv(p),
                 attn_dtype_name(p->dtype), expect);
        return NULL;
    }
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (size_t)st.st_size < bytes) {
        api_fail(e, 400, "bad_output_size", "", "the output file holds fewer than the %zu bytes announced", bytes);
        return NULL;
    }
    if (cpu_check_fits(cpu_tensor_bytes(p) - (double)expect + 8.0 * (double)n + cpu_reference_scratch_bytes(p, threads),
                       e) != 0)
        return NULL;
    if (cpu_problem(r, &problem, &lay, e) != 0) return NULL;

    if (bytes > 0) {
        map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            api_fail(e, 500, "internal", "", "mmap of the output (%zu bytes) failed", bytes);
            seq_layout_free(&lay);
            return NULL;
        }
    }
    if (cpu_make_inputs_except(r, p, NULL, &q, &k, &v, e) != 0) goto done;
    ref = cpu_alloc((size_t)n * sizeof(double));
    if (!ref || reference_attention_f64(p, q, k, v, ref, threads) != 0) {
        api_fail(e, 413, "too_large_for_device", "", "host memory for the fp64 reference ran out");
        goto done;
    }
    verify_compare_host(bytes > 0 ? map : (const void *)ref, p->dtype, ref, n, "cpu_fp64", &vr);
    res = verify_to_json(&vr);
    if (!res) api_fail(e, 500, "internal", "", "out of memory building the verify object");

done:
    if (map != MAP_FAILED) munmap(map, bytes);
    free(q), free(k), free(v), free(ref);
    seq_layout_free(&lay);
    return res;
}
