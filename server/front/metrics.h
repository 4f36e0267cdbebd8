/* metrics.h — the counters and gauges of GET /metrics (Prometheus text format 0.0.4).
 *
 * Counters live here, updated by the front as things happen (thread-safe, never blocking on
 * I/O); gauges that the pool already knows (queue depth, workers up, restarts, GPU memory)
 * are read through the source it registers when the text is rendered. Every name starts
 * with attnd_.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>

#include "server/front/records.h"

/* One answered HTTP request, in the route table's labels (http_request_observer): method
 * ("GET", …, "other"), route ("/v1/runs/{id}", "unmatched"), status (0 when nothing was sent),
 * seconds from its head in to its answer queued (< 0: not known). */
void metrics_http_request(const char *method, const char *route, int status, double seconds);

/* A run reached its final state (done, failed, cancelled): counted by backend and status; a
 * done run's median forward time (rec->median_us) and any run's queue wait (rec->queue_wait_s)
 * go into their device's histograms. */
void metrics_observe_run(const run_record *rec);

/* A study reached its final state (done, failed, cancelled): counted by status. */
void metrics_observe_study(const char *status);

/* Studies waiting for their turn and running (0 or 1) now. */
void metrics_set_studies(int waiting, int running);

/* One device's gauges, as the pool knows them when /metrics is rendered. */
typedef struct metrics_device {
    char id[16];                /* "cpu", "cuda:N" */
    int queue_depth;            /* runs waiting */
    int up;                     /* 1 when its worker is up */
    int restarts;
    double memory_total_bytes;  /* from the worker's last hello; < 0 when unknown */
    double memory_free_bytes;
} metrics_device;

/* Fills out with up to max devices; returns how many. */
typedef int (*metrics_devices_fn)(metrics_device *out, int max);

/* Where the device gauges come from (the pool, at its start); without one, none. */
void metrics_set_device_source(metrics_devices_fn fn);

/* Bytes of resident tensors held on device; 0 until set. */
void metrics_set_tensor_bytes(const char *device, double bytes);

/* The whole exposition text, malloc'd (caller frees); NULL when out of memory. */
char *metrics_render(void);

#endif
