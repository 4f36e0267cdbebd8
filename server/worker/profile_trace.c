/* profile_trace.c — one profiled forward as a Chrome trace-event document (profile_trace.h):
 * what GET /v1/runs/ID/trace answers, built from the events profile.c kept.
 */
#include "server/worker/profile_trace.h"

#include <stdint.h>
#include <stdio.h>

static cJSON *profile_trace_meta(const char *what, int pid, uint32_t tid, const char *name)
{
    cJSON *e = cJSON_CreateObject(), *args;
    if (!e) return NULL;
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddStringToObject(e, "name", what);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    args = cJSON_AddObjectToObject(e, "args");
    if (args) cJSON_AddStringToObject(args, "name", name);
    return e;
}

static cJSON *profile_trace_event(const char *ph, const char *cat, const char *name, int pid, uint32_t tid,
                                  double ts_us)
{
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    cJSON_AddStringToObject(e, "ph", ph);
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddNumberToObject(e, "ts", ts_us);
    return e;
}

cJSON *profile_trace_json(const profile_result *p, const char *device_name)
{
    enum { PID_CPU = 0, PID_GPU = 1 };
    cJSON *root = cJSON_CreateObject(), *evs;
    uint64_t t0 = UINT64_MAX;
    int i, j;
    char lane[64];
    if (!root) return NULL;
    evs = cJSON_AddArrayToObject(root, "traceEvents");
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    if (!evs) return root;
    for (i = 0; i < p->nevents; i++)
        if (p->events[i].start_ns < t0) t0 = p->events[i].start_ns;

    cJSON_AddItemToArray(evs, profile_trace_meta("process_name", PID_CPU, 0, "attnd worker (CPU)"));
    cJSON_AddItemToArray(evs, profile_trace_meta("process_name", PID_GPU, 0, device_name ? device_name : "GPU"));
    for (i = 0; i < p->nevents; i++) {
        const profile_event *ev = &p->events[i];
        int gpu = ev->kind >= PROFILE_KERNEL;
        uint32_t tid = gpu ? ev->stream : ev->thread;
        const char *cat = ev->kind == PROFILE_KERNEL   ? "kernel"
                          : ev->kind == PROFILE_MEMCPY ? "gpu_memcpy"
                          : ev->kind == PROFILE_MEMSET ? "gpu_memset"
                          : ev->kind == PROFILE_API    ? "cuda_api"
                                                       : "user_annotation";
        double ts = (double)(ev->start_ns - t0) * 1e-3;
        cJSON *e = profile_trace_event("X", cat, ev->name, gpu ? PID_GPU : PID_CPU, tid, ts), *args;
        if (!e) break;
        cJSON_AddNumberToObject(e, "dur", ev->end_ns > ev->start_ns ? (double)(ev->end_ns - ev->start_ns) * 1e-3 : 0.0);
        args = cJSON_AddObjectToObject(e, "args");
        if (args && ev->kind != PROFILE_NVTX) cJSON_AddNumberToObject(args, "correlation", ev->correlation);
        if (args && gpu) cJSON_AddNumberToObject(args, "stream", ev->stream);
        cJSON_AddItemToArray(evs, e);

        /* Lane names, once per lane. */
        for (j = 0; j < i; j++) {
            const profile_event *o = &p->events[j];
            if ((o->kind >= PROFILE_KERNEL) == gpu && (gpu ? o->stream : o->thread) == tid) break;
        }
        if (j == i) {
            snprintf(lane, sizeof lane, gpu ? "stream %u" : "thread %u", (unsigned)tid);
            cJSON_AddItemToArray(evs, profile_trace_meta("thread_name", gpu ? PID_GPU : PID_CPU, tid, lane));
        }

        /* Flow arrow from the launching API call to this GPU activity. */
        if (gpu) {
            for (j = 0; j < p->nevents; j++)
                if (p->events[j].kind == PROFILE_API && p->events[j].correlation == ev->correlation) break;
            if (j < p->nevents) {
                const profile_event *api = &p->events[j];
                cJSON *s = profile_trace_event("s", "ac2g", "ac2g", PID_CPU, api->thread,
                                               (double)(api->start_ns - t0) * 1e-3);
                cJSON *f = profile_trace_event("f", "ac2g", "ac2g", PID_GPU, tid, ts);
                if (s) cJSON_AddNumberToObject(s, "id", ev->correlation), cJSON_AddItemToArray(evs, s);
                if (f) {
                    cJSON_AddNumberToObject(f, "id", ev->correlation);
                    cJSON_AddStringToObject(f, "bp", "e");
                    cJSON_AddItemToArray(evs, f);
                }
            }
        }
    }
    return root;
}
