/* metrics.c — GET /metrics: the Prometheus text exposition (server/front/metrics.c renders it). */
#include "server/front/routes/routes.h"

#include <stdlib.h>
#include <string.h>

#include "server/front/metrics.h"

void route_metrics(http_request *req)
{
    char *text = metrics_render();

    if (!text) {
        http_fail(req, 500, "internal", "", "out of memory rendering the metrics");
        return;
    }
    http_send_bytes(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
    free(text);
}
