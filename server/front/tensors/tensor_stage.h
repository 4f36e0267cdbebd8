/* tensor_stage.h — a large upload copied to its GPU while its body still arrives.
 *
 * Without it a 1 GiB upload is received (at the client's rate), then copied and fingerprinted
 * by the worker, one after the other. With it a thread of the upload's own reads the memfd's
 * size as the body lands, parses its header as soon as it is in, and sends the worker a
 * tensor_stage message for each TENSOR_STAGE_STEP_BYTES that landed: the worker copies what is
 * there and returns, so runs queued on the device wait no longer than a step's copy, and a slow
 * client holds nothing. The handler's tensor_put, with the stage's key, copies the rest.
 */
#ifndef TENSOR_STAGE_H
#define TENSOR_STAGE_H

#include <stdint.h>

#include <cjson/cJSON.h>

/* Uploads from this size on are staged; smaller ones are copied fast enough at their end. */
#define TENSOR_STAGE_MIN_BYTES ((uint64_t)64 << 20)
/* The bytes that land between two tensor_stage messages. */
#define TENSOR_STAGE_STEP_BYTES ((uint64_t)32 << 20)

typedef struct tensor_stage tensor_stage;

/* Start staging the body_bytes-byte body that lands in fd (dup'd: the caller's stays its own) for
 * device, its query (copied) telling its format, budget the memory_budget_bytes its messages
 * carry. NULL when it cannot start (out of memory, no thread): the upload is copied at its end. */
tensor_stage *tensor_stage_start(const char *device, const cJSON *query, int fd, uint64_t body_bytes, long long budget);

/* What a stage did by the time its body was whole (tensor_stage_finish). */
typedef struct tensor_stage_report {
    char key[32];           /* the worker's name for it: the put's "stage"; "" when nothing is staged */
    uint64_t staged_bytes;  /* the body's bytes the worker had copied */
    double staged_s;        /* the worker's time in tensor_stage messages (copy and fingerprint) */
} tensor_stage_report;

/* The body is whole: stop staging (waiting for a message in flight) and say what is staged. */
void tensor_stage_finish(tensor_stage *s, tensor_stage_report *report);

/* The request ends. put_sent: a tensor_put named the stage's key (the worker took it); else
 * the worker's staged copy, if any, is dropped (tensor_unstage) by the stage's thread, which
 * then frees s. NULL allowed. */
void tensor_stage_drop(tensor_stage *s, int put_sent);

#endif
