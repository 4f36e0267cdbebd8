/* cudnn_loader.c — dlopen libcudnn.so.9 once, resolve the functions of cudnn_api, keep
 * the reason when that fails (cudnn_loader.h).
 *
 * Why run-time loading: cuDNN is a large optional dependency. A binary linked against it
 * does not start on a machine without it; loaded here, only the `cudnn` variant goes
 * unavailable, with the reason in /v1/variants.
 *
 * Why preload the sub-libraries when a directory is chosen: libcudnn.so.9 (129 KiB) only
 * forwards, even cudnnGetVersion (it has no version of its own); the work is in
 * libcudnn_graph.so.9 and the engine libraries, which it dlopens by soname on first use. That search tries LD_LIBRARY_PATH before the front's RUNPATH
 * ($ORIGIN), then ld.so.cache, so a front from a Python wheel's directory could run on the
 * system's older sub-libraries. A soname already loaded is what every later dlopen of it
 * returns, so loading the sub-libraries by full path first pins them to the directory.
 *
 * The handles from dlopen are never closed: cuDNN keeps process-wide state (its
 * sub-libraries, kernel caches) that outlives any one handle, and the table must stay valid
 * until exit.
 */
#include "kernels/cudnn/cudnn_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CUDNN_FRONT_SONAME "libcudnn.so.9"
#define CUDNN_PATH_LEN 512 /* as the setting's field (settings.h) */

/* Where to look without a setting, in order: the plain soname (LD_LIBRARY_PATH, the
 * binary's RUNPATH, which covers $ORIGIN/lib of `make bundle` and the CUDA lib64 directory,
 * ld.so.cache), then the toolkit's own directory for binaries (unit tests) built without
 * that RUNPATH. */
static const char *const cudnn_lib_paths[] = {
    CUDNN_FRONT_SONAME,
    "/usr/local/cuda/lib64/libcudnn.so.9",
    "/usr/local/cuda/lib/libcudnn.so.9",
};

/* cuDNN 9's sub-libraries, graph first: every other one needs it (DT_NEEDED), and it alone
 * is required: the engines and heuristics are opened by the front when a graph is planned,
 * ops/cnn/adv serve legacy APIs attnd does not call. A missing optional one is skipped; one
 * that is there but does not load is an error. */
static const struct {
    const char *soname;
    int required;
} cudnn_sublibs[] = {
    {"libcudnn_graph.so.9", 1},
    {"libcudnn_engines_precompiled.so.9", 0},
    {"libcudnn_engines_runtime_compiled.so.9", 0},
    {"libcudnn_heuristic.so.9", 0},
    {"libcudnn_ops.so.9", 0},
    {"libcudnn_cnn.so.9", 0},
    {"libcudnn_adv.so.9", 0},
};
#define CUDNN_SUBLIB_COUNT (sizeof cudnn_sublibs / sizeof cudnn_sublibs[0])

static pthread_once_t cudnn_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t cudnn_setting_lock = PTHREAD_MUTEX_INITIALIZER;
static char cudnn_setting[CUDNN_PATH_LEN]; /* cudnn_library; "" = the loader's search */
static int cudnn_started;                  /* cudnn_load_once ran: the setting is fixed */
static char cudnn_dir[CUDNN_PATH_LEN];     /* with a setting: the directory of the files */
static int cudnn_loaded;                   /* 1 once every symbol resolved */
static char cudnn_why[2048];               /* why not, when cudnn_loaded is 0 */
static cudnn_api cudnn_table;
static size_t cudnn_loaded_version;        /* cudnnGetVersion(), 0 when absent */
static char cudnn_path[PATH_MAX];          /* the front's file, resolved */

/* "9.19.0" from 91900. */
static void cudnn_version_text(size_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
}

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

/* The file a loaded function lives in, symlinks resolved; "" when dladdr cannot tell. */
static void cudnn_file_of(void *fn, char *out, size_t len)
{
    Dl_info info;
    char real[PATH_MAX];

    out[0] = '\0';
    if (!fn || dladdr(fn, &info) == 0 || !info.dli_fname) return;
    if (realpath(info.dli_fname, real))
        snprintf(out, len, "%s", real);
    else
        snprintf(out, len, "%s", info.dli_fname);
}

/* cudnnGetVersion of a library handle (the front, or libcudnn_graph.so.9, which exports it
 * too); 0 when it has none. */
static size_t cudnn_handle_version(void *lib)
{
    size_t (*get)(void) = NULL;
    void *p;
    dlerror();
    p = dlsym(lib, "cudnnGetVersion");
    if (!p) return 0;
    memcpy(&get, &p, sizeof p);
    return get();
}

/* Same directory: by identity, so "/a/lib", "/a/lib/" and a symlink to it are one. */
static int cudnn_same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return strcmp(a, b) == 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* From the setting: the directory of the cuDNN files and the front's path. 0, or -1 with
 * cudnn_why set (it names the setting's value). */
static int cudnn_locate(const char *setting, char *front, size_t front_len)
{
    struct stat st;
    const char *slash;

    if (stat(setting, &st) != 0) {
        snprintf(cudnn_why, sizeof cudnn_why, "cudnn_library %s: %s", setting, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(cudnn_dir, sizeof cudnn_dir, "%s", setting);
        snprintf(front, front_len, "%s/%s", setting, CUDNN_FRONT_SONAME);
        if (stat(front, &st) != 0) {
            snprintf(cudnn_why, sizeof cudnn_why, "cudnn_library %s: %s is not there (%s)", setting,
                     CUDNN_FRONT_SONAME, strerror(errno));
            return -1;
        }
        return 0;
    }
    /* A file: its siblings are in the directory it was named in (not the one a symlink
     * points into: that is where a distribution's soname links live too). */
    slash = strrchr(setting, '/');
    if (!slash)
        snprintf(cudnn_dir, sizeof cudnn_dir, ".");
    else if (slash == setting)
        snprintf(cudnn_dir, sizeof cudnn_dir, "/");
    else
        snprintf(cudnn_dir, sizeof cudnn_dir, "%.*s", (int)(slash - setting), setting);
    /* dlopen searches for a name without a slash; the setting means this file. */
    snprintf(front, front_len, "%s%s", slash ? "" : "./", setting);
    return 0;
}

/* 0 when path starts with the ELF magic, else -1 and a reason in why: a wrong file named
 * in the setting is said plainly, before any sub-library is loaded for it. */
static int cudnn_is_elf(const char *path, char *why, size_t why_len)
{
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    size_t n;

    if (!f) {
        snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (n == sizeof magic && memcmp(magic, "\x7f" "ELF", 4) == 0) return 0;
    snprintf(why, why_len, "%s is not a shared library (no ELF header)", path);
    return -1;
}

/* Preload the sub-libraries from cudnn_dir, then the front; check that the front will use
 * exactly these. Returns the front's handle, or NULL with cudnn_why set. */
static void *cudnn_open_from_setting(const char *setting)
{
    char front[CUDNN_PATH_LEN + 32], path[CUDNN_PATH_LEN + 64], reason[CUDNN_PATH_LEN + 128], a[32], b[32];
    void *subs[CUDNN_SUBLIB_COUNT] = {0};
    void *lib;
    size_t i, front_version, graph_version;
    struct stat st;

    if (cudnn_locate(setting, front, sizeof front) != 0) return NULL;
    if (cudnn_is_elf(front, reason, sizeof reason) != 0) {
        snprintf(cudnn_why, sizeof cudnn_why, "cudnn_library %s: %s", setting, reason);
        return NULL;
    }
    for (i = 0; i < CUDNN_SUBLIB_COUNT; i++) {
        snprintf(path, sizeof path, "%s/%s", cudnn_dir, cudnn_sublibs[i].soname);
        if (stat(path, &st) != 0) {
            if (!cudnn_sublibs[i].required) continue;
            snprintf(cudnn_why, sizeof cudnn_why,
                     "cudnn_library %s: %s is not beside libcudnn.so.9 in %s (cuDNN 9 needs it from the same "
                     "release)", setting, cudnn_sublibs[i].soname, cudnn_dir);
            return NULL;
        }
        /* RTLD_GLOBAL: the front and the later sub-libraries resolve against these. */
        subs[i] = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!subs[i]) {
            const char *e = dlerror();
            snprintf(cudnn_why, sizeof cudnn_why, "cudnn_library %s: cannot load %s: %s", setting,
                     cudnn_sublibs[i].soname, e ? e : "unknown dlopen error");
            return NULL;
        }
    }
    lib = dlopen(front, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(cudnn_why, sizeof cudnn_why, "cudnn_library %s: cannot load %s: %s", setting,
                 CUDNN_FRONT_SONAME, e ? e : "unknown dlopen error");
        return NULL;
    }

    /* What the front's own dlopen of each soname will get: the first object of that soname
     * in the process. If another copy was there before ours (LD_PRELOAD, an earlier load),
     * the front would mix releases. */
    for (i = 0; i < CUDNN_SUBLIB_COUNT; i++) {
        void *first;
        if (!subs[i]) continue;
        first = dlopen(cudnn_sublibs[i].soname, RTLD_NOW | RTLD_NOLOAD);
        if (first && first != subs[i]) {
            struct link_map *lm = NULL;
            if (dlinfo(first, RTLD_DI_LINKMAP, &lm) != 0) lm = NULL;
            snprintf(cudnn_why, sizeof cudnn_why,
                     "cudnn_library %s: %s is already loaded in this process from %s; libcudnn.so.9 would use "
                     "that copy, not the one in %s", setting, cudnn_sublibs[i].soname,
                     lm && lm->l_name ? lm->l_name : "elsewhere", cudnn_dir);
            dlclose(first);
            return NULL;
        }
        if (first) dlclose(first); /* the reference NOLOAD took */
    }
    /* libcudnn.so.9 has no version of its own: its cudnnGetVersion forwards to the graph
     * library it dlopened. After the check above that is ours, so the two agree unless
     * the front resolved its graph some other way; then it is not the release chosen. */
    front_version = cudnn_handle_version(lib);
    graph_version = cudnn_handle_version(subs[0]);
    if (front_version && graph_version && front_version != graph_version) {
        cudnn_version_text(front_version, a, sizeof a);
        cudnn_version_text(graph_version, b, sizeof b);
        snprintf(cudnn_why, sizeof cudnn_why,
                 "cudnn_library %s: libcudnn.so.9 reports cuDNN %s but libcudnn_graph.so.9 beside it is cuDNN %s; "
                 "both must come from one cuDNN release", setting, a, b);
        return NULL;
    }
    return lib;
}

/* Without a setting: the plain soname, then the toolkit's directory. */
static void *cudnn_open_searched(void)
{
    char first_buf[256] = "";
    void *lib = NULL;
    size_t i;

    for (i = 0; i < sizeof cudnn_lib_paths / sizeof cudnn_lib_paths[0]; i++) {
        lib = dlopen(cudnn_lib_paths[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) return lib;
        if (!first_buf[0]) {
            const char *e = dlerror();
            snprintf(first_buf, sizeof first_buf, "%s", e ? e : "unknown dlopen error");
        }
    }
    snprintf(cudnn_why, sizeof cudnn_why, "libcudnn.so.9 not found: %s", first_buf[0] ? first_buf : "?");
    return NULL;
}

/* dl_iterate_phdr's callback: the first libcudnn*.so* outside the chosen directory. */
typedef struct cudnn_scan {
    char stray[CUDNN_PATH_LEN];
} cudnn_scan;

static int cudnn_scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    cudnn_scan *scan = arg;
    const char *name = info->dlpi_name, *base, *slash;
    char dir[CUDNN_PATH_LEN];

    (void)size;
    if (!name || !name[0]) return 0;
    slash = strrchr(name, '/');
    base = slash ? slash + 1 : name;
    if (strncmp(base, "libcudnn", 8) != 0 || !strstr(base, ".so")) return 0;
    if (!slash) return 0; /* loaded by bare name: no directory to compare */
    if (slash == name)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - name), name);
    if (cudnn_same_dir(dir, cudnn_dir)) return 0;
    snprintf(scan->stray, sizeof scan->stray, "%s", name);
    return 1;
}

/* Every libcudnn* object in the process against cudnn_dir. 0, or -1 with why. */
static int cudnn_scan_loaded(const char *setting, char *why, size_t why_len)
{
    cudnn_scan scan;

    scan.stray[0] = '\0';
    if (dl_iterate_phdr(cudnn_scan_object, &scan) == 0 || !scan.stray[0]) return 0;
    if (why && why_len)
        snprintf(why, why_len, "cudnn_library %s: %s is loaded too, from outside %s; cuDNN would mix releases",
                 setting, scan.stray, cudnn_dir);
    return -1;
}

static void cudnn_load_once(void)
{
    char setting[CUDNN_PATH_LEN];
    void *lib, *p;
    size_t version = 0;

    pthread_mutex_lock(&cudnn_setting_lock);
    cudnn_started = 1;
    memcpy(setting, cudnn_setting, sizeof setting);
    pthread_mutex_unlock(&cudnn_setting_lock);

    lib = setting[0] ? cudnn_open_from_setting(setting) : cudnn_open_searched();
    if (!lib) return;

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

    if (setting[0] && cudnn_scan_loaded(setting, cudnn_why, sizeof cudnn_why) != 0) return;

    memcpy(&p, &cudnn_table.GetVersion, sizeof p);
    cudnn_file_of(p, cudnn_path, sizeof cudnn_path);
    cudnn_loaded_version = version;
    cudnn_loaded = 1;
}

int cudnn_set_library(const char *path_or_dir)
{
    const char *v = path_or_dir ? path_or_dir : "";
    int rc = 0;

    if (strlen(v) >= sizeof cudnn_setting) return -1;
    pthread_mutex_lock(&cudnn_setting_lock);
    if (cudnn_started)
        rc = strcmp(cudnn_setting, v) == 0 ? 0 : -1;
    else
        memcpy(cudnn_setting, v, strlen(v) + 1);
    pthread_mutex_unlock(&cudnn_setting_lock);
    return rc;
}

const char *cudnn_library_requested(void)
{
    /* Fixed once loading started; before that, the caller is the one setting it. */
    return cudnn_setting[0] ? cudnn_setting : CUDNN_FRONT_SONAME;
}

const char *cudnn_library_path(void)
{
    return cudnn_load(NULL, 0) == 0 ? cudnn_path : "";
}

int cudnn_check_loaded(char *why, size_t why_len)
{
    /* cudnn_setting is fixed once loading started, and cudnn_load starts it. */
    if (cudnn_load(NULL, 0) != 0 || !cudnn_setting[0]) return 0;
    return cudnn_scan_loaded(cudnn_setting, why, why_len);
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
        cudnn_version_text(v, buf, len);
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
