/* profile_trace.h — the Chrome/Perfetto trace of one profiled forward (profile.h's events). */
#ifndef PROFILE_TRACE_H
#define PROFILE_TRACE_H

#include <cjson/cJSON.h>

#include "server/worker/profile.h"

/* The raw events as a Chrome/Perfetto trace: {"traceEvents":[…],"displayTimeUnit":"ms"}.
 * CPU lanes (pid 0, tid = thread) hold API calls and NVTX ranges, GPU lanes (pid 1, tid =
 * stream) kernels and memops, with a flow arrow from each launch to its GPU activity; ts in
 * µs from the first event. device_name labels the GPU process. Caller deletes. */
cJSON *profile_trace_json(const profile_result *p, const char *device_name);

#endif
