/* build_info.c — the build's provenance (build_info.h), from the values the Makefile wrote. */
#include "common/build_info.h"

#include <stdio.h>

#include "build_info_values.h" /* $(BUILD)/build_info_values.h: BUILD_INFO_* string macros */

const char *build_info_version(void) { return BUILD_INFO_VERSION; }

const char *build_info_commit(void) { return BUILD_INFO_COMMIT; }

void build_info_line(char *out, size_t len)
{
    snprintf(out, len, "attnd %s (commit %s%s) built %s with gcc %s, nvcc %s, CUDA %s, for %s", BUILD_INFO_VERSION,
             BUILD_INFO_COMMIT, BUILD_INFO_DIRTY ? ", dirty" : "", BUILD_INFO_TIME, __VERSION__, BUILD_INFO_NVCC,
             BUILD_INFO_CUDA, BUILD_INFO_GENCODE);
}

cJSON *build_info_json(void)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;

    ok = ok && cJSON_AddStringToObject(o, "version", BUILD_INFO_VERSION);
    ok = ok && cJSON_AddStringToObject(o, "commit", BUILD_INFO_COMMIT);
    ok = ok && cJSON_AddBoolToObject(o, "dirty", BUILD_INFO_DIRTY);
    ok = ok && cJSON_AddStringToObject(o, "compiler", "gcc " __VERSION__);
    ok = ok && cJSON_AddStringToObject(o, "nvcc", BUILD_INFO_NVCC);
    ok = ok && cJSON_AddStringToObject(o, "cuda_toolkit", BUILD_INFO_CUDA);
    ok = ok && cJSON_AddStringToObject(o, "gencode", BUILD_INFO_GENCODE);
    ok = ok && cJSON_AddStringToObject(o, "built", BUILD_INFO_TIME);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
