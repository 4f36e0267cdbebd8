/* nodes.c — GET /v1/nodes: every node of the fleet (this one alone with SQLite), as its
 * heartbeats left it: name, instance, version, devices, start, last heartbeat and its age. */
#include "front/routes/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "front/store.h"

void route_nodes(http_request *req)
{
    char *nodes = store_nodes_json(), *out;
    size_t n;

    if (!nodes) {
        if (!store_available()) {
            if (http_add_header(req, "Retry-After", "2") != 0) log_warn("cannot add Retry-After");
            http_fail(req, 503, "store_unavailable", "", "the fleet's database is away: the nodes cannot be read now");
        } else {
            http_fail(req, 500, "store_error", "", "the nodes could not be read");
        }
        return;
    }
    n = strlen(nodes) + 64 + strlen(store_node());
    out = malloc(n);
    if (!out) {
        free(nodes);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    snprintf(out, n, "{\"nodes\":%s,\"this_node\":\"%s\"}", nodes, store_node());
    free(nodes);
    http_send_json_text(req, 200, out, strlen(out));
    free(out);
}
