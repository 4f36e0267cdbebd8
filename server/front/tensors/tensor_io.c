/* tensor_io.c — tensor_* messages to the workers, memfd reads and rates (tensor_io.h). */
#include "server/front/tensors/tensor_io.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/proto.h"
#include "server/front/pool/pool.h"

double tensor_gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

int tensor_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

void tensor_reply_error(const cJSON *reply, int status, api_error *e)
{
    const cJSON *err = cJSON_GetObjectItem(reply, "error"), *type = cJSON_GetObjectItem(reply, "type");
    const cJSON *st = cJSON_GetObjectItem(err, "status"), *code = cJSON_GetObjectItem(err, "code"),
                *msg = cJSON_GetObjectItem(err, "message"), *field = cJSON_GetObjectItem(err, "field");
    if (proto_type_parse(cJSON_GetStringValue(type)) == PROTO_FAILED) {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        api_fail(e, 500, "tensor_op_failed", "", "%s", cJSON_IsString(m) ? m->valuestring : "the worker failed");
        return;
    }
    api_fail(e, cJSON_IsNumber(st) ? (int)st->valuedouble : status >= 400 ? status : 500,
             cJSON_IsString(code) ? code->valuestring : "tensor_op_failed", cJSON_IsString(field) ? field->valuestring : "",
             "%s", cJSON_IsString(msg) ? msg->valuestring : "the worker refused the tensor operation");
}

int tensor_exchange(const char *device, cJSON *msg, int fd, cJSON **reply, int *reply_fd, int *gen, api_error *e)
{
    int status = pool_tensor_op(device, msg, fd, reply, reply_fd, gen);
    const cJSON *type = cJSON_GetObjectItem(*reply, "type");

    if (status == 200 && proto_type_parse(cJSON_GetStringValue(type)) == PROTO_TENSOR_RESULT) return 0;
    tensor_reply_error(*reply, status, e);
    cJSON_Delete(*reply);
    *reply = NULL;
    if (*reply_fd >= 0) close(*reply_fd);
    *reply_fd = -1;
    return -1;
}
