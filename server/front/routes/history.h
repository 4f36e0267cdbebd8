/* history.h — what history.c (run history, cancelling, traces) shares with runs.c. */
#ifndef ROUTES_HISTORY_H
#define ROUTES_HISTORY_H

#include <stddef.h>

#include "server/front/http/http.h"

/* Has the client of req (an http_request *) gone away? http_client_gone in the shape of
 * pool.h's pool_client_gone_fn, so POST /v1/runs can hand it to pool_run_watched. */
int routes_history_client_gone(const void *req);

#endif
