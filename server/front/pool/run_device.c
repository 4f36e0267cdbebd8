/* run_device.c — the device of a run (run_device.h): chosen by default or checked when named,
 * against the hellos of the pool's workers. */
#include "server/front/pool/run_device.h"

#include <stdio.h>
#include <string.h>

#include "server/front/pool/pool.h"

/* 0 when the worker of device said in its hello that v's library loads (or v needs none);
 * else -1 with its reason. */
static int variant_ready_on(const char *device, const variant_info *v, char *why, size_t why_len)
{
    cJSON *report;
    const cJSON *reason;
    int rc = 0;

    if (!v->library) return 0;
    report = pool_device_variant(device, v->name);
    reason = cJSON_GetObjectItemCaseSensitive(report, "why");
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(report, "ready"))) {
        snprintf(why, why_len, "%s is not available: %s", v->library,
                 cJSON_IsString(reason) ? reason->valuestring : "it did not load");
        rc = -1;
    }
    cJSON_Delete(report);
    return rc;
}

/* 0 when the worker of device listed impl among the implementations of v it runs (its hello:
 * server/worker/variants_report.c), or none was asked for (""); else -1 and why. */
static int impl_runs_on(const char *device, const variant_info *v, const char *impl, char *why, size_t why_len)
{
    const char *needs;
    cJSON *report, *name;
    char runs[200] = "";
    size_t n = 0;
    int found = 0, k;

    if (!impl[0]) return 0;
    report = pool_device_variant(device, v->name);
    cJSON_ArrayForEach(name, cJSON_GetObjectItemCaseSensitive(report, "impls")) {
        if (!cJSON_IsString(name)) continue;
        if (!strcmp(name->valuestring, impl)) found = 1;
        if (n < sizeof runs) n += (size_t)snprintf(runs + n, sizeof runs - n, "%s%s", n ? ", " : "", name->valuestring);
    }
    cJSON_Delete(report);
    if (found) return 0;
    k = variant_info_impl_find(v, impl); /* run_request_parse checked the name */
    needs = k >= 0 && v->impls[k].needs ? v->impls[k].needs : "a device its worker reports";
    snprintf(why, why_len, "impl %s of backend %s cannot run on %s (it needs %s); %s runs %s", impl, v->name, device,
             needs, device, runs[0] ? runs : "none of them");
    return -1;
}

/* run_device.h: the checks of POST /v1/runs, so that a batch run is refused exactly where a
 * server run would be. */
int run_device_resolve(run_request *r, const variant_info *v, api_error *e)
{
    char devices[200], why[300];
    const char *dev;
    int cc;

    if (r->device[0]) {
        if (!run_request_device_valid(r->device))
            return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%s'", r->device);
        if (v->on_cpu && strcmp(r->device, "cpu") != 0)
            return api_fail(e, 422, "unsupported", "device", "backend %s runs on the cpu device only, not on %s",
                            v->name, r->device);
        if (!v->on_cpu && !strcmp(r->device, "cpu"))
            return api_fail(e, 422, "unsupported", "device", "backend %s needs a GPU; it cannot run on the cpu device",
                            v->name);
    } else {
        dev = pool_default_device(v->on_cpu);
        if (!dev) {
            pool_device_list(devices, sizeof devices);
            return api_fail(e, 503, "no_device", "device", "backend '%s' needs a GPU and this server has none (devices: %s)",
                            v->name, devices);
        }
        snprintf(r->device, sizeof r->device, "%s", dev);
    }
    cc = pool_device_cc(r->device);
    if (cc < 0) {
        pool_device_list(devices, sizeof devices);
        return api_fail(e, 503, "no_device", "device", "device %s is not served here (devices: %s)", r->device,
                        devices);
    }
    /* Nothing asked for is silently dropped: the cpu device times plain calls, so an L2
     * flush or a CUDA graph would be echoed in params yet not happen. */
    if (!strcmp(r->device, "cpu") && r->graph)
        return api_fail(e, 422, "not_applicable", "graph",
                        "graph=true times CUDA graph replays; the cpu device has no graphs (drop graph)");
    if (!strcmp(r->device, "cpu") && r->cache_cold)
        return api_fail(e, 422, "not_applicable", "cache",
                        "cache=cold flushes a GPU's L2 between forwards; the cpu device has none to flush (drop cache)");
    why[0] = '\0'; /* the problem was checked when the request was parsed; now the device */
    if (variant_info_check_arch(v, cc, why, sizeof why) != 0 ||
        variant_ready_on(r->device, v, why, sizeof why) != 0)
        return api_fail(e, 422, "unsupported", "device", "%s (device %s)", why[0] ? why : "unsupported here",
                        r->device);
    if (impl_runs_on(r->device, v, r->impl, why, sizeof why) != 0)
        return api_fail(e, 422, "unsupported", "impl", "%s", why);
    return 0;
}
