/* metrics.c — GET /metrics (metrics.h).
 *
 * Small fixed tables under one mutex: the label sets are few (routes × statuses, backends ×
 * statuses, devices), so a linear search is cheaper than anything cleverer. A label set that
 * finds no free row is dropped and counted in attnd_metrics_dropped_total, never blocking
 * or allocating on the request path.
 *
 * The request labels come from the route table only, never from what a client sent (the
 * HTTP layer hands them over: http_request_observer), so junk (made-up methods and paths,
 * unauthenticated floods) shares a handful of rows and can never crowd out real routes.
 */
#include "server/front/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "common/grow.h"
#include "server/front/store/store.h"

#define METRICS_ROWS 256
/* Request label sets: routes (+ HEAD of GET routes) and the few methods of "unmatched",
 * times the statuses the server answers (about 20): well under this. */
#define METRICS_HTTP_ROWS 1024
#define METRICS_DEVICES 72
static const double metrics_buckets[] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5, 30};
#define METRICS_NBUCKETS (sizeof metrics_buckets / sizeof metrics_buckets[0])

typedef struct http_row {
    char method[8], route[64];
    int status;
    unsigned long long n;
} http_row;

typedef struct run_row {
    char backend[32], status[16];
    unsigned long long n;
} run_row;

/* One histogram's label set (two labels; the second empty for one-label families). */
typedef struct hist_row {
    char a[64], b[32];
    unsigned long long bucket[METRICS_NBUCKETS]; /* non-cumulative; summed when rendered */
    unsigned long long count;
    double sum;
} hist_row;

typedef struct hist_table {
    hist_row rows[METRICS_ROWS];
    int n;
} hist_table;

typedef struct tensor_row {
    char device[16];
    double bytes;
} tensor_row;

static pthread_mutex_t metrics_mu = PTHREAD_MUTEX_INITIALIZER;
static http_row metrics_http[METRICS_HTTP_ROWS];
static int metrics_nhttp;
static run_row metrics_runs[METRICS_ROWS];
static int metrics_nruns;
static hist_table metrics_run_seconds;   /* (backend, device): a done run's median forward */
static hist_table metrics_http_seconds;  /* (method, route): a request's head in to its answer queued */
static hist_table metrics_queue_seconds; /* (device, ""): a run's wait in its device's queue */
static tensor_row metrics_tensors[METRICS_DEVICES];
static int metrics_ntensors;
static unsigned long long metrics_dropped;
static unsigned long long metrics_studies[3]; /* done, failed, cancelled */
static int metrics_studies_waiting, metrics_studies_running;

/* Count seconds into the row of (a, b) of table, made when new. Under metrics_mu. */
static void hist_observe_locked(hist_table *table, const char *a, const char *b, double seconds)
{
    hist_row *h;
    size_t k;
    int i;

    for (i = 0; i < table->n; i++)
        if (!strcmp(table->rows[i].a, a) && !strcmp(table->rows[i].b, b)) break;
    if (i == METRICS_ROWS) {
        metrics_dropped++;
        return;
    }
    h = &table->rows[i];
    if (i == table->n) {
        memset(h, 0, sizeof *h);
        snprintf(h->a, sizeof h->a, "%s", a);
        snprintf(h->b, sizeof h->b, "%s", b);
        table->n++;
    }
    for (k = 0; k < METRICS_NBUCKETS; k++)
        if (seconds <= metrics_buckets[k]) {
            h->bucket[k]++;
            break;
        }
    h->count++; /* above the last bucket: only in +Inf (count) */
    h->sum += seconds;
}

void metrics_http_request(const char *method, const char *route, int status, double seconds)
{
    int i;

    if (status < 0 || status > 999) status = 0; /* the label is a 3-digit code */
    pthread_mutex_lock(&metrics_mu);
    for (i = 0; i < metrics_nhttp; i++) {
        http_row *r = &metrics_http[i];
        if (r->status == status && !strcmp(r->route, route) && !strcmp(r->method, method)) break;
    }
    if (i == metrics_nhttp && i < METRICS_HTTP_ROWS) {
        snprintf(metrics_http[i].method, sizeof metrics_http[i].method, "%s", method);
        snprintf(metrics_http[i].route, sizeof metrics_http[i].route, "%s", route);
        metrics_http[i].status = status;
        metrics_nhttp++;
    }
    if (i < METRICS_HTTP_ROWS)
        metrics_http[i].n++;
    else
        metrics_dropped++;
    if (seconds >= 0) hist_observe_locked(&metrics_http_seconds, method, route, seconds);
    pthread_mutex_unlock(&metrics_mu);
}

static metrics_devices_fn metrics_devices_source; /* set once, before the server answers */

void metrics_set_device_source(metrics_devices_fn fn) { metrics_devices_source = fn; }

void metrics_observe_run(const run_record *rec)
{
    const char *backend = rec->request.backend, *device = rec->request.device;
    const char *status = run_status_name(rec->status);
    double gpu_seconds = rec->status == RUN_DONE && rec->median_us >= 0 ? rec->median_us * 1e-6 : -1.0;
    int i;

    pthread_mutex_lock(&metrics_mu);
    for (i = 0; i < metrics_nruns; i++)
        if (!strcmp(metrics_runs[i].backend, backend) && !strcmp(metrics_runs[i].status, status)) break;
    if (i == metrics_nruns && i < METRICS_ROWS) {
        snprintf(metrics_runs[i].backend, sizeof metrics_runs[i].backend, "%s", backend);
        snprintf(metrics_runs[i].status, sizeof metrics_runs[i].status, "%s", status);
        metrics_nruns++;
    }
    if (i < METRICS_ROWS)
        metrics_runs[i].n++;
    else
        metrics_dropped++;

    if (gpu_seconds >= 0) hist_observe_locked(&metrics_run_seconds, backend, device, gpu_seconds);
    if (rec->queue_wait_s >= 0) hist_observe_locked(&metrics_queue_seconds, device, "", rec->queue_wait_s);
    pthread_mutex_unlock(&metrics_mu);
}

static const char *const metrics_study_statuses[3] = {"done", "failed", "cancelled"};

void metrics_observe_study(const char *status)
{
    int i;

    pthread_mutex_lock(&metrics_mu);
    for (i = 0; i < 3; i++)
        if (!strcmp(status, metrics_study_statuses[i])) metrics_studies[i]++;
    pthread_mutex_unlock(&metrics_mu);
}

void metrics_set_studies(int waiting, int running)
{
    pthread_mutex_lock(&metrics_mu);
    metrics_studies_waiting = waiting;
    metrics_studies_running = running;
    pthread_mutex_unlock(&metrics_mu);
}

void metrics_set_tensor_bytes(const char *device, double bytes)
{
    int i;

    if (!device) return;
    pthread_mutex_lock(&metrics_mu);
    for (i = 0; i < metrics_ntensors; i++)
        if (!strcmp(metrics_tensors[i].device, device)) break;
    if (i == metrics_ntensors && i < METRICS_DEVICES) {
        snprintf(metrics_tensors[i].device, sizeof metrics_tensors[i].device, "%s", device);
        metrics_ntensors++;
    }
    if (i < METRICS_DEVICES)
        metrics_tensors[i].bytes = bytes;
    else
        metrics_dropped++;
    pthread_mutex_unlock(&metrics_mu);
}

/* ------------------------------------------------------------------------ rendering -- */

typedef struct text_buf {
    char *p;
    size_t len, cap;
    int oom;
} text_buf;

static void tb_printf(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(text_buf *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->oom) return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        if (grow_array(&t->p, &t->cap, t->len + (size_t)n + 1, 1, 4096) != 0) {
            t->oom = 1;
            return;
        }
    }
}

/* A label value escaped as the format requires: \\ \" \n. */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t n = 0;

    for (; s && *s && n + 3 < len; s++) {
        if (*s == '\\' || *s == '"') {
            buf[n++] = '\\';
            buf[n++] = *s;
        } else if (*s == '\n') {
            buf[n++] = '\\';
            buf[n++] = 'n';
        } else {
            buf[n++] = *s;
        }
    }
    buf[n] = '\0';
    return buf;
}

static void header(text_buf *t, const char *name, const char *type, const char *help)
{
    tb_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The per-device gauges, from the pool's source (its workers' last hellos). */
static void render_devices(text_buf *t)
{
    metrics_device devices[METRICS_DEVICES];
    int n = metrics_devices_source ? metrics_devices_source(devices, METRICS_DEVICES) : 0, i;
    char a[64];

    header(t, "attnd_queue_depth", "gauge", "Jobs waiting in the queue of a device.");
    for (i = 0; i < n; i++)
        tb_printf(t, "attnd_queue_depth{device=\"%s\"} %d\n", esc(devices[i].id, a, sizeof a), devices[i].queue_depth);
    header(t, "attnd_workers_up", "gauge", "1 when the worker of a device is up, else 0.");
    for (i = 0; i < n; i++)
        tb_printf(t, "attnd_workers_up{device=\"%s\"} %d\n", esc(devices[i].id, a, sizeof a), devices[i].up);
    header(t, "attnd_worker_restarts_total", "counter", "Times the worker of a device was restarted.");
    for (i = 0; i < n; i++)
        tb_printf(t, "attnd_worker_restarts_total{device=\"%s\"} %d\n", esc(devices[i].id, a, sizeof a),
                  devices[i].restarts);
    header(t, "attnd_gpu_memory_total_bytes", "gauge", "Memory of a GPU, from its worker's last hello.");
    for (i = 0; i < n; i++) {
        if (!strcmp(devices[i].id, "cpu") || devices[i].memory_total_bytes < 0) continue;
        tb_printf(t, "attnd_gpu_memory_total_bytes{device=\"%s\"} %.0f\n", esc(devices[i].id, a, sizeof a),
                  devices[i].memory_total_bytes);
    }
    header(t, "attnd_gpu_memory_used_bytes", "gauge",
           "Memory of a GPU in use (total - free), from its worker's last hello.");
    for (i = 0; i < n; i++) {
        const metrics_device *d = &devices[i];
        if (!strcmp(d->id, "cpu") || d->memory_total_bytes < 0 || d->memory_free_bytes < 0) continue;
        tb_printf(t, "attnd_gpu_memory_used_bytes{device=\"%s\"} %.0f\n", esc(d->id, a, sizeof a),
                  d->memory_total_bytes - d->memory_free_bytes);
    }
}

/* The rows of table as histogram family name with labels la (and lb, when given), those whose
 * row passes keep (NULL: all). Under metrics_mu. */
static void render_histogram(text_buf *t, const hist_table *table, const char *name, const char *help,
                             const char *la, const char *lb, int (*keep)(const hist_row *))
{
    char a[96], b[96], labels[256];
    int i;
    size_t k;

    header(t, name, "histogram", help);
    for (i = 0; i < table->n; i++) {
        const hist_row *h = &table->rows[i];
        unsigned long long cum = 0;
        if (keep && !keep(h)) continue;
        if (lb)
            snprintf(labels, sizeof labels, "%s=\"%s\",%s=\"%s\"", la, esc(h->a, a, sizeof a), lb,
                     esc(h->b, b, sizeof b));
        else
            snprintf(labels, sizeof labels, "%s=\"%s\"", la, esc(h->a, a, sizeof a));
        for (k = 0; k < METRICS_NBUCKETS; k++) {
            cum += h->bucket[k];
            tb_printf(t, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, metrics_buckets[k], cum);
        }
        tb_printf(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, h->count);
        tb_printf(t, "%s_sum{%s} %.9g\n", name, labels, h->sum);
        tb_printf(t, "%s_count{%s} %llu\n", name, labels, h->count);
    }
}

static int on_gpu(const hist_row *h) { return strcmp(h->b, "cpu") != 0; }
static int on_cpu(const hist_row *h) { return strcmp(h->b, "cpu") == 0; }

/* Where the history goes, how far behind the fleet database is, and whether this machine's
 * file takes writes (read outside metrics_mu: the outbox depth is a query of the local file). */
static void render_store(text_buf *t)
{
    store_health h;
    char a[96], b[96];

    store_get_health(&h);
    esc(h.backend, a, sizeof a);
    esc(store_node(), b, sizeof b);
    header(t, "attnd_store_up", "gauge",
           "1 when the history's database took the last write (sqlite: the file takes writes), else 0.");
    tb_printf(t, "attnd_store_up{backend=\"%s\",node=\"%s\"} %d\n", a, b, h.database_up);
    header(t, "attnd_store_outbox_depth", "gauge", "Writes waiting in this node's outbox for the fleet database.");
    tb_printf(t, "attnd_store_outbox_depth{backend=\"%s\",node=\"%s\"} %lld\n", a, b, h.outbox_depth);
    header(t, "attnd_store_outbox_sent_total", "counter", "Writes the outbox delivered to the fleet database.");
    tb_printf(t, "attnd_store_outbox_sent_total{backend=\"%s\",node=\"%s\"} %lld\n", a, b, h.outbox_sent);
    header(t, "attnd_store_outbox_failures_total", "counter", "Attempts to send the outbox that found the database away.");
    tb_printf(t, "attnd_store_outbox_failures_total{backend=\"%s\",node=\"%s\"} %lld\n", a, b, h.outbox_failures);
    header(t, "attnd_store_write_failures_total", "counter",
           "Writes this node's store file (data_dir/attnd.db) refused, e.g. for a full disk.");
    tb_printf(t, "attnd_store_write_failures_total{backend=\"%s\",node=\"%s\"} %lld\n", a, b, h.write_failures);
    header(t, "attnd_store_pending_records", "gauge",
           "Run records the store file refused, waiting to be written: journaled (data_dir/attnd.pending) or in "
           "memory only.");
    tb_printf(t, "attnd_store_pending_records{backend=\"%s\",node=\"%s\",kept=\"journal\"} %lld\n", a, b,
              h.pending_records - h.pending_in_memory);
    tb_printf(t, "attnd_store_pending_records{backend=\"%s\",node=\"%s\",kept=\"memory\"} %lld\n", a, b,
              h.pending_in_memory);
}

char *metrics_render(void)
{
    text_buf t = {malloc(8192), 0, 8192, 0};
    char a[96], b[96];
    int i;

    if (!t.p) return NULL;
    t.p[0] = '\0';
    render_devices(&t);
    render_store(&t);

    pthread_mutex_lock(&metrics_mu);
    header(&t, "attnd_runs_total", "counter", "Runs that reached a final state, by backend and status.");
    for (i = 0; i < metrics_nruns; i++)
        tb_printf(&t, "attnd_runs_total{backend=\"%s\",status=\"%s\"} %llu\n",
                  esc(metrics_runs[i].backend, a, sizeof a), esc(metrics_runs[i].status, b, sizeof b),
                  metrics_runs[i].n);

    /* GPU time (CUDA events) and the cpu device's wall time are two families: one name for
     * both would let a dashboard add seconds of different clocks. */
    render_histogram(&t, &metrics_run_seconds, "attnd_run_gpu_seconds",
                     "Median forward time of done runs on GPUs (timing.median_us, CUDA events), seconds.", "backend",
                     "device", on_gpu);
    render_histogram(&t, &metrics_run_seconds, "attnd_run_cpu_seconds",
                     "Median forward time of done runs on the cpu device (timing.median_us, wall clock), seconds.",
                     "backend", "device", on_cpu);
    render_histogram(&t, &metrics_queue_seconds, "attnd_queue_wait_seconds",
                     "Seconds runs waited in their device's queue before their worker took them.", "device", NULL,
                     NULL);

    header(&t, "attnd_studies_total", "counter", "Studies that reached a final state, by status.");
    for (i = 0; i < 3; i++)
        tb_printf(&t, "attnd_studies_total{status=\"%s\"} %llu\n", metrics_study_statuses[i], metrics_studies[i]);
    header(&t, "attnd_studies", "gauge", "Studies waiting for their turn (state=\"queued\") and running.");
    tb_printf(&t, "attnd_studies{state=\"queued\"} %d\n", metrics_studies_waiting);
    tb_printf(&t, "attnd_studies{state=\"running\"} %d\n", metrics_studies_running);

    header(&t, "attnd_build_info", "gauge", "The build serving: always 1, labelled with its version and commit.");
    tb_printf(&t, "attnd_build_info{version=\"%s\",commit=\"%s\"} 1\n", esc(build_info_version(), a, sizeof a),
              esc(build_info_commit(), b, sizeof b));

    header(&t, "attnd_resident_tensor_bytes", "gauge", "Bytes of resident tensors held on a device.");
    for (i = 0; i < metrics_ntensors; i++)
        tb_printf(&t, "attnd_resident_tensor_bytes{device=\"%s\"} %.0f\n",
                  esc(metrics_tensors[i].device, a, sizeof a), metrics_tensors[i].bytes);
    if (metrics_ntensors == 0) tb_printf(&t, "attnd_resident_tensor_bytes{device=\"cpu\"} 0\n");

    header(&t, "attnd_http_requests_total", "counter", "HTTP requests answered, by method, route and status.");
    for (i = 0; i < metrics_nhttp; i++)
        tb_printf(&t, "attnd_http_requests_total{method=\"%s\",route=\"%s\",status=\"%d\"} %llu\n",
                  esc(metrics_http[i].method, a, sizeof a), esc(metrics_http[i].route, b, sizeof b),
                  metrics_http[i].status, metrics_http[i].n);

    render_histogram(&t, &metrics_http_seconds, "attnd_http_request_duration_seconds",
                     "Seconds from a request's head in to its answer queued, by method and route.", "method", "route",
                     NULL);

    header(&t, "attnd_metrics_dropped_total", "counter", "Updates dropped because a metrics table was full.");
    tb_printf(&t, "attnd_metrics_dropped_total %llu\n", metrics_dropped);
    pthread_mutex_unlock(&metrics_mu);

    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
