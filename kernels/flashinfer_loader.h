/* flashinfer_loader.h — attnd's FlashInfer module loaded at run time, so attnd without it
 * still builds, tests and runs.
 *
 * The module, libattnd_flashinfer.so, is built apart by `make flashinfer` from the headers of
 * FlashInfer's wheel (kernels/flashinfer/README.md) and exports the C functions of
 * kernels/flashinfer/flashinfer_abi.h. flashinfer_load() dlopens it once per process and
 * resolves them into one table; when the file is missing, is not such a module, or speaks
 * another ABI, the reason is kept and every later call answers it again, so /v1/variants can
 * list the `flashinfer` variant as unavailable with why — "libattnd_flashinfer.so not built:
 * make flashinfer (looked for …)" on a machine that never built it.
 *
 * Which file: the setting flashinfer_library (flashinfer_set_library), else
 * lib/libattnd_flashinfer.so beside the running executable, where the Makefile writes it
 * ($(BUILD)/lib, the rpath $ORIGIN/lib of attnd-worker) and the Docker image copies it.
 */
#ifndef FLASHINFER_LOADER_H
#define FLASHINFER_LOADER_H

#include <stddef.h>

#include "kernels/flashinfer/flashinfer_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The module's functions (flashinfer_abi.h), as resolved. */
typedef struct flashinfer_api {
    int (*abi)(void);
    const char *(*version)(void);
    const char *(*build)(void);
    int (*route)(const attnd_fi_case *c, char *why, size_t why_len);
    size_t (*workspace_bytes)(const attnd_fi_case *c);
    int (*prepare)(const attnd_fi_case *c, void *workspace, size_t workspace_bytes, void *stream, char *why,
                   size_t why_len);
    int (*forward)(const attnd_fi_case *c, const void *q, const void *k, const void *v, void *out, void *workspace,
                   void *stream, char *why, size_t why_len);
    const char *(*describe)(const attnd_fi_case *c);
} flashinfer_api;

/* Choose the module flashinfer_load opens (the setting flashinfer_library): the path of the
 * file, or NULL or "" for lib/libattnd_flashinfer.so beside the executable. A relative path is
 * taken from the current directory. Call it before the first flashinfer_load (the worker does,
 * once the settings are read). Returns 0; -1 when the module was already loaded (or tried)
 * with another choice, which then stays, or when the path is too long. */
int flashinfer_set_library(const char *path);

/* Load the module and resolve every function of flashinfer_api. Thread-safe; the work happens
 * once per process and later calls answer the same. Returns 0, or -1 with the reason in why
 * (may be NULL). */
int flashinfer_load(char *why, size_t why_len);

/* The table; NULL when flashinfer_load failed (it loads on first use). */
const flashinfer_api *flashinfer_api_get(void);

/* What is opened: the setting, or the default path (lib/libattnd_flashinfer.so beside the
 * executable, resolved to an absolute path). */
const char *flashinfer_library_requested(void);

/* The file the module was mapped from, symlinks resolved; "" when not loadable. */
const char *flashinfer_library_path(void);

/* FlashInfer's version in the module ("0.7.4"); "" when not loadable. */
const char *flashinfer_version(void);

#ifdef __cplusplus
}
#endif
#endif
