/* proto.c — the message types' wire names (proto.h). */
#include "common/proto.h"

#include <string.h>

static const char *const proto_names[PROTO_TYPE_COUNT] = {
    [PROTO_UNKNOWN] = "unknown",
    [PROTO_HELLO] = "hello",
    [PROTO_RUN] = "run",
    [PROTO_RESULT] = "result",
    [PROTO_VERIFY] = "verify",
    [PROTO_VERIFY_RESULT] = "verify_result",
    [PROTO_TENSOR_PUT] = "tensor_put",
    [PROTO_TENSOR_GET] = "tensor_get",
    [PROTO_TENSOR_DELETE] = "tensor_delete",
    [PROTO_TENSOR_STAGE] = "tensor_stage",
    [PROTO_TENSOR_UNSTAGE] = "tensor_unstage",
    [PROTO_TENSOR_RESULT] = "tensor_result",
    [PROTO_ERROR] = "error",
    [PROTO_FAILED] = "failed",
};

const char *proto_type_name(proto_type t)
{
    return (unsigned)t < PROTO_TYPE_COUNT ? proto_names[t] : proto_names[PROTO_UNKNOWN];
}

proto_type proto_type_parse(const char *name)
{
    int t;
    if (!name) return PROTO_UNKNOWN;
    for (t = PROTO_UNKNOWN + 1; t < PROTO_TYPE_COUNT; t++)
        if (strcmp(proto_names[t], name) == 0) return (proto_type)t;
    return PROTO_UNKNOWN;
}
