/* cudnn_loader.c — dlopen("libcudnn.so.9") once, resolve the functions of cudnn_api, keep
 * the reason when that fails (cudnn_loader.h).
 *
 * Why run-time loading: cuDNN is a large optional dependency. A binary linked against it
 * does not start on a machine without it; loaded here, only the `cudnn` variant goes
 * unavailable, with the reason in /v1/variants.
 *
 * The handle from dlopen is never closed: cuDNN keeps process-wide state (its sub-libraries,
 * kernel caches) that outlives any one handle, and the table must stay valid until exit.
 */
#include "cudnn_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Where to look, in order: the plain soname (LD_LIBRARY_PATH, the binary's RUNPATH, which
 * covers $ORIGIN/lib of `make bundle` and the CUDA lib64 directory, ld.so.cache), then the
 * toolkit's own directory for binaries (unit tests) built without that RUNPATH. */
static const char *const cudnn_lib_paths[] = {
    "libcudnn.so.9",
    "/usr/local/cuda/lib64/libcudnn.so.9",
    "/usr/local/cuda/lib/libcudnn.so.9",
};

static pthread_once_t cudnn_once = PTHREAD_ONCE_INIT;
static int cudnn_loaded;            /* 1 once every symbol resolved */
static char cudnn_why[512];         /* why not, when cudnn_loaded is 0 */
static cudnn_api cudnn_table;
static size_t cudnn_loaded_version; /* cudnnGetVersion(), 0 when absent */

/* Resolve one symbol into *slot; on failure write the reason (naming the version when it is
 * known, since a missing function almost always means an older cuDNN). */
static int cudnn_resolve(void *lib, const char *name, void **slot, size_t version)
{
    dlerror();
    *slot = dlsym(lib, name);
    if (*slot) return 0;
    if (version)
        snprintf(cudnn_why, sizeof cudnn_why, "cuDNN %zu.%zu.%zu lacks %s", version / 10000, (version % 10000) / 100,
                 version % 100, name);
    else
        snprintf(cudnn_why, sizeof cudnn_why, "libcudnn.so.9 lacks %s", name);
    return -1;
}

/* Function pointers and void* do not convert in ISO C; dlsym's contract (POSIX) is that
 * they do through this union-free memcpy. */
#define CUDNN_RESOLVE(lib, fn, field, version)                                                 \
    do {                                                                                       \
        void *p_ = NULL;                                                                       \
        if (cudnn_resolve((lib), #fn, &p_, (version)) != 0) return;                            \
        memcpy(&cudnn_table.field, &p_, sizeof p_);                                            \
    } while (0)

static void cudnn_load_once(void)
{
    void *lib = NULL;
    const char *first_error = NULL;
    char first_buf[256] = "";
    size_t i, version = 0;

    for (i = 0; i < sizeof cudnn_lib_paths / sizeof cudnn_lib_paths[0]; i++) {
        lib = dlopen(cudnn_lib_paths[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
        if (!first_error) {
            const char *e = dlerror();
            snprintf(first_buf, sizeof first_buf, "%s", e ? e : "unknown dlopen error");
            first_error = first_buf;
        }
    }
    if (!lib) {
        snprintf(cudnn_why, sizeof cudnn_why, "libcudnn.so.9 not found: %s", first_error ? first_error : "?");
        return;
    }

    /* The version first, so every later message can name it. */
    CUDNN_RESOLVE(lib, cudnnGetVersion, GetVersion, 0);
    version = cudnn_table.GetVersion();
    if (version < 90000 || version >= 100000) {
        snprintf(cudnn_why, sizeof cudnn_why, "libcudnn.so.9 reports version %zu; attnd needs cuDNN 9.x", version);
        return;
    }
    CUDNN_RESOLVE(lib, cudnnCreate, Create, version);
    CUDNN_RESOLVE(lib, cudnnDestroy, Destroy, version);
    CUDNN_RESOLVE(lib, cudnnSetStream, SetStream, version);
    CUDNN_RESOLVE(lib, cudnnGetErrorString, GetErrorString, version);
    CUDNN_RESOLVE(lib, cudnnGetLastErrorString, GetLastErrorString, version);
    CUDNN_RESOLVE(lib, cudnnBackendCreateDescriptor, BackendCreateDescriptor, version);
    CUDNN_RESOLVE(lib, cudnnBackendDestroyDescriptor, BackendDestroyDescriptor, version);
    CUDNN_RESOLVE(lib, cudnnBackendSetAttribute, BackendSetAttribute, version);
    CUDNN_RESOLVE(lib, cudnnBackendGetAttribute, BackendGetAttribute, version);
    CUDNN_RESOLVE(lib, cudnnBackendFinalize, BackendFinalize, version);
    CUDNN_RESOLVE(lib, cudnnBackendExecute, BackendExecute, version);

    cudnn_loaded_version = version;
    cudnn_loaded = 1;
}

int cudnn_load(char *why, size_t why_len)
{
    pthread_once(&cudnn_once, cudnn_load_once);
    if (cudnn_loaded) return 0;
    if (why && why_len) snprintf(why, why_len, "%s", cudnn_why);
    return -1;
}

const cudnn_api *cudnn_api_get(void)
{
    return cudnn_load(NULL, 0) == 0 ? &cudnn_table : NULL;
}

size_t cudnn_version(void)
{
    return cudnn_load(NULL, 0) == 0 ? cudnn_loaded_version : 0;
}

void cudnn_version_string(char *buf, size_t len)
{
    size_t v = cudnn_version();
    if (!buf || !len) return;
    if (v == 0)
        buf[0] = '\0';
    else
        snprintf(buf, len, "%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
}

void cudnn_format_error(char *buf, size_t len, const char *call, cudnnStatus_t status)
{
    const cudnn_api *api = cudnn_loaded ? &cudnn_table : NULL;
    char last[384] = "";
    const char *name = NULL;

    if (!buf || !len) return;
    if (api) {
        name = api->GetErrorString(status);
        /* cuDNN 9 keeps a per-thread text of its last failure; it says which attribute or
         * which support check failed, far more than the status code. */
        api->GetLastErrorString(last, sizeof last);
        last[sizeof last - 1] = '\0';
    }
    if (last[0])
        snprintf(buf, len, "%s: %s (status %d): %s", call, name ? name : "CUDNN_STATUS_?", (int)status, last);
    else
        snprintf(buf, len, "%s: %s (status %d)", call, name ? name : "CUDNN_STATUS_?", (int)status);
}

int cudnn_fail(exec_context *ctx, const char *file, int line, const char *call, cudnnStatus_t status)
{
    const cudnn_api *api = cudnn_loaded ? &cudnn_table : NULL;
    char reason[448];
    char last[384] = "";
    const char *name = NULL;

    if (api) {
        name = api->GetErrorString(status);
        api->GetLastErrorString(last, sizeof last);
        last[sizeof last - 1] = '\0';
    }
    if (last[0])
        snprintf(reason, sizeof reason, "%s (status %d): %s", name ? name : "CUDNN_STATUS_?", (int)status, last);
    else
        snprintf(reason, sizeof reason, "%s (status %d)", name ? name : "CUDNN_STATUS_?", (int)status);
    return exec_fail(ctx, file, line, call, reason);
}
