/* tensor_messages.c — the tensor_* messages a worker answers (tensors.h, common/proto.h), each
 * handed to the file that does it. */
#include "server/worker/tensors/tensors.h"

#include "server/worker/tensors/tensor_download.h"
#include "server/worker/tensors/tensor_upload.h"

static cJSON *tensor_delete(const cJSON *msg, api_error *e)
{
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "id"));

    if (worker_tensors_drop(id) != 0) {
        api_fail(e, 410, "gone", "id", "tensor %s is not on this worker (it restarted)", id ? id : "?");
        return NULL;
    }
    return cJSON_CreateObject();
}

cJSON *worker_tensors_handle(proto_type type, const cJSON *msg, int fd, int *out_fd, api_error *e)
{
    *out_fd = -1;
    switch (type) {
    case PROTO_TENSOR_PUT: return tensor_upload_put(msg, fd, e);
    case PROTO_TENSOR_STAGE: return tensor_upload_stage(msg, fd, e);
    case PROTO_TENSOR_UNSTAGE: return tensor_upload_unstage(msg, e);
    case PROTO_TENSOR_GET: return tensor_download_get(msg, fd, out_fd, e);
    case PROTO_TENSOR_DELETE: return tensor_delete(msg, e);
    default: api_fail(e, 400, "bad_message", "", "%s is not a tensor message", proto_type_name(type)); return NULL;
    }
}
