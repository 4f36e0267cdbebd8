/* tensor_download.h — tensor_get (common/proto.h): a resident tensor's bytes, after an npy
 * header when asked, into a fresh memfd, or into the front's memfd while it sends (a streamed
 * download, its progress in a page past the body). For tensor_messages.c.
 */
#ifndef TENSOR_DOWNLOAD_H
#define TENSOR_DOWNLOAD_H

#include <cjson/cJSON.h>

#include "common/api_error.h"

/* The reply members ("bytes", "fill_s") with *out_fd the memfd (-1 for a streamed download,
 * written into in_fd), or NULL with e (410 gone, 499 cancelled, 507, 500). */
cJSON *tensor_download_get(const cJSON *msg, int in_fd, int *out_fd, api_error *e);

#endif
