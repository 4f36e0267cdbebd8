/* run_request.h — one run, as the client asked for it: the problem plus how to measure it.
 *
 * The front builds it from the query string and/or JSON body (run_request_parse), sends it
 * to a worker as JSON (run_request_to_json / run_request_from_json), and stores it with the
 * result as "params". One codec for every direction, so a stored run can be replayed. All of
 * it comes from one table of run parameters (run_request_params, in run_request.c): a new
 * parameter is a row there, its field here, and at most a check across parameters.
 */
#ifndef RUN_REQUEST_H
#define RUN_REQUEST_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "common/attn.h"
#include "common/api_error.h"
#include "common/model_presets.h"

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
/* A serving batch (docs/api.md#ragged-batches, #paged-kv-caches): at most RUN_MAX_SEQS
 * sequences with lengths of their own, each and all together at most RUN_MAX_TOKENS tokens
 * (cu_seqlens and page ids are int32, as FlashAttention, cuDNN and FlashInfer hold them);
 * pages of at most RUN_MAX_PAGE_SIZE tokens, a block table of at most RUN_MAX_TOKENS entries. */
#define RUN_MAX_SEQS 4096
#define RUN_MAX_TOKENS 2147483647LL /* 2^31 - 1 */
#define RUN_MAX_PAGE_SIZE (1LL << 20)

/* Per-sequence lengths (`seqlens_q`, `seqlens_kv`) as the client gave them: a list, or a
 * distribution the run's seed draws from (docs/inputs.md). Once parsed, `len` holds the
 * batch's lengths either way, so nothing downstream asks which. */
/* TENSOR: the lengths are a resident int32 tensor [batch] (`seqlens_kv=t4`); whoever holds its
 * values (the front's copy, the worker's bytes) fills them in with run_request_tensor_lengths. */
typedef enum run_seqlens_kind {
    RUN_SEQLENS_NONE = 0,
    RUN_SEQLENS_LIST,
    RUN_SEQLENS_UNIFORM,
    RUN_SEQLENS_TENSOR
} run_seqlens_kind;

typedef struct run_seqlens {
    run_seqlens_kind kind;
    int count;                 /* LIST, TENSOR (once filled in): the lengths given (batch must agree) */
    char tensor[32];           /* TENSOR: its id */
    int64_t min, max;          /* UNIFORM: drawn between them, both included */
    int32_t len[RUN_MAX_SEQS]; /* sequence b's length, b < batch; all of them the bound when not given */
} run_seqlens;
/* Tags: labels a client gives a run to find it again (GET /v1/runs?tag=), at most
 * RUN_MAX_TAGS of 1..RUN_TAG_MAX_LEN characters of RUN_TAG_CHARS each. */
#define RUN_MAX_TAGS 8
#define RUN_TAG_MAX_LEN 32
#define RUN_TAG_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
#define RUN_TAGS_TEXT (RUN_MAX_TAGS * (RUN_TAG_MAX_LEN + 1)) /* the tags joined by commas, and a NUL */

typedef struct run_request {
    char backend[32];       /* a name from the variants table */
    char device[16];        /* "cpu" or "cuda:N"; "" before the front resolves the default */
    char model[MODEL_NAME_MAX]; /* the preset it started from (model_presets.h); "": none */
    attn_problem problem;   /* scale already resolved (1/sqrt(D) unless given, or the model's) */
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
    char block_table_tensor[32]; /* a paged cache's block table, int32 [batch, pages per sequence] */
    int keep_output;        /* 1: keep the output as a resident tensor */
    char output_tensor[32]; /* its id, chosen by the front before the run ("" otherwise) */
    /* A ragged batch: the lengths of each side (problem.ragged says which were given; the
     * totals and bounds are in problem). Paging is problem.page_size and num_pages. */
    run_seqlens seqlens_q, seqlens_kv;
    char tags[RUN_TAGS_TEXT]; /* the run's tags joined by commas, in the client's order; "": none */
    unsigned given;         /* RUN_GIVEN_* bits: which of these parameters the client set itself */
    /* The study a run belongs to (docs/api.md, Studies): set by the front, never by a
     * parameter, and not in "params" (the record says it as "study"). 0: none. */
    long long study_id;
    int study_round;        /* 1-based */
    char study_variant[48]; /* "flash" or "flash:tma", as the study names it */
} run_request;

#define RUN_GIVEN_BATCH 1u
#define RUN_GIVEN_HEADS 2u
#define RUN_GIVEN_SEQ_Q 4u
#define RUN_GIVEN_SEQ_KV 8u
#define RUN_GIVEN_HEAD_DIM 16u
#define RUN_GIVEN_DTYPE 32u
#define RUN_GIVEN_CAUSAL 64u
#define RUN_GIVEN_KV_HEADS 128u
#define RUN_GIVEN_HEAD_DIM_V 256u
#define RUN_GIVEN_WINDOW 512u
#define RUN_GIVEN_SCALE 1024u
#define RUN_GIVEN_NUM_PAGES 2048u

/* ---------------------------------------------------------------- the table ------------ */

typedef enum run_param_type {
    RUN_PARAM_INT,    /* an integer in [min, max], into an int or a 64-bit field */
    RUN_PARAM_SEED,   /* 0 .. 2^64-1, into a uint64_t; as a JSON number only below 2^53 */
    RUN_PARAM_NUMBER, /* a finite real in [min, max], into a double */
    RUN_PARAM_BOOL,   /* true or false (a JSON boolean, or the text), into an int */
    RUN_PARAM_ENUM,   /* one word of `values`, into an int (or enum) field as its index */
    RUN_PARAM_STRING, /* text (one word of `values` when it has them), into a char array */
    RUN_PARAM_TENSOR, /* a resident tensor id, "t" and a decimal number, into a char array */
    RUN_PARAM_LENGTHS, /* per-sequence lengths: "128,512,77", "uniform:MIN:MAX", a JSON array or object; `set` reads it */
    RUN_PARAM_TAGS,   /* short labels: "a,b" as text, or a JSON array of strings; joined into a char array */
} run_param_type;

#define RUN_PARAM_REQUIRED 1u       /* missing: 400 missing_parameter (its `set` says it) */
#define RUN_PARAM_SERVER_SET 2u     /* in a stored "params" object and accepted back, but the server sets it */
#define RUN_PARAM_FAULT_ONLY 4u     /* an unknown parameter unless fault injection is on */
#define RUN_PARAM_NOT_IN_PARAMS 8u  /* never written to "params" */
#define RUN_PARAM_OMIT_UNSET 16u    /* written to "params" only when set (nonzero, nonempty) */
#define RUN_PARAM_OPEN 32u          /* NUMBER: min and max themselves are out of range */
#define RUN_PARAM_NONZERO 64u       /* NUMBER: 0 is out of range */

/* A value read from the query or the body, checked against its row. */
typedef struct run_value {
    long long i;   /* INT, BOOL (0 or 1), ENUM (the index of the word) */
    uint64_t u;    /* SEED */
    double d;      /* NUMBER */
    const char *s; /* ENUM, STRING, TENSOR: the text (the caller's, not copied); TAGS: text below */
    char text[RUN_TAGS_TEXT]; /* TAGS: the labels joined by commas */
    const cJSON *json; /* LENGTHS: the value as given (the caller's), for its `set` to read */
} run_value;

typedef struct run_param run_param;

/* One run parameter. A value is read by `type` and checked against min/max or `values`, then
 * stored at `offset`, or placed by `set` where a field alone cannot say it. */
struct run_param {
    const char *name;
    run_param_type type;
    size_t offset, size; /* the field of run_request; size 0: `set` places the value */
    double min, max;     /* INT and NUMBER bounds (integers below 2^53, so exact) */
    const char *values;  /* ENUM, STRING: the accepted words, "bf16|fp16|fp32" */
    const char *def;     /* the default, as a query string would spell it; NULL: none of its own */
    const char *def_doc; /* the default in docs/api.md's words, where `def` alone would not say it */
    const char *units;
    const char *meaning; /* one line for docs/api.md */
    unsigned flags;      /* RUN_PARAM_* */
    unsigned given;      /* RUN_GIVEN_* bits set when the client gives it */
    /* 0, or -1 with e. v is NULL only for a missing RUN_PARAM_REQUIRED row. */
    int (*set)(run_request *r, const run_param *p, const run_value *v, api_error *e);
    /* Writes the value to "params" where the field alone cannot; 0 or -1 (out of memory). */
    int (*put)(cJSON *params, const run_request *r, const run_param *p);
};

/* The table, in the order parameters are read, written to "params" and listed. */
extern const run_param run_request_params[];
extern const size_t run_request_params_count;

/* The table as docs/api.md holds it (between its run-params markers): a markdown table. */
void run_request_params_markdown(FILE *f);

/* ---------------------------------------------------------------- one request ----------- */

/* Every row's default (DESIGN.md: the study's shape, batch 8, heads 16, seq 1024, head_dim
 * 64, bf16, causal; and the measurement's). */
void run_request_defaults(run_request *r);

/* Parse and validate. `query` holds the query-string parameters as strings (may be NULL),
 * `body` the parsed JSON body object (may be NULL); a key in both: the query wins. Reads
 * the names, the backend, every other row in table order, then the checks across rows.
 * Returns 0, or -1 with e filled: 400 for malformed or out-of-range values and unknown
 * parameters. Whether the backend supports the problem is run_request_check's. `impl`
 * must name one of the backend's implementations (400; whether the device runs it is the
 * front's check, against the worker's hello).
 * allow_faults: accept the `fault` parameter (settings.enable_fault_injection). */
int run_request_parse(run_request *r, const cJSON *query, const cJSON *body, int allow_faults, api_error *e);

/* Resident lengths (RUN_SEQLENS_TENSOR): run_request_parse reads their ids and leaves the
 * serving checks that need the values (bounds, totals, pages, sizes) for later, so a request
 * naming one is not complete until run_request_tensor_lengths has filled in each such side
 * and run_request_resolve_serving has run. */
int run_request_lengths_pending(const run_request *r);
/* Side sl of r (&r->seqlens_q or &r->seqlens_kv) takes the n values of its tensor: each
 * length ≥ 0, at most RUN_MAX_SEQS of them. 0, or -1 with e (400 out_of_range naming the side). */
int run_request_tensor_lengths(run_request *r, run_seqlens *sl, const int32_t *len, int64_t n, api_error *e);
/* The serving checks across parameters (batch from the lengths, the bounds, the totals, the
 * pages, every tensor's size) over r as it stands now: at parse time, and again after the
 * lengths of tensors or a resident cache's num_pages are filled in. 0, or -1 with e (400). */
int run_request_resolve_serving(run_request *r, api_error *e);

/* Whether r's backend supports r's problem (common/variant_info.c), on a device of compute
 * capability cc (0: any; the front checks the architecture once it has chosen the device).
 * 0, or -1 with e: 422 unsupported, the field the limit is about. Called once by the front,
 * after resident tensors set the shape, and once by the worker. */
int run_request_check(const run_request *r, int cc, api_error *e);

/* run_request_parse for an HTTP request: `query` as above, `body` the raw body text (NULL or
 * body_len 0: none), read by json_text_parse (common/json_text.h). The body must be one JSON
 * object (else 400 bad_json, naming the byte offset: a NUL byte, junk after it); a \u0000
 * escape or a number JSON does not write (01) is 400 bad_value, a key given twice 400
 * duplicate_parameter, each naming the member. Numbers keep their text, so an integer
 * parameter written 1e3 or 8.0 is refused 400 bad_value, as in the query. */
int run_request_parse_body(run_request *r, const cJSON *query, const char *body, size_t body_len, int allow_faults,
                           api_error *e);

/* A request body as run_request_parse_body reads it, for requests that take run parameters
 * beside their own (a study): one JSON object (caller deletes), or NULL with e filled, 400
 * bad_json / bad_value / duplicate_parameter as run_request_parse_body answers. */
cJSON *run_request_body_json(const char *body, size_t body_len, api_error *e);

/* The "params" object of a result; run_request_from_json reads it back (worker side).
 * from_json returns 0, or -1 with e filled (400). */
cJSON *run_request_to_json(const run_request *r);
int run_request_from_json(run_request *r, const cJSON *json, api_error *e);

/* 1 when d names a device as the API spells it: "cpu" or "cuda:N" (N a decimal ordinal
 * without sign or leading zeros, at most 4 digits); whether it exists is the pool's
 * business. */
int run_request_device_valid(const char *d);

/* 1 when the len bytes at tag are one valid tag (1..RUN_TAG_MAX_LEN of RUN_TAG_CHARS). */
int run_request_tag_valid(const char *tag, size_t len);

/* The run parameters a client gave itself that differ from its model's preset (names joined
 * by ", " into out; "" when none, or when r names no model or the preset is not loaded). */
void run_request_model_overrides(const run_request *r, char *out, size_t len);

/* Multiply–accumulates of the reference's larger product: B·H·Sq·Skv·max(D, Dv), or in a
 * ragged batch H·max(D, Dv)·Σ Sq_b·Skv_b over its real lengths. */
long long run_request_macs(const run_request *r);

/* The most forwards a run of r makes on the cpu device (server/worker/cpu_job.c): warmup,
 * the timed ones (iters, or under the stopping rule up to max_iters, though time may stop it
 * sooner), and one more whose output is summarized. */
long long run_request_cpu_forwards(const run_request *r);

#endif
