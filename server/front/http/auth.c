/* auth.c — bearer tokens (auth.h).
 *
 * The tokens are read once at start and never change while serving, so auth_check reads
 * them without a lock. Comparison is constant-time in the tokens' contents: every token is
 * compared in full (no early exit on the first differing byte, no early exit on the first
 * matching token), so response times do not reveal how much of a guess was right.
 */
#include "server/front/http/auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

#define AUTH_MAX_TOKENS 256
#define AUTH_MAX_TOKEN_LEN 512

static char *auth_tokens[AUTH_MAX_TOKENS];
static size_t auth_token_len[AUTH_MAX_TOKENS];
static int auth_ntokens;
static int auth_enabled;      /* a token file was given */
static int auth_public_reads; /* GET/HEAD need no token */

void auth_unload(void)
{
    int i;
    for (i = 0; i < auth_ntokens; i++) free(auth_tokens[i]);
    auth_ntokens = 0;
    auth_enabled = 0;
    auth_public_reads = 0;
}

int auth_load(const settings *s, char *err, size_t err_len)
{
    char line[AUTH_MAX_TOKEN_LEN + 2];
    FILE *f;
    int lineno = 0;

    auth_unload();
    auth_public_reads = s->public_reads;
    if (!s->token_file[0]) return 0;
    f = fopen(s->token_file, "r");
    if (!f) {
        snprintf(err, err_len, "token_file %s: %s", s->token_file, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        char *p = line, *end;
        size_t n;
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, err_len, "token_file %s: line %d is longer than %d characters", s->token_file, lineno,
                     AUTH_MAX_TOKEN_LEN);
            goto fail;
        }
        while (isspace((unsigned char)*p)) p++;
        end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1])) *--end = '\0';
        if (*p == '\0' || *p == '#') continue;
        n = (size_t)(end - p);
        if (auth_ntokens >= AUTH_MAX_TOKENS) {
            snprintf(err, err_len, "token_file %s: more than %d tokens", s->token_file, AUTH_MAX_TOKENS);
            goto fail;
        }
        auth_tokens[auth_ntokens] = malloc(n + 1);
        if (!auth_tokens[auth_ntokens]) {
            snprintf(err, err_len, "token_file %s: out of memory", s->token_file);
            goto fail;
        }
        memcpy(auth_tokens[auth_ntokens], p, n + 1);
        auth_token_len[auth_ntokens] = n;
        auth_ntokens++;
    }
    if (ferror(f)) {
        snprintf(err, err_len, "token_file %s: %s", s->token_file, strerror(errno));
        goto fail;
    }
    fclose(f);
    if (auth_ntokens == 0) {
        snprintf(err, err_len, "token_file %s holds no token (one a line)", s->token_file);
        auth_unload();
        return -1;
    }
    auth_enabled = 1;
    log_info("auth: %d bearer token(s) from %s%s", auth_ntokens, s->token_file,
             auth_public_reads ? "; reads are public" : "");
    return 0;
fail:
    fclose(f);
    auth_unload();
    return -1;
}

/* 1 when given (n bytes) equals token (tn bytes). Time depends on n only, never on where
 * the bytes differ. */
static int auth_equal(const char *given, size_t n, const char *token, size_t tn)
{
    unsigned char diff = (unsigned char)(n != tn);
    size_t i;

    for (i = 0; i < n; i++) diff |= (unsigned char)(given[i] ^ token[tn ? i % tn : 0]);
    return diff == 0;
}

int auth_check(const char *method, const char *path, const char *authorization)
{
    const char *tok;
    size_t n;
    int i, ok = 0;

    if (!auth_enabled) return 1;
    if (!strcmp(path, "/healthz") || !strcmp(path, "/readyz")) return 1;
    if (auth_public_reads && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) return 1;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return 0;
    tok = authorization + 7;
    while (*tok == ' ') tok++;
    n = strlen(tok);
    while (n > 0 && tok[n - 1] == ' ') n--;
    if (n == 0 || n > AUTH_MAX_TOKEN_LEN) return 0;
    for (i = 0; i < auth_ntokens; i++) ok |= auth_equal(tok, n, auth_tokens[i], auth_token_len[i]);
    return ok;
}

const char *auth_refusal_message(const char *authorization)
{
    return authorization ? "the bearer token is not valid" : "this endpoint needs Authorization: Bearer TOKEN";
}
