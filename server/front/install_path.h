/* install_path.h — files attnd reads from beside its binary (the dashboard, the OpenAPI
 * document, the model presets), found the same way from a repository checkout, a build folder
 * and an installed image.
 */
#ifndef INSTALL_PATH_H
#define INSTALL_PATH_H

#include <stddef.h>

/* Find rel ("clients/dashboard", "config/models.json"), a directory when want_dir, else a
 * regular file: `configured` when not empty (only it), else rel under the cwd, then under the
 * executable's dir/../.., dir/.. and dir (the binary lives in build/ or build/test/ of the
 * repository, or in bin/ of an image). 0 with out filled, or -1. */
int install_path_find(const char *configured, const char *rel, int want_dir, char *out, size_t len);

/* The model presets (common/model_presets.h): `configured` when not empty, else
 * config/models.json found as above. 0, or -1 with err filled. */
int install_path_load_presets(const char *configured, char *err, size_t err_len);

#endif
