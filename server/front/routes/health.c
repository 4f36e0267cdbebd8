/* health.c — GET /healthz (the process answers) and GET /readyz (every worker is up and this
 * machine's store file takes writes, so an accepted run's result is kept; it also says where
 * the history goes and how many writes wait for the fleet database, which does not make the
 * node unready: runs still execute while it is away). */
#include "server/front/routes/routes.h"

#include <stdio.h>

#include "server/front/pool/pool.h"
#include "server/front/store/store.h"

/* {"backend","node","database_up","outbox_depth","last_error","writable",…}: what the store
 * says of itself. */
static cJSON *store_health_json(const store_health *h)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "backend", h->backend);
    cJSON_AddStringToObject(o, "node", store_node());
    cJSON_AddBoolToObject(o, "database_up", h->database_up);
    cJSON_AddNumberToObject(o, "outbox_depth", (double)h->outbox_depth);
    if (h->last_error[0])
        cJSON_AddStringToObject(o, "last_error", h->last_error);
    else
        cJSON_AddNullToObject(o, "last_error");
    cJSON_AddStringToObject(o, "file", h->file);
    cJSON_AddBoolToObject(o, "writable", h->writable);
    if (h->write_error[0])
        cJSON_AddStringToObject(o, "write_error", h->write_error);
    else
        cJSON_AddNullToObject(o, "write_error");
    cJSON_AddNumberToObject(o, "pending_records", (double)h->pending_records);
    cJSON_AddNumberToObject(o, "pending_in_memory", (double)h->pending_in_memory);
    cJSON_AddNumberToObject(o, "write_failures", (double)h->write_failures);
    cJSON_AddNumberToObject(o, "reserve_bytes", (double)h->reserve_bytes);
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
    int workers_up = pool_ready(), ready;
    store_health h;
    char message[1600];
    cJSON *o = cJSON_CreateObject();
    int ok;

    store_get_health(&h);
    ready = workers_up && h.writable;
    ok = o && cJSON_AddBoolToObject(o, "ready", ready);
    if (ok && !ready) {
        /* The store's reason names its backend and file, so a probe's log says what to fix. */
        if (!h.writable && h.pending_records > 0)
            snprintf(message, sizeof message, "%sthe %s store cannot keep new runs: %s (%lld record(s) wait in %.400s)",
                     workers_up ? "" : "not every worker is up yet (or one is restarting); ", h.backend, h.write_error,
                     h.pending_records, h.journal);
        else if (!h.writable)
            snprintf(message, sizeof message, "%sthe %s store cannot keep new runs: %s",
                     workers_up ? "" : "not every worker is up yet (or one is restarting); ", h.backend, h.write_error);
        else
            snprintf(message, sizeof message, "not every worker is up yet (or one is restarting)");
        ok = cJSON_AddStringToObject(o, "message", message) != NULL;
    }
    if (ok) cJSON_AddItemToObject(o, "store", store_health_json(&h));
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, ready ? 200 : 503, o);
    cJSON_Delete(o);
}
