/* auth.h — bearer-token authentication of HTTP requests (auth.c).
 *
 * Tokens come from settings.token_file (one a line; blank lines and lines starting with '#'
 * are skipped; surrounding whitespace is trimmed). With no token file every request is let
 * through. With one, every request needs `Authorization: Bearer TOKEN` naming one of the
 * tokens, except /healthz and /readyz (probes never carry secrets), and GET/HEAD requests
 * when settings.public_reads is true. A refusal is 401 {"error":{"code":"unauthorized",…}}
 * with `WWW-Authenticate: Bearer realm="attnd"`, which the HTTP layer sends (http.c): this
 * module only decides, from strings, and knows nothing of HTTP connections.
 */
#ifndef AUTH_H
#define AUTH_H

#include <stddef.h>

#include "common/settings.h"

/* The WWW-Authenticate value of a refusal. */
#define AUTH_CHALLENGE "Bearer realm=\"attnd\""

/* Read the tokens of s->token_file (nothing when it is empty). 0, or -1 with err filled
 * (unreadable file, or a file with no token: refusing everyone is never what was meant). */
int auth_load(const settings *s, char *err, size_t err_len);

/* May this request go on? method and path as sent, authorization the Authorization
 * header's value or NULL. 1 yes; 0: refuse it 401 with AUTH_CHALLENGE and
 * auth_refusal_message. */
int auth_check(const char *method, const char *path, const char *authorization);

/* The message of a refusal, by whether the request carried an Authorization header. */
const char *auth_refusal_message(const char *authorization);

/* Forget the tokens (tests, shutdown). */
void auth_unload(void);

#endif
