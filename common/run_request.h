/* run_request.h — one run, as the client asked for it: the problem plus how to measure it.
 *
 * The front builds it from the query string and/or JSON body (run_request_parse), sends it
 * to a worker as JSON (run_request_to_json / run_request_from_json), and stores it with the
 * result as "params". One codec for every direction, so a stored run can be replayed.
 */
#ifndef RUN_REQUEST_H
#define RUN_REQUEST_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/attn.h"
#include "common/api_error.h"

/* Bounds every request is checked against (400 when exceeded). */
#define RUN_MAX_DIM (1LL << 31)         /* any single dimension */
#define RUN_MAX_ELEMS (1LL << 40)       /* elements of any one tensor, scores included */
#define RUN_MAX_WARMUP 10000
#define RUN_MAX_ITERS 100000
#define RUN_MAX_TIME_MS 600000.0
/* |scale| at most this: scores are scaled in the input dtype by some variants (fp16 holds up
 * to 65504), and beyond ~1e4 softmax is a hard max anyway; far larger values turn inf in
 * fp32 and the output NaN. The default, 1/sqrt(head_dim), is at most 1. */
#define RUN_MAX_SCALE 1e4

typedef struct run_request {
    char backend[32];       /* a name from the variants table */
    char device[16];        /* "cpu" or "cuda:N"; "" before the front resolves the default */
    attn_problem problem;   /* scale already resolved (1/sqrt(D) unless given) */
    int scale_given;        /* 1 when the client set scale */
    uint64_t seed;
    int warmup;             /* forwards before timing */
    int iters;              /* > 0: exactly this many timed forwards; 0: the stopping rule */
    int min_iters, max_iters;
    double min_time_ms, max_time_ms;
    double target_noise;    /* stop when the relative standard error of the mean is below it */
    int cache_cold;         /* 1: flush L2 before every timed forward (outside the timing) */
    int graph;              /* 1: time replays of a captured CUDA graph of one forward */
    int verify;             /* 1: compare the output with the fp64 reference */
    int profile;            /* 1: one extra forward under CUPTI for the kernel table */
    long long verify_cpu_max_macs; /* set by the front from settings: above it, GPU fp32 reference */
    int async_run;          /* 1 (`async=true`): answer 202 at once; the front only, not in "params" */
    char impl[16];          /* the backend's kernel family (variant_info.impls); "": its default */
    char fault[16];         /* test hook, only with enable_fault_injection: crash|hang|sticky */
    /* Resident tensors (docs/tensors.md): q, k, v ids ("t4"; "" = generated from
     * the seed); the front's tensors_apply_run takes shape and dtype from them. */
    char q_tensor[32], k_tensor[32], v_tensor[32];
    int keep_output;        /* 1: keep the output as a resident tensor */
    char output_tensor[32]; /* its id, chosen by the front before the run ("" otherwise) */
    unsigned given;         /* RUN_GIVEN_* bits: the shape parameters the client set itself */
} run_request;

#define RUN_GIVEN_BATCH 1u
#define RUN_GIVEN_HEADS 2u
#define RUN_GIVEN_SEQ_Q 4u
#define RUN_GIVEN_SEQ_KV 8u
#define RUN_GIVEN_HEAD_DIM 16u
#define RUN_GIVEN_DTYPE 32u

/* The study's shape and the measurement defaults (DESIGN.md): batch 8, heads 16, seq 1024,
 * head_dim 64, bf16, causal. */
void run_request_defaults(run_request *r);

/* Parse and validate. `query` holds the query-string parameters as strings (may be NULL),
 * `body` the parsed JSON body object (may be NULL); a key in both: the query wins.
 * Accepts seq (sets seq_q and seq_kv), seq_q, seq_kv, causal (true/false), mask
 * (none|causal|causal_bottom_right), cache (hot|cold), booleans as true/false/1/0.
 * Returns 0, or -1 with e filled: 400 for malformed or out-of-range values and unknown
 * parameters. Whether the backend supports the problem is run_request_check's. `impl`
 * must name one of the backend's implementations (400; whether the device runs it is the
 * front's check, against the worker's hello).
 * allow_faults: accept the `fault` parameter (settings.enable_fault_injection). */
int run_request_parse(run_request *r, const cJSON *query, const cJSON *body, int allow_faults, api_error *e);

/* Whether r's backend supports r's problem (common/variant_info.c), on a device of compute
 * capability cc (0: any; the front checks the architecture once it has chosen the device).
 * 0, or -1 with e: 422 unsupported, the field the limit is about. Called once by the front,
 * after resident tensors set the shape, and once by the worker. */
int run_request_check(const run_request *r, int cc, api_error *e);

/* run_request_parse for an HTTP request: `query` as above, `body` the raw body text (NULL or
 * body_len 0: none). The body must be a JSON object without NUL bytes (else 400 bad_json,
 * naming the byte offset). The text is read as well as the parsed value, because a parsed
 * number no longer says how it was written: an integer parameter given as a JSON number
 * with a fraction or an exponent (1e3, 8.0) is refused 400 bad_value, as in the query. */
int run_request_parse_body(run_request *r, const cJSON *query, const char *body, size_t body_len, int allow_faults,
                           api_error *e);

/* The "params" object of a result; run_request_from_json reads it back (worker side).
 * from_json returns 0, or -1 with e filled (400). */
cJSON *run_request_to_json(const run_request *r);
int run_request_from_json(run_request *r, const cJSON *json, api_error *e);

/* 1 when d names a device as the API spells it: "cpu" or "cuda:N" (N a decimal ordinal
 * without sign or leading zeros, at most 4 digits); whether it exists is the pool's
 * business. */
int run_request_device_valid(const char *d);

/* Multiply–accumulates of the reference: B·H·Sq·Skv·D. */
long long run_request_macs(const run_request *r);

#endif
