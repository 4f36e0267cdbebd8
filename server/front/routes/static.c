/* static.c — the files the front serves as they are: the dashboard and the OpenAPI document
 * (server/front/install_path.c finds them, server/front/http/static_files.c sends them). */
#include "server/front/routes/routes.h"

#include "server/front/install_path.h"
#include "server/front/http/static_files.h"

static int dashboard_dir(http_request *req, char *dir, size_t len)
{
    if (install_path_find(req->settings ? req->settings->dashboard_dir : NULL, "clients/dashboard", 1, dir, len) == 0)
        return 0;
    http_fail(req, 404, "not_found", "",
              "the dashboard's files are not found: set dashboard_dir, or run attnd from the repository "
              "(clients/dashboard)");
    return -1;
}

void route_dashboard(http_request *req)
{
    char dir[1024];
    if (dashboard_dir(req, dir, sizeof dir) == 0) static_send_file(req, dir, "index.html");
}

void route_dashboard_file(http_request *req)
{
    char dir[1024];
    if (dashboard_dir(req, dir, sizeof dir) == 0) static_send_file(req, dir, req->id);
}

void route_openapi(http_request *req)
{
    char dir[1024];

    if (install_path_find(NULL, "docs", 1, dir, sizeof dir) != 0) {
        http_fail(req, 404, "not_found", "", "docs/openapi.json is not found beside the binary or in the cwd");
        return;
    }
    static_send_file(req, dir, "openapi.json");
}
