/* auth.h — bearer-token authentication of HTTP requests (auth.c).
 *
 * Tokens come from settings.token_file (one a line; blank lines and lines starting with '#'
 * are skipped; surrounding whitespace is trimmed). With no token file every request is let
 * through. With one, every request needs `Authorization: Bearer TOKEN` naming one of the
 * tokens, except /healthz and /readyz (probes never carry secrets), and GET/HEAD requests
 * when settings.public_reads is true. A refusal is 401 {"error":{"code":"unauthorized",…}}
 * with `WWW-Authenticate: Bearer realm="attnd"`.
 */
#ifndef AUTH_H
#define AUTH_H

#include <stddef.h>

#include "front/http.h"
#include "common/settings.h"

/* Read the tokens of s->token_file (nothing when it is empty). 0, or -1 with err filled
 * (unreadable file, or a file with no token: refusing everyone is never what was meant). */
int auth_load(const settings *s, char *err, size_t err_len);

/* Is this request allowed? 1: go on. 0: it was answered 401 already. */
int auth_allow(http_request *req);

/* The check itself, without HTTP (unit tests): authorization is the header's value or NULL. */
int auth_check(const char *method, const char *path, const char *authorization);

/* Forget the tokens (tests, shutdown). */
void auth_unload(void);

#endif
