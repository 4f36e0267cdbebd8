/* tensor_upload.h — an upload's tensors into the worker's memory (common/proto.h):
 *   tensor_put     all at once, or the end of a staged upload (its "stage" key);
 *   tensor_stage   while the body arrives: each message copies what is in the memfd now;
 *   tensor_unstage a staged upload dropped (its request ended without a put).
 * For tensor_messages.c.
 */
#ifndef TENSOR_UPLOAD_H
#define TENSOR_UPLOAD_H

#include <cjson/cJSON.h>

#include "common/api_error.h"

/* tensor_put: the reply members ("tensors": [{id, fingerprint}], "copy_s", "fingerprint_s"),
 * or NULL with e, nothing kept (400, 409 an id taken, 507, 500). */
cJSON *tensor_upload_put(const cJSON *msg, int fd, api_error *e);

/* tensor_stage: the reply members ("staged": the body's bytes copied so far, "copy_s",
 * "fingerprint_s"), or NULL with e (the staged upload dropped: its put copies everything). */
cJSON *tensor_upload_stage(const cJSON *msg, int fd, api_error *e);

/* tensor_unstage: an empty reply (an unknown key is not an error: the worker may have
 * restarted, or the put came first). */
cJSON *tensor_upload_unstage(const cJSON *msg, api_error *e);

#endif
