/* variants.h — the table of attention variants: the one place that says what attnd can run.
 *
 * The front reads the table (names, limits, availability) to validate requests and answer
 * /v1/variants without touching CUDA; workers call `forward`. Each variant family lives in
 * one file (reference.c, naive.cu, math.cu, …) and exports only its entries here.
 */
#ifndef VARIANTS_H
#define VARIANTS_H

#include <stddef.h>

#include "attn.h"
#include "exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VARIANT_DTYPE(t) (1u << (t))

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
    const char *name;     /* as the API spells it: "naive", "math", … */
    const char *summary;  /* one line: what it does and whose cost structure it copies */
    int on_cpu;           /* 1: runs on the cpu device only; 0: needs a GPU */
    unsigned dtypes;      /* VARIANT_DTYPE bits */
    int min_cc;           /* lowest compute capability (major·10 + minor); 0: any */
    int max_head_dim;     /* 0: any */
    int head_dim_multiple;/* head_dim must be a multiple of this (1: any) */
    /* Further limits of this variant; NULL when there are none. Returns 0 when p is
     * supported, else -1 with a message that names the limit. */
    int (*check)(const attn_problem *p, char *why, size_t why_len);
    /* Scratch bytes one forward needs besides q, k, v and out (device memory on a GPU). */
    size_t (*workspace_bytes)(const attn_problem *p);
    /* Enqueue one forward: read t->q,k,v, write every element of t->out. On a GPU: on
     * ctx->stream, no allocation, no synchronisation (graph-capturable). On the cpu device:
     * runs to completion, ctx->device is -1. Returns 0, or -1 with ctx->error set. */
    int (*forward)(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);
    /* What the library chose for p after a forward (cuDNN's engine and knobs), reported as
     * the result's "engine"; NULL for variants whose kernels are their own. */
    const char *(*engine_desc)(const attn_problem *p);
    /* 0 when a library the variant needs can be loaded here, else -1 and why (cuDNN is
     * opened at run time); NULL: nothing to load. */
    int (*library_ready)(char *why, size_t why_len);
    /* Fill *out with the library library_ready opens; NULL: nothing to load. */
    void (*library_info)(variant_library *out);
} variant;

extern const variant variants[];
extern const size_t variants_count;

/* NULL when no variant has that name. */
const variant *variant_find(const char *name);

/* 0 when variant v can run problem p on a device of compute capability cc (0 for the cpu
 * device); else -1 and a message naming the limit (dtype, head_dim, arch, …). */
int variant_check(const variant *v, const attn_problem *p, int cc, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
