/* history.h — what history.c (run history, cancelling, traces) shares with runs.c. */
#ifndef ROUTES_HISTORY_H
#define ROUTES_HISTORY_H

#include <stddef.h>

#include "server/front/http/http.h"

/* Has the client of req (an http_request *) gone away? http_client_gone in the shape of
 * pool.h's pool_client_gone_fn, so POST /v1/runs can hand it to pool_run_watched. */
int routes_history_client_gone(const void *req);

/* Normalize an ISO-8601 time (YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|±HH:MM], UTC when no zone)
 * to the stored form YYYY-MM-DDTHH:MM:SS.mmmZ. 0, or -1 when it is not one. */
int routes_history_parse_since(const char *text, char *out, size_t len);

#endif
