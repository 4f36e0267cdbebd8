/* cudnn_loader.h — cuDNN 9 loaded at run time, so attnd without cuDNN still runs.
 *
 * attnd never links -lcudnn: cudnn_load() dlopens "libcudnn.so.9" once per process and
 * resolves every function attnd uses into one table of function pointers (cudnn_api). When
 * the library or one of its functions is missing, the reason is kept and every later call
 * answers it again, so /v1/variants can list the `cudnn` variant as unavailable with why.
 *
 * Which cuDNN: the dynamic loader's search by default, or the file or directory the setting
 * cudnn_library names (cudnn_set_library). cuDNN 9's libcudnn.so.9 is a thin front that
 * dlopens its sub-libraries (libcudnn_graph.so.9, libcudnn_engines_*.so.9, …) by soname
 * when it first needs them; from a directory the loader does not search they might not be
 * found, or another cuDNN's copies might be taken next to this front. So with a setting the
 * sub-libraries are preloaded from the same directory first (a soname already loaded is
 * what a later dlopen of that soname gets), and a front whose version differs from its
 * graph library's, or a cuDNN file loaded from elsewhere, makes cuDNN unavailable with the
 * reason, never a mixed load.
 *
 * The cuDNN headers are included only for types and enums (cudnnStatus_t, the backend
 * descriptor and attribute enums); no cuDNN symbol is referenced at link time.
 *
 * CUDNN_TRY is the cuDNN member of exec_context.h's check-macro family: every call through
 * the table goes through it, so a failure names the call, file:line, cuDNN's status and
 * cuDNN's own explanation (cudnnGetLastErrorString).
 */
#ifndef CUDNN_LOADER_H
#define CUDNN_LOADER_H

#include <stddef.h>

#include <cudnn_graph.h>

#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cuDNN functions attnd calls, with cuDNN 9's signatures (cudnn_graph_v9.h). */
typedef struct cudnn_api {
    cudnnStatus_t (*Create)(cudnnHandle_t *handle);
    cudnnStatus_t (*Destroy)(cudnnHandle_t handle);
    cudnnStatus_t (*SetStream)(cudnnHandle_t handle, cudaStream_t stream);
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t status);
    void (*GetLastErrorString)(char *message, size_t max_size);
    cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *desc);
    cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t desc);
    cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                         cudnnBackendAttributeType_t type, int64_t count, const void *values);
    cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name,
                                         cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                         void *values);
    cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t desc);
    cudnnStatus_t (*BackendExecute)(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                    cudnnBackendDescriptor_t variant_pack);
} cudnn_api;

/* Choose the libcudnn.so.9 that cudnn_load opens (the setting cudnn_library): NULL or ""
 * for the dynamic loader's search ("libcudnn.so.9", then the CUDA toolkit's directory); the
 * path of the file; or a directory holding it. A relative path is taken from the current
 * directory. Call it before the first cudnn_load (attnd calls it once the settings are
 * read, in the front and in every worker). Returns 0; -1 when cuDNN was already loaded (or
 * tried) with another choice, which then stays in force, or when the path is too long. */
int cudnn_set_library(const char *path_or_dir);

/* Load libcudnn.so.9 and resolve every function of cudnn_api. Thread-safe; the work happens
 * once per process (pthread_once) and later calls answer the same result. Returns 0, or -1
 * with the reason in why ("libcudnn.so.9 not found: <dlerror>", "cuDNN 9.1.0 lacks
 * cudnnGetLastErrorString", "cudnn_library /x: /x/libcudnn.so.9 does not exist", …). why
 * may be NULL. */
int cudnn_load(char *why, size_t why_len);

/* With cudnn_library set: 0 when every cuDNN library loaded in this process so far comes
 * from that directory, else -1 and why (names the stray file). cuDNN opens some
 * sub-libraries only when it first needs them (the engines, at the first plan), so
 * cudnn_sdpa.c asks again after building a plan. Without the setting, or when cuDNN is not
 * loaded: 0. why may be NULL. */
int cudnn_check_loaded(char *why, size_t why_len);

/* What was asked for: the cudnn_library setting, or "libcudnn.so.9" (the loader's search). */
const char *cudnn_library_requested(void);

/* The file libcudnn.so.9 was mapped from (dladdr on cudnnGetVersion, symlinks resolved),
 * e.g. "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0"; "" when not loadable. */
const char *cudnn_library_path(void);

/* The function table; NULL when cudnn_load failed (it loads on first use). */
const cudnn_api *cudnn_api_get(void);

/* cudnnGetVersion() of the loaded library (e.g. 91900 for 9.19.0); 0 when not loadable. */
size_t cudnn_version(void);

/* "9.19.0" from cudnn_version(); "" when not loadable. Writes at most len bytes. */
void cudnn_version_string(char *buf, size_t len);

/* Record a failed cuDNN call in ctx->error (first failure of a job wins, as exec_fail):
 * "call failed at file:line: CUDNN_STATUS_…: <cudnnGetLastErrorString>". Returns -1. */
int cudnn_fail(exec_context *ctx, const char *file, int line, const char *call, cudnnStatus_t status);

/* Like cudnn_fail, into a plain buffer (for code without an exec_context, e.g. probes). */
void cudnn_format_error(char *buf, size_t len, const char *call, cudnnStatus_t status);

/* Check a cuDNN call: on failure record it in ctx->error and return -1 from the enclosing
 * function. `call` is an expression through the table, e.g. api->BackendFinalize(d). */
#define CUDNN_TRY(ctx, call)                                                                   \
    do {                                                                                       \
        cudnnStatus_t st_ = (call);                                                            \
        if (st_ != CUDNN_STATUS_SUCCESS) return cudnn_fail((ctx), __FILE__, __LINE__, #call, st_); \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
