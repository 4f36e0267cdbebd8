/* nodes.c — GET /v1/nodes: every node of the fleet (this one alone with SQLite), as its
 * heartbeats left it: name, instance, version, devices, start, last heartbeat and its age.
 * A CI fleet starts a new instance per job, so the nodes whose last heartbeat is older than
 * max_age_s (default a day; 0: all) are left out of the answer, not out of the database. */
#include "server/front/routes/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/parse_int.h"
#include "server/front/store/store.h"

#define NODES_DEFAULT_MAX_AGE_S 86400

void route_nodes(http_request *req)
{
    const cJSON *item, *age_param = cJSON_GetObjectItemCaseSensitive(req->query, "max_age_s");
    long long max_age_s = NODES_DEFAULT_MAX_AGE_S;
    char *text;
    cJSON *nodes, *node, *kept, *out;

    cJSON_ArrayForEach(item, req->query) {
        if (strcmp(item->string, "max_age_s") != 0) {
            http_fail(req, 400, "unknown_parameter", item->string,
                      "unknown parameter '%.60s'; GET /v1/nodes takes max_age_s", item->string);
            return;
        }
    }
    if (age_param && (!cJSON_IsString(age_param) || parse_int_in(age_param->valuestring, 0, 1LL << 40, &max_age_s) != 0)) {
        http_fail(req, 400, "bad_value", "max_age_s", "max_age_s is a number of seconds (0: every node ever seen)");
        return;
    }
    text = store_nodes_json();
    if (!text) {
        routes_store_read_failed(req, "the nodes");
        return;
    }
    nodes = cJSON_Parse(text);
    free(text);
    kept = cJSON_CreateArray();
    out = cJSON_CreateObject();
    cJSON_ArrayForEach(node, nodes) {
        const cJSON *age = cJSON_GetObjectItemCaseSensitive(node, "heartbeat_age_s");
        if (max_age_s == 0 || !cJSON_IsNumber(age) || age->valuedouble <= (double)max_age_s)
            cJSON_AddItemToArray(kept, cJSON_Duplicate(node, 1));
    }
    cJSON_AddItemToObject(out, "nodes", kept);
    cJSON_AddStringToObject(out, "this_node", store_node());
    http_send_json(req, 200, out);
    cJSON_Delete(out);
    cJSON_Delete(nodes);
}
