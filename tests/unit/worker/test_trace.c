/* test_trace.c — profile_trace_json on hand-made CUPTI records: the Chrome trace-event
 * structure Perfetto and chrome://tracing need (metadata naming each process and lane,
 * complete events nested properly per pid/tid, one flow pair launch → GPU activity per
 * correlation id, timestamps from 0), without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "server/worker/profile_trace.h"

#include <cjson/cJSON.h>

static profile_event ev(profile_kind kind, const char *name, uint64_t start, uint64_t end, uint32_t corr,
                        uint32_t stream, uint32_t thread)
{
    profile_event e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    snprintf(e.name, sizeof e.name, "%s", name);
    e.start_ns = start;
    e.end_ns = end;
    e.correlation = corr;
    e.stream = stream;
    e.thread = thread;
    return e;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e300;
}

/* Metadata event `what` for (pid, tid): how many, and its args.name in name. */
static int count_meta(const cJSON *evs, const char *what, int pid, int tid, char *name, size_t len)
{
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str(e, "ph"), "M") || strcmp(str(e, "name"), what) || num(e, "pid") != pid) continue;
        if (tid >= 0 && num(e, "tid") != tid) continue;
        n++;
        if (name) snprintf(name, len, "%s", str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name"));
    }
    return n;
}

/* The X event named name; NULL when none. */
static const cJSON *find_x(const cJSON *evs, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
        if (!strcmp(str(e, "ph"), "X") && !strcmp(str(e, "name"), name)) return e;
    return NULL;
}

int main(void)
{
    /* One forward: two nested NVTX ranges and four API calls on CPU thread 7; a kernel, a
     * memset and a memcpy on stream 3, launched by three of the calls; a synchronize that
     * launched nothing. Times in ns, from an arbitrary origin. */
    profile_event events[] = {
        ev(PROFILE_NVTX, "attnd.forward", 101000, 109000, 0, 0, 7),
        ev(PROFILE_NVTX, "flash.fwd", 101500, 108000, 0, 0, 7),
        ev(PROFILE_API, "cudaLaunchKernel", 102000, 102500, 11, 0, 7),
        ev(PROFILE_API, "cudaMemsetAsync", 103000, 103200, 12, 0, 7),
        ev(PROFILE_API, "cudaMemcpyAsync", 104000, 104300, 13, 0, 7),
        ev(PROFILE_API, "cudaStreamSynchronize", 104400, 107900, 14, 0, 7),
        ev(PROFILE_MEMSET, "Memset", 103500, 103600, 12, 3, 0),
        ev(PROFILE_KERNEL, "flash_fwd_kernel<128>", 105000, 107000, 11, 3, 0),
        ev(PROFILE_MEMCPY, "Memcpy DtoD", 107100, 107600, 13, 3, 0),
    };
    const int nev = (int)(sizeof events / sizeof events[0]);
    profile_result p;
    cJSON *root, *again;
    const cJSON *evs, *e, *f;
    char name[128], *text;
    int n_x = 0, n_s = 0, n_f = 0, i;
    double min_ts = 1e300;

    memset(&p, 0, sizeof p);
    p.events = events;
    p.nevents = nev;
    root = profile_trace_json(&p, "NVIDIA H200");
    CHECK(root != NULL, "a trace");
    text = cJSON_PrintUnformatted(root);
    again = text ? cJSON_Parse(text) : NULL;
    CHECK(again != NULL, "prints as JSON that parses again");
    cJSON_Delete(again);
    free(text);

    evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    CHECK(cJSON_IsArray(evs), "traceEvents is an array");
    CHECK(!strcmp(str(root, "displayTimeUnit"), "ms") || !strcmp(str(root, "displayTimeUnit"), "ns"),
          "displayTimeUnit %s", str(root, "displayTimeUnit"));

    /* Metadata: each process named once; each lane named once. */
    CHECK(count_meta(evs, "process_name", 0, -1, name, sizeof name) == 1, "one CPU process name");
    CHECK(strstr(name, "CPU") != NULL, "CPU process is named so: %s", name);
    CHECK(count_meta(evs, "process_name", 1, -1, name, sizeof name) == 1, "one GPU process name");
    CHECK(!strcmp(name, "NVIDIA H200"), "GPU process carries the device name: %s", name);
    CHECK(count_meta(evs, "thread_name", 0, 7, name, sizeof name) == 1, "CPU thread 7 named once");
    CHECK(count_meta(evs, "thread_name", 1, 3, name, sizeof name) == 1, "stream 3 named once");
    CHECK(strstr(name, "stream") != NULL, "stream lane name: %s", name);
    CHECK(count_meta(evs, "thread_name", 0, -1, NULL, 0) == 1 && count_meta(evs, "thread_name", 1, -1, NULL, 0) == 1,
          "one lane per process");

    /* Every record became one complete event on its lane, with its category. */
    cJSON_ArrayForEach(e, evs) {
        const char *ph = str(e, "ph");
        CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "pid")) &&
                  cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "tid")),
              "pid and tid on every event");
        if (!strcmp(ph, "X")) {
            n_x++;
            CHECK(num(e, "ts") >= 0 && num(e, "dur") >= 0, "ts %g dur %g", num(e, "ts"), num(e, "dur"));
            if (num(e, "ts") < min_ts) min_ts = num(e, "ts");
        } else if (!strcmp(ph, "s")) {
            n_s++;
        } else if (!strcmp(ph, "f")) {
            n_f++;
            CHECK(!strcmp(str(e, "bp"), "e"), "a flow end binds to its enclosing slice (bp e)");
        } else {
            CHECK(!strcmp(ph, "M"), "only X, s, f and M events, got %s", ph);
        }
    }
    CHECK(n_x == nev, "%d complete events for %d records", n_x, nev);
    CHECK(min_ts == 0.0, "time starts at 0 (first event), got %g", min_ts);
    for (i = 0; i < nev; i++) {
        const cJSON *x = find_x(evs, events[i].name);
        int gpu = events[i].kind >= PROFILE_KERNEL;
        const char *cat = events[i].kind == PROFILE_KERNEL   ? "kernel"
                          : events[i].kind == PROFILE_MEMCPY ? "gpu_memcpy"
                          : events[i].kind == PROFILE_MEMSET ? "gpu_memset"
                          : events[i].kind == PROFILE_API    ? "cuda_api"
                                                             : "user_annotation";
        CHECK(x != NULL, "event %s", events[i].name);
        if (!x) continue;
        CHECK(num(x, "pid") == (gpu ? 1 : 0) && num(x, "tid") == (gpu ? 3 : 7), "%s on its lane (pid %g tid %g)",
              events[i].name, num(x, "pid"), num(x, "tid"));
        CHECK(!strcmp(str(x, "cat"), cat), "%s: cat %s, want %s", events[i].name, str(x, "cat"), cat);
        CHECK(fabs(num(x, "ts") - (double)(events[i].start_ns - 101000) / 1000.0) < 1e-9, "%s: ts %g µs",
              events[i].name, num(x, "ts"));
        CHECK(fabs(num(x, "dur") - (double)(events[i].end_ns - events[i].start_ns) / 1000.0) < 1e-9, "%s: dur %g µs",
              events[i].name, num(x, "dur"));
    }

    /* Nesting per lane: two complete events of one pid/tid are disjoint or one holds the other. */
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str(e, "ph"), "X")) continue;
        cJSON_ArrayForEach(f, evs) {
            double a0, a1, b0, b1;
            if (f == e || strcmp(str(f, "ph"), "X") || num(e, "pid") != num(f, "pid") || num(e, "tid") != num(f, "tid"))
                continue;
            a0 = num(e, "ts"), a1 = a0 + num(e, "dur"), b0 = num(f, "ts"), b1 = b0 + num(f, "dur");
            CHECK(a1 <= b0 || b1 <= a0 || (a0 <= b0 && b1 <= a1) || (b0 <= a0 && a1 <= b1),
                  "%s [%g,%g] and %s [%g,%g] overlap without nesting", str(e, "name"), a0, a1, str(f, "name"), b0, b1);
        }
    }

    /* Flows: one s/f pair per launched GPU activity (3; the synchronize launched nothing),
     * s on the launching call's lane at its start, f on the activity's lane at its start. */
    CHECK(n_s == 3 && n_f == 3, "three flow pairs, got %d s and %d f", n_s, n_f);
    cJSON_ArrayForEach(e, evs) {
        int pairs = 0;
        const cJSON *api = NULL, *gpu = NULL;
        if (strcmp(str(e, "ph"), "s")) continue;
        CHECK(num(e, "pid") == 0 && num(e, "tid") == 7, "flow starts on the CPU lane");
        cJSON_ArrayForEach(f, evs)
            if (!strcmp(str(f, "ph"), "f") && num(f, "id") == num(e, "id")) pairs++, gpu = f;
        CHECK(pairs == 1, "flow id %g has exactly one end (%d)", num(e, "id"), pairs);
        for (i = 0; i < nev; i++)
            if (events[i].correlation == (uint32_t)num(e, "id") && events[i].kind == PROFILE_API)
                api = find_x(evs, events[i].name);
        CHECK(api != NULL, "flow %g starts at a launching API call", num(e, "id"));
        if (api) CHECK(num(e, "ts") >= num(api, "ts") && num(e, "ts") <= num(api, "ts") + num(api, "dur"),
                       "flow %g starts inside its API call", num(e, "id"));
        if (gpu) {
            CHECK(num(gpu, "pid") == 1 && num(gpu, "tid") == 3, "flow ends on the GPU lane");
            CHECK(num(gpu, "ts") >= num(e, "ts"), "flow %g goes forward in time", num(e, "id"));
            CHECK(!strcmp(str(gpu, "cat"), str(e, "cat")) && !strcmp(str(gpu, "name"), str(e, "name")),
                  "flow ends match their start (cat and name)");
        }
        CHECK(num(e, "id") != 14, "no flow from a call that launched nothing");
    }
    cJSON_Delete(root);

    /* No events: still a valid trace with the process names. */
    memset(&p, 0, sizeof p);
    root = profile_trace_json(&p, NULL);
    evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    CHECK(cJSON_IsArray(evs) && cJSON_GetArraySize(evs) == 2, "an empty trace holds the two process names");
    cJSON_Delete(root);
    return CHECK_DONE();
}
