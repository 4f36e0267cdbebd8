/* run_device.h — choose and check the device of a parsed run, as POST /v1/runs does
 * (server/front/routes/runs.c) and `attnd batch` does (server/front/batch/batch.c): the default device of its
 * backend, or the one it named, checked against what that device's worker said in its hello.
 */
#ifndef RUN_DEVICE_H
#define RUN_DEVICE_H

#include "common/run_request.h"
#include "common/variant_info.h"

/* Set r->device (unless the client named one) and check that it can run r: it exists and is
 * up (503 no_device), it suits the backend (422 unsupported), the cpu device is not asked for
 * an L2 flush or a CUDA graph (422 not_applicable), the backend's library loaded and its impl
 * runs there (422 unsupported). v: r's backend, already validated. Needs a started pool.
 * 0, or -1 with e filled. */
int run_device_resolve(run_request *r, const variant_info *v, api_error *e);

#endif
