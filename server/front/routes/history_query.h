/* history_query.h — GET /v1/runs' query string, checked and turned into a store query
 * (store.h's store_run_query): cursors, order, limit, every filter, group_by and format. */
#ifndef ROUTES_HISTORY_QUERY_H
#define ROUTES_HISTORY_QUERY_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "server/front/store/store.h"

typedef enum history_format { HISTORY_JSON, HISTORY_CSV } history_format;

typedef struct history_request {
    store_run_query q;      /* its strings point into the query object, or into since below */
    history_format format;
    char since[40];         /* q.since, normalized */
    char numbers[STORE_FIELD_COUNT][24]; /* the integer filters, normalized (q.value points here) */
} history_request;

/* Read query (an object of strings: http_request.query) into h. 0; -1 with e filled (400
 * naming the parameter: unknown names, bad values, a backend, device or node that cannot be
 * in this history); -2 when the store could not say whether a node is known (the caller
 * answers as for a failed read). h points into query: keep query alive while h is used. */
int history_query_parse(const cJSON *query, history_request *h, api_error *e);

/* Normalize an ISO-8601 time (YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|±HH:MM], UTC when no zone)
 * to the stored form YYYY-MM-DDTHH:MM:SS.mmmZ. 0, or -1 when it is not one. */
int history_query_parse_since(const char *text, char *out, size_t len);

#endif
