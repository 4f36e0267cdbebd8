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

/* The ids of the devices served, "cpu, cuda:0", for messages. */
void routes_device_list(char *out, size_t len)
{
    cJSON *o = pool_devices_json(), *list = o ? cJSON_GetObjectItemCaseSensitive(o, "devices") : NULL, *d;
    size_t n = 0;

    out[0] = '\0';
    cJSON_ArrayForEach(d, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (cJSON_IsString(id) && n < len)
            n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", id->valuestring);
    }
    if (!out[0]) snprintf(out, len, "cpu");
    cJSON_Delete(o);
}
