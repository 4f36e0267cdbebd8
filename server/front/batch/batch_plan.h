/* batch_plan.h — a plan of runs for `attnd batch` (docs/plan.md): the grid of
 * `attnd-cli sweep` written as a JSON file, read, validated and expanded here into the
 * run_requests it describes, before anything runs.
 *
 *   {"backends": ["naive", "math"], "seq": [512, 1024], "params": {"verify": true}, "repeat": 1}
 *
 * Expansion order (the CLI's too): the whole grid `repeat` times over; in each, backends
 * outermost, then model, batch, heads, kv_heads, seq, seq_q_kv, head_dim, dtype, mask,
 * window, page_size, impl, cache, graph. A run's parameters are "params" plus its point of
 * the grid, parsed by run_request_parse as a POST /v1/runs body is. With "study", each point's
 * backends are one study's variants instead (batch.c runs them interleaved over rounds).
 */
#ifndef BATCH_PLAN_H
#define BATCH_PLAN_H

#include <stddef.h>

#include "common/run_request.h"

/* More runs than this is a plan mistake (a repeat or an axis too many), not a benchmark. */
#define BATCH_PLAN_MAX_RUNS 100000
#define BATCH_PLAN_MAX_REPEAT 1000

typedef struct batch_plan {
    run_request *runs; /* count runs in expansion order; malloc'd, batch_plan_free frees */
    int count;
    int backends;      /* in each pass: backends · points runs, backend b's at b·points + point */
    int points;
    int repeats;
    /* "study": each point of each pass is one study whose variants are the backends */
    int study;
    int study_rounds;
    int study_baseline; /* index into the backends */
    char (*names)[64];  /* the backends as the plan names them ("flash:tma"); malloc'd */
} batch_plan;

/* Read the plan file at path, check every key and expand it. allow_faults: accept the
 * `fault` parameter (settings.enable_fault_injection), as the server does. Returns 0, or -1
 * with err naming the file and the key, value or run at fault (nothing is kept then).
 * Whether a backend supports a run's shape, or the device runs it, is not checked here:
 * that is a refusal of that run, found when it is its turn. */
int batch_plan_load(const char *path, int allow_faults, batch_plan *plan, char *err, size_t err_len);

void batch_plan_free(batch_plan *plan);

/* "math batch=1 heads=8 seq=512 head_dim=64 dtype=bf16": a run, for progress lines. */
void batch_plan_label(const run_request *r, char *out, size_t len);

#endif
