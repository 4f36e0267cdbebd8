/* variants.c — GET /v1/variants: each variant's limits (common/variant_info.h) and whether it
 * can run here, from the workers' hellos: the device it would run on, the library it opens as
 * that worker loaded it (the front opens no CUDA library itself), and the devices whose worker
 * runs each of its implementations. */
#include "server/front/routes/routes.h"

#include <stdio.h>
#include <string.h>

#include "common/variant_info.h"
#include "server/front/pool/pool.h"

/* v's entry in the hello of the worker that would run it, else in the cpu worker's (which
 * loads the same libraries with the same settings). Caller deletes; NULL when none said. */
static cJSON *variant_report(const variant_info *v)
{
    const char *dev = pool_default_device(v->on_cpu);
    const char *from[2] = {dev, "cpu"};
    int i;

    for (i = 0; i < 2; i++) {
        cJSON *report = from[i] ? pool_device_variant(from[i], v->name) : NULL;
        if (report) return report;
    }
    return NULL;
}

/* Can v run on this server, and if not, why (why_len bytes)? */
static int variant_available(const variant_info *v, const cJSON *report, char *why, size_t why_len)
{
    const char *dev = pool_default_device(v->on_cpu);
    const cJSON *ready = cJSON_GetObjectItemCaseSensitive(report, "ready");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(report, "why");
    int cc;

    why[0] = '\0';
    if (cJSON_IsFalse(ready)) {
        snprintf(why, why_len, "%s", cJSON_IsString(reason) ? reason->valuestring : "its library did not load");
        return 0;
    }
    if (!dev) {
        snprintf(why, why_len, v->on_cpu ? "the cpu device is not up" : "no GPU device is up on this server");
        return 0;
    }
    cc = pool_device_cc(dev);
    if (cc < 0) {
        snprintf(why, why_len, "device %s is not up", dev);
        return 0;
    }
    if (!v->on_cpu && cc < v->min_cc) {
        snprintf(why, why_len, "needs compute capability %d.%d; %s has %d.%d", v->min_cc / 10, v->min_cc % 10, dev,
                 cc / 10, cc % 10);
        return 0;
    }
    return 1;
}

/* 1 when the hello of device lists implementation `impl` of v as one it runs. */
static int impl_listed(const char *device, const variant_info *v, const char *impl)
{
    cJSON *report = pool_device_variant(device, v->name), *name;
    int found = 0;

    cJSON_ArrayForEach(name, cJSON_GetObjectItemCaseSensitive(report, "impls"))
        if (cJSON_IsString(name) && !strcmp(name->valuestring, impl)) found = 1;
    cJSON_Delete(report);
    return found;
}

/* [{"name", "summary", "needs", "devices": [ids whose worker runs it]}, …]; [] for a variant
 * with one implementation. */
static cJSON *impls_json(const variant_info *v)
{
    cJSON *list = cJSON_CreateArray(), *devices = pool_devices_json(), *d;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(devices, "devices");
    size_t i;
    int ok = list != NULL;

    for (i = 0; ok && i < v->impl_count; i++) {
        const variant_impl *vi = &v->impls[i];
        cJSON *o = cJSON_CreateObject(), *on = NULL;
        ok = o && cJSON_AddItemToArray(list, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        ok = cJSON_AddStringToObject(o, "name", vi->name) && cJSON_AddStringToObject(o, "summary", vi->summary);
        ok = ok && (vi->needs ? cJSON_AddStringToObject(o, "needs", vi->needs) != NULL
                              : cJSON_AddNullToObject(o, "needs") != NULL);
        ok = ok && (on = cJSON_AddArrayToObject(o, "devices")) != NULL;
        cJSON_ArrayForEach(d, ids) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
            if (ok && cJSON_IsString(id) && impl_listed(id->valuestring, v, vi->name))
                ok = cJSON_AddItemToArray(on, cJSON_CreateString(id->valuestring));
        }
    }
    cJSON_Delete(devices);
    if (!ok) {
        cJSON_Delete(list);
        return NULL;
    }
    return list;
}

static cJSON *variant_json(const variant_info *v)
{
    /* The VARIANT_* feature bits of common/variant_info.h, in bit order, as the run parameters
     * that ask for them ("seqlens": seqlens_q and seqlens_kv). */
    static const char *const feature_names[] = {"kv_heads", "head_dim_v", "window", "page_size", "seqlens"};
    cJSON *o = cJSON_CreateObject(), *dtypes, *masks, *features, *pending, *hd, *report = variant_report(v), *lib, *impls;
    char why[1024], cc[16];
    int ok = o != NULL, available, t;

    ok = ok && cJSON_AddStringToObject(o, "name", v->name);
    ok = ok && cJSON_AddStringToObject(o, "summary", v->summary ? v->summary : "");
    ok = ok && cJSON_AddStringToObject(o, "device", v->on_cpu ? "cpu" : "cuda");
    ok = ok && (dtypes = cJSON_AddArrayToObject(o, "dtypes")) != NULL;
    for (t = 0; ok && t < ATTN_DTYPE_COUNT; t++)
        if (v->dtypes & VARIANT_DTYPE(t))
            ok = cJSON_AddItemToArray(dtypes, cJSON_CreateString(attn_dtype_name((attn_dtype)t)));
    ok = ok && (masks = cJSON_AddArrayToObject(o, "masks")) != NULL;
    for (t = 0; ok && t < ATTN_MASK_COUNT; t++)
        ok = cJSON_AddItemToArray(masks, cJSON_CreateString(attn_mask_name((attn_mask)t)));
    ok = ok && (features = cJSON_AddArrayToObject(o, "features")) != NULL;
    for (t = 0; ok && t < (int)(sizeof feature_names / sizeof feature_names[0]); t++)
        if (variant_info_features(v) & (1u << t))
            ok = cJSON_AddItemToArray(features, cJSON_CreateString(feature_names[t]));
    ok = ok && (pending = cJSON_AddArrayToObject(o, "pending_features")) != NULL;
    for (t = 0; ok && t < (int)(sizeof feature_names / sizeof feature_names[0]); t++)
        if (v->pending_features & (1u << t))
            ok = cJSON_AddItemToArray(pending, cJSON_CreateString(feature_names[t]));
    ok = ok && (hd = cJSON_AddObjectToObject(o, "head_dim")) != NULL;
    ok = ok && (v->max_head_dim > 0 ? cJSON_AddNumberToObject(hd, "max", v->max_head_dim) != NULL
                                    : cJSON_AddNullToObject(hd, "max") != NULL);
    ok = ok && cJSON_AddNumberToObject(hd, "multiple", v->head_dim_multiple > 0 ? v->head_dim_multiple : 1);
    snprintf(cc, sizeof cc, "%d.%d", v->min_cc / 10, v->min_cc % 10);
    ok = ok && (v->min_cc > 0 ? cJSON_AddStringToObject(o, "min_compute_capability", cc) != NULL
                              : cJSON_AddNullToObject(o, "min_compute_capability") != NULL);
    available = variant_available(v, report, why, sizeof why);
    ok = ok && cJSON_AddBoolToObject(o, "available", available);
    ok = ok && (available ? cJSON_AddNullToObject(o, "why") != NULL : cJSON_AddStringToObject(o, "why", why) != NULL);
    lib = report ? cJSON_DetachItemFromObjectCaseSensitive(report, "library") : NULL;
    if (!lib) lib = cJSON_CreateNull(); /* no worker has said hello yet */
    ok = ok && lib && cJSON_AddItemToObject(o, "library", lib);
    if (!ok) cJSON_Delete(lib);
    impls = ok ? impls_json(v) : NULL;
    ok = impls && cJSON_AddItemToObject(o, "impls", impls);
    if (!ok) cJSON_Delete(impls);
    cJSON_Delete(report);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

void route_variants(http_request *req)
{
    cJSON *o = cJSON_CreateObject(), *list = o ? cJSON_AddArrayToObject(o, "variants") : NULL;
    size_t i;
    int ok = list != NULL;

    for (i = 0; ok && i < variant_infos_count; i++) {
        cJSON *v = variant_json(variant_infos[i]);
        ok = v && cJSON_AddItemToArray(list, v);
        if (!ok) cJSON_Delete(v);
    }
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}
