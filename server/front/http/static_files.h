/* static_files.h — files attnd serves as they are: the dashboard (clients/dashboard) and
 * the OpenAPI document (docs/openapi.json), from a folder install_path_find found. No build
 * step, nothing generated.
 */
#ifndef STATIC_FILES_H
#define STATIC_FILES_H

#include <stddef.h>

#include "server/front/http/http.h"

/* Is name a plain file name that may be served: [A-Za-z0-9._-], not starting with '.',
 * under 100 bytes? (So no path can leave the directory.) */
int static_name_ok(const char *name);

/* Answer with dir/name (a regular file, at most 8 MiB) and the content type of its
 * extension; 404 with a clear message when it is not there. */
void static_send_file(http_request *req, const char *dir, const char *name);

#endif
