/* health.c — GET /healthz (the process answers) and GET /readyz (every worker is up; it also
 * says where the history goes and how many writes wait for the fleet database, which does not
 * make the node unready: runs still execute while it is away). */
#include "server/front/routes/routes.h"

#include "server/front/pool/pool.h"
#include "server/front/store/store.h"

/* {"backend","database_up","outbox_depth","last_error"}: what the store says of itself. */
static cJSON *store_health_json(void)
{
    store_health h;
    cJSON *o = cJSON_CreateObject();

    store_get_health(&h);
    cJSON_AddStringToObject(o, "backend", h.backend);
    cJSON_AddStringToObject(o, "node", store_node());
    cJSON_AddBoolToObject(o, "database_up", h.database_up);
    cJSON_AddNumberToObject(o, "outbox_depth", (double)h.outbox_depth);
    if (h.last_error[0])
        cJSON_AddStringToObject(o, "last_error", h.last_error);
    else
        cJSON_AddNullToObject(o, "last_error");
    return o;
}

void route_healthz(http_request *req)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "status", "ok")) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

void route_readyz(http_request *req)
{
    int ready = pool_ready();
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddBoolToObject(o, "ready", ready);

    if (ok && !ready) ok = cJSON_AddStringToObject(o, "message", "not every worker is up yet (or one is restarting)") != NULL;
    if (ok) cJSON_AddItemToObject(o, "store", store_health_json());
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, ready ? 200 : 503, o);
    cJSON_Delete(o);
}
