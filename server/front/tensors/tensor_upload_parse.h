/* tensor_upload_parse.h — what a POST /v1/tensors carries: its query, judged from the head
 * alone, and the tensors its body holds (raw bytes, .npy or safetensors), read from the
 * header bytes of the memfd it arrived in. Pure parsing: no table, no device.
 */
#ifndef TENSOR_UPLOAD_PARSE_H
#define TENSOR_UPLOAD_PARSE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/attn.h"
#include "server/front/tensors/tensor_table.h"

/* One tensor of an upload: where its bytes lie in the body. */
typedef struct upload_spec {
    char name[TENSOR_NAME_MAX];
    attn_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t offset, bytes;
} upload_spec;

/* The query of an upload (an object of strings), as far as it can be judged without the
 * body: unknown parameters, a bad name, format, dtype or shape, parameters that conflict with
 * the format, and a raw body whose declared length (>= 0; -1 unknown) is not shape × dtype.
 * 0, or -1 with e (400). */
int tensor_upload_check_query(const cJSON *query, long long declared, api_error *e);

/* The tensors of a body of size bytes in fd (the query checked already): *specs malloc'd
 * (caller frees), *count of them, *multi when the format lists several (safetensors:
 * answered as a list). 0, or -1 with e (400; 500 when it cannot be read). */
int tensor_upload_parse_body(const cJSON *query, int fd, uint64_t size, upload_spec **specs, int *count, int *multi,
                             api_error *e);

#endif
