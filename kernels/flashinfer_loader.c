/* flashinfer_loader.c — dlopen libattnd_flashinfer.so once, resolve the functions of
 * flashinfer_api, keep the reason when that fails (flashinfer_loader.h).
 *
 * Why run-time loading: FlashInfer is header-only C++ (CUTLASS templates) whose headers come
 * from a 100 MB wheel fetched from PyPI, and whose kernels take minutes of nvcc per
 * architecture. Built apart into a module (make flashinfer) and loaded here, it costs nothing
 * to a build or a test that does not want it, and only the `flashinfer` variant goes
 * unavailable when it is absent, with the reason in /v1/variants. The same design as
 * cudnn_loader.c.
 *
 * The module is opened RTLD_LOCAL (its symbols, and the CUDA runtime it links statically,
 * stay out of the worker's namespace; it exports only attnd_fi_*) and never closed: the CUDA
 * runtime inside it registers kernels for the life of the process.
 */
#include "kernels/flashinfer_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FLASHINFER_PATH_LEN 512 /* as the setting's field (settings.h) */

static pthread_once_t fi_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fi_setting_lock = PTHREAD_MUTEX_INITIALIZER;
static char fi_setting[FLASHINFER_PATH_LEN]; /* flashinfer_library; "": beside the executable */
static int fi_started;                       /* fi_load_once ran: the setting is fixed */
static char fi_requested[PATH_MAX + 64];     /* the file asked for: the setting, or the default */
static int fi_loaded;
static char fi_why[2 * PATH_MAX + 512];
static flashinfer_api fi_table;
static char fi_path[PATH_MAX + 64];       /* the file mapped, symlinks resolved */

/* lib/libattnd_flashinfer.so beside the running executable (the worker's $ORIGIN/lib). */
static void fi_default_path(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash;

    if (n <= 0) {
        snprintf(out, len, "lib/%s", ATTND_FI_LIBRARY);
        return;
    }
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(out, len, "%s/lib/%s", exe, ATTND_FI_LIBRARY);
}

/* Resolve one symbol into *slot, or say which one the file lacks. */
static int fi_resolve(void *lib, const char *name, void **slot)
{
    dlerror();
    *slot = dlsym(lib, name);
    if (*slot) return 0;
    snprintf(fi_why, sizeof fi_why, "%s lacks %s: not an attnd FlashInfer module (make flashinfer builds one)",
             fi_requested, name);
    return -1;
}

/* Function pointers and void * do not convert in ISO C; POSIX's dlsym contract is that they
 * do through memcpy. */
#define FI_RESOLVE(lib, fn, field)                                                             \
    do {                                                                                       \
        void *p_ = NULL;                                                                       \
        if (fi_resolve((lib), #fn, &p_) != 0) return;                                          \
        memcpy(&fi_table.field, &p_, sizeof p_);                                               \
    } while (0)

static void fi_load_once(void)
{
    char setting[FLASHINFER_PATH_LEN], real[PATH_MAX];
    struct stat st;
    void *lib;
    int abi;

    pthread_mutex_lock(&fi_setting_lock);
    fi_started = 1;
    memcpy(setting, fi_setting, sizeof setting);
    pthread_mutex_unlock(&fi_setting_lock);

    /* A name without a slash would send dlopen searching: the setting means this file. */
    if (setting[0])
        snprintf(fi_requested, sizeof fi_requested, "%s%s", strchr(setting, '/') ? "" : "./", setting);
    else
        fi_default_path(fi_requested, sizeof fi_requested);

    if (stat(fi_requested, &st) != 0) {
        if (setting[0])
            snprintf(fi_why, sizeof fi_why, "flashinfer_library %s: %s", setting, strerror(errno));
        else
            snprintf(fi_why, sizeof fi_why, "%s not built: make flashinfer (looked for %s)", ATTND_FI_LIBRARY,
                     fi_requested);
        return;
    }
    lib = dlopen(fi_requested, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(fi_why, sizeof fi_why, "cannot load %s: %s", fi_requested, e ? e : "unknown dlopen error");
        return;
    }
    FI_RESOLVE(lib, attnd_fi_abi, abi);
    abi = fi_table.abi();
    if (abi != ATTND_FI_ABI) {
        snprintf(fi_why, sizeof fi_why, "%s speaks ABI %d; this attnd needs ABI %d: rebuild it (make flashinfer)",
                 fi_requested, abi, ATTND_FI_ABI);
        return;
    }
    FI_RESOLVE(lib, attnd_fi_version, version);
    FI_RESOLVE(lib, attnd_fi_build, build);
    FI_RESOLVE(lib, attnd_fi_route, route);
    FI_RESOLVE(lib, attnd_fi_workspace_bytes, workspace_bytes);
    FI_RESOLVE(lib, attnd_fi_prepare, prepare);
    FI_RESOLVE(lib, attnd_fi_forward, forward);
    FI_RESOLVE(lib, attnd_fi_describe, describe);
    snprintf(fi_path, sizeof fi_path, "%s", realpath(fi_requested, real) ? real : fi_requested);
    fi_loaded = 1;
}

int flashinfer_set_library(const char *path)
{
    const char *v = path ? path : "";
    int rc = 0;

    if (strlen(v) >= sizeof fi_setting) return -1;
    pthread_mutex_lock(&fi_setting_lock);
    if (fi_started)
        rc = strcmp(fi_setting, v) == 0 ? 0 : -1;
    else
        memcpy(fi_setting, v, strlen(v) + 1);
    pthread_mutex_unlock(&fi_setting_lock);
    return rc;
}

int flashinfer_load(char *why, size_t why_len)
{
    pthread_once(&fi_once, fi_load_once);
    if (fi_loaded) return 0;
    if (why && why_len) snprintf(why, why_len, "%s", fi_why);
    return -1;
}

const flashinfer_api *flashinfer_api_get(void) { return flashinfer_load(NULL, 0) == 0 ? &fi_table : NULL; }

const char *flashinfer_library_requested(void)
{
    pthread_once(&fi_once, fi_load_once); /* fixes the setting, writes fi_requested */
    return fi_setting[0] ? fi_setting : fi_requested;
}

const char *flashinfer_library_path(void) { return flashinfer_load(NULL, 0) == 0 ? fi_path : ""; }

const char *flashinfer_version(void) { return flashinfer_load(NULL, 0) == 0 ? fi_table.version() : ""; }
