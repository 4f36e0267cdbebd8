/* health.c — GET /healthz (the process answers) and GET /readyz (every worker is up). */
#include "front/routes/routes.h"

#include "front/pool.h"

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
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, ready ? 200 : 503, o);
    cJSON_Delete(o);
}
