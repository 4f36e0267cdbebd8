/* variants.h — the variants' code: one row per variant (common/variant_info.h says what it
 * is and which problems it takes), with its forward and workspace. Only workers use it. Each
 * variant family lives in one file (reference.c, naive.cu, math.cu, …) and exports only its
 * entries here.
 */
#ifndef VARIANTS_H
#define VARIANTS_H

#include <stddef.h>

#include "common/attn.h"
#include "common/variant_info.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A library a variant opens at run time, as this process loaded it (or tried to): what
 * /v1/variants and the run record show, so a number can be traced to the library that
 * made it. Strings are "" when unknown. */
typedef struct variant_library {
    const char *name;     /* "cuDNN" */
    char requested[512];  /* what the settings asked for: a path, or the soname searched */
    char version[32];     /* "9.19.0"; "" when it did not load */
    char path[4096];      /* the file it was mapped from, symlinks resolved; "" when it did not load */
} variant_library;

typedef struct variant {
    const variant_info *info; /* name, limits, problem check: common/variant_info.h */
    /* Scratch bytes one forward needs besides q, k, v and out (device memory on a GPU). */
    size_t (*workspace_bytes)(const attn_problem *p);
    /* Enqueue one forward: read t->q,k,v, write every element of t->out. On a GPU: on
     * ctx->stream, no allocation, no synchronisation (graph-capturable). On the cpu device:
     * runs to completion, ctx->device is -1. Returns 0, or -1 with ctx->error set. */
    int (*forward)(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);
    /* Once per job, after the workspace is allocated and before the first forward, outside
     * the timing: what a caller builds once and passes on every call (math: a window's bool
     * attn_mask). May synchronise. 0, or -1 with ctx->error set. NULL: nothing. */
    int (*prepare)(exec_context *ctx, const attn_problem *p, void *workspace);
    /* Whether the library runs p on this device, asked before anything is allocated: 0 yes, 1
     * no with why (the library's reason: a 422), -1 a failure, why says what. NULL: the
     * problem checks say it all. */
    int (*library_check)(const attn_problem *p, char *why, size_t why_len);
    /* What the library chose for p after a forward (cuDNN's engine and knobs), reported as
     * the result's "engine"; NULL for variants whose kernels are their own. */
    const char *(*engine_desc)(const attn_problem *p);
    /* 0 when a library the variant needs can be loaded here, else -1 and why (cuDNN is
     * opened at run time); NULL: nothing to load. */
    int (*library_ready)(char *why, size_t why_len);
    /* Fill *out with the library library_ready opens; NULL: nothing to load. */
    void (*library_info)(variant_library *out);
    /* Its kernel families (info->impls, the `impl` run parameter), numbered as attn_problem.impl
     * numbers them (1 + the index in info->impls); NULL: it has one. forward runs the one p->impl
     * asks for (0: the default); impl_runnable says whether family impl runs on compute
     * capability cc in this binary; impl_used the family a forward of p runs, fallbacks applied. */
    int (*impl_runnable)(int impl, int cc);
    int (*impl_used)(int cc, const attn_problem *p);
} variant;

extern const variant variants[];
extern const size_t variants_count;

/* NULL when no variant has that name. */
const variant *variant_find(const char *name);


#ifdef __cplusplus
}
#endif
#endif
