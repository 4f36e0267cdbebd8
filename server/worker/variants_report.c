/* variants_report.c — the hello's variant list (variants_report.h). */
#include "server/worker/variants_report.h"

#include <string.h>

#include "kernels/variants.h"

/* {"name", "requested", "version", "path"} of the library v opens, as this process loaded it
 * (or tried to); null when v opens none. */
static cJSON *library_json(const variant *v)
{
    variant_library lib;
    cJSON *o;
    int ok;

    if (!v->library_info) return cJSON_CreateNull();
    memset(&lib, 0, sizeof lib);
    v->library_info(&lib);
    o = cJSON_CreateObject();
    ok = o && cJSON_AddStringToObject(o, "name", lib.name ? lib.name : "") != NULL;
    ok = ok && cJSON_AddStringToObject(o, "requested", lib.requested) != NULL;
    ok = ok && (lib.version[0] ? cJSON_AddStringToObject(o, "version", lib.version) != NULL
                               : cJSON_AddNullToObject(o, "version") != NULL);
    ok = ok && (lib.path[0] ? cJSON_AddStringToObject(o, "path", lib.path) != NULL
                            : cJSON_AddNullToObject(o, "path") != NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int worker_impl_runnable(const variant *v, int impl, int cc)
{
    if (impl < 1 || (size_t)impl > v->info->impl_count) return 0;
    if (v->info->on_cpu ? cc != 0 : cc <= 0 || cc < v->info->min_cc) return 0;
    return v->impl_runnable && v->impl_runnable(impl, cc);
}

/* The names of v's implementations that run here, in the table's order. */
static cJSON *impls_json(const variant *v, int cc)
{
    cJSON *list = cJSON_CreateArray();
    size_t i;

    for (i = 0; list && i < v->info->impl_count; i++) {
        if (!worker_impl_runnable(v, (int)i + 1, cc)) continue;
        if (!cJSON_AddItemToArray(list, cJSON_CreateString(v->info->impls[i].name))) {
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}

cJSON *worker_variants_json(int cc)
{
    cJSON *list = cJSON_CreateArray();
    size_t i;

    for (i = 0; list && i < variants_count; i++) {
        const variant *v = &variants[i];
        cJSON *o = cJSON_CreateObject(), *lib, *impls;
        char why[1024] = "";
        int ready = !v->library_ready || v->library_ready(why, sizeof why) == 0;
        int ok = o && cJSON_AddStringToObject(o, "name", v->info->name) != NULL;

        ok = ok && cJSON_AddBoolToObject(o, "ready", ready) != NULL;
        ok = ok && (ready ? cJSON_AddNullToObject(o, "why") : cJSON_AddStringToObject(o, "why", why)) != NULL;
        lib = ok ? library_json(v) : NULL;
        ok = lib && cJSON_AddItemToObject(o, "library", lib);
        if (!ok) cJSON_Delete(lib);
        impls = ok ? impls_json(v, cc) : NULL;
        ok = impls && cJSON_AddItemToObject(o, "impls", impls);
        if (!ok) cJSON_Delete(impls);
        if (!ok || !cJSON_AddItemToArray(list, o)) {
            cJSON_Delete(o);
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}
