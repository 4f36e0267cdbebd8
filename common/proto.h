/* proto.h — the messages between the front and its workers (over common/ipc.h's frames: a
 * 4-byte length, a JSON object, at most one file descriptor alongside).
 *
 * Every message has "type" (below) and, but for the hello, "job": the front's number for the
 * exchange, echoed in the answer.
 *
 *   worker → front, once at start
 *     hello          {"device":{…}, "variants":[…]} or {"error":"why the device did not open"}
 *   front → worker, one at a time; each answered by one of result/verify_result/
 *   tensor_result (done), error (refused, nothing ran) or failed (it ran and broke)
 *     run            {"request":{run_request}}                     → result
 *     verify         {"request":…, "output":…} + the output's memfd → verify_result
 *     tensor_put     {"budget":B, "tensors":[{"id","offset","bytes"}]} + memfd
 *                    copies each span into a new buffer; answers "tensors":[{"id",
 *                    "fingerprint"}], "copy_s", "fingerprint_s". All or nothing; 507 when the
 *                    bytes exceed the device's free memory (budget 0) before allocating.
 *     tensor_get     {"id", "npy_shape":[…], "npy_dtype"} → "bytes":N + a memfd holding the
 *                    tensor (after an npy header when asked), "fill_s";
 *                    with "progress_offset":P + the front's memfd: a streamed download,
 *                    filled in place with its progress at P (tensor_download_progress);
 *                    499 `cancelled` when the front set "cancel".
 *     tensor_delete  {"id"}
 *     tensor_stage   {"key", "body_bytes":N, "budget":B, "tensors":[{"offset","bytes"}]} + memfd
 *                    while an upload's body is still arriving: copies what the memfd holds now
 *                    (the first message allocates); answers "staged" (bytes copied), "copy_s",
 *                    "fingerprint_s". Later messages name the key only. A tensor_put with
 *                    "stage":key copies the rest and keeps the tensors; an unknown key or other
 *                    spans make it copy everything. An error drops the staged upload.
 *     tensor_unstage {"key"}  a staged upload whose request ended without its put: dropped
 *   Unknown tensor ids answer 410: the front knew it, so this worker must have restarted.
 */
#ifndef PROTO_H
#define PROTO_H

#include <stdint.h>

typedef enum proto_type {
    PROTO_UNKNOWN = 0,
    PROTO_HELLO,
    PROTO_RUN,
    PROTO_RESULT,
    PROTO_VERIFY,
    PROTO_VERIFY_RESULT,
    PROTO_TENSOR_PUT,
    PROTO_TENSOR_GET,
    PROTO_TENSOR_DELETE,
    PROTO_TENSOR_STAGE,
    PROTO_TENSOR_UNSTAGE,
    PROTO_TENSOR_RESULT,
    PROTO_ERROR,
    PROTO_FAILED,
    PROTO_TYPE_COUNT
} proto_type;

/* The wire name of t ("tensor_put"); "unknown" for PROTO_UNKNOWN. */
const char *proto_type_name(proto_type t);

/* The type of a message's "type" string; PROTO_UNKNOWN for NULL or an unknown name. */
proto_type proto_type_parse(const char *name);

/* The progress of a streamed download, shared by the front and the worker through a page
 * of the download's memfd past its body (both map it MAP_SHARED). Read and written with
 * __atomic builtins: the worker stores "filled" with release order after each piece is in
 * the memfd, so a reader that loads it with acquire order may pread [0, filled). */
typedef struct tensor_download_progress {
    uint64_t filled;  /* worker: bytes [0, filled) of the body are in the memfd */
    uint64_t total;   /* worker: the body's size, N (set before state becomes STARTED) */
    uint32_t state;   /* worker: TENSOR_DOWNLOAD_* (0 until the worker starts) */
    uint32_t cancel;  /* front: nobody will read the rest (the client went away): stop */
} tensor_download_progress;

enum { TENSOR_DOWNLOAD_WAITING = 0, TENSOR_DOWNLOAD_STARTED = 1, TENSOR_DOWNLOAD_DONE = 2, TENSOR_DOWNLOAD_FAILED = 3 };

#endif
