/* static_files.h — files attnd serves as they are: the dashboard (clients/dashboard) and
 * the OpenAPI document (docs/openapi.json). No build step, nothing generated.
 */
#ifndef STATIC_FILES_H
#define STATIC_FILES_H

#include <stddef.h>

#include "server/front/http/http.h"

/* Find the directory rel ("clients/dashboard", "docs"): `configured` when not empty (only
 * it), else rel under the cwd, then under the executable's dir/../.., dir/.. and dir (the
 * binary lives in build/ or build/test/ of the repository). 0 with out filled, or -1. */
int static_find_dir(const char *configured, const char *rel, char *out, size_t len);

/* Is name a plain file name that may be served: [A-Za-z0-9._-], not starting with '.',
 * under 100 bytes? (So no path can leave the directory.) */
int static_name_ok(const char *name);

/* Answer with dir/name (a regular file, at most 8 MiB) and the content type of its
 * extension; 404 with a clear message when it is not there. */
void static_send_file(http_request *req, const char *dir, const char *name);

#endif
