/* device.c — GET /v1/device: the devices served, as their workers said hello. */
#include "server/front/routes/routes.h"

#include <stdio.h>

#include "server/front/pool/pool.h"

void route_device(http_request *req)
{
    cJSON *o = pool_devices_json();
    if (!o) {
        http_fail(req, 500, "internal", "", "the device list is not available");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}
