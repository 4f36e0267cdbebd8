/* models.c — GET /v1/models: the model presets a run may name (model=NAME), each with its
 * source (config/models.json, common/model_presets.h). */
#include "server/front/routes/routes.h"

#include "common/model_presets.h"

void route_models(http_request *req)
{
    cJSON *o = model_presets_json();

    if (!o) {
        http_fail(req, 500, "internal", "", "out of memory listing the model presets");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}
