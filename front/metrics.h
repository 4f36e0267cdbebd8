/* metrics.h — the counters and gauges of GET /metrics (Prometheus text format 0.0.4).
 *
 * Counters live here, updated by the front as things happen (thread-safe, never blocking on
 * I/O); gauges that the pool already knows (queue depth, workers up, restarts, GPU memory)
 * are read from it when the text is rendered. Every name starts with attnd_.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>

/* One answered HTTP request: route is the route table's pattern ("/v1/runs/{id}"), NULL
 * when no route matched (counted as route="unmatched"); status 0 when nothing was sent.
 * Labels come from the route table only: a method it does not have counts as "other". */
void metrics_http_request(const char *method, const char *route, int status);

/* A run reached its final state (done, failed, cancelled) on device. gpu_seconds: the
 * median forward time of a done run (timing.median_us / 1e6), < 0 when there is none. */
void metrics_run_finished(const char *backend, const char *device, const char *status, double gpu_seconds);

/* Bytes of resident tensors held on device; 0 until set. */
void metrics_set_tensor_bytes(const char *device, double bytes);

/* The whole exposition text, malloc'd (caller frees); NULL when out of memory. */
char *metrics_render(void);

#endif
