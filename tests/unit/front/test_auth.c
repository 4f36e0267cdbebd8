/* test_auth.c — bearer tokens (server/front/http/auth.c): the token file's format, which requests need
 * a token, public_reads, and exact matching (no prefix, no extension, no case folding). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/front/http/auth.h"
#include "tests/unit/check.h"

static char dir[] = "/tmp/attnd-test-auth-XXXXXX";

static const char *write_tokens(const char *name, const char *text)
{
    static char path[256];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

static int load(const char *path, int public_reads, char *err, size_t len)
{
    settings s;
    memset(&s, 0, sizeof s);
    if (path) snprintf(s.token_file, sizeof s.token_file, "%s", path);
    s.public_reads = public_reads;
    err[0] = '\0';
    return auth_load(&s, err, len);
}

int main(void)
{
    char err[512];
    const char *p;

    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    /* No token file: everything is allowed. */
    CHECK(load(NULL, 0, err, sizeof err) == 0, "no file: %s", err);
    CHECK(auth_check("POST", "/v1/runs", NULL) == 1, "open without a token file");

    p = write_tokens("t1", "# team tokens\n\n  alpha-123  \nbeta\r\n");
    CHECK(load(p, 0, err, sizeof err) == 0, "load: %s", err);
    CHECK(auth_check("GET", "/healthz", NULL) == 1, "healthz is open");
    CHECK(auth_check("GET", "/readyz", NULL) == 1, "readyz is open");
    CHECK(auth_check("GET", "/v1/device", NULL) == 0, "device needs a token");
    CHECK(auth_check("POST", "/v1/runs", "Bearer alpha-123") == 1, "first token");
    CHECK(auth_check("POST", "/v1/runs", "bearer beta") == 1, "second token, scheme any case, CR trimmed");
    CHECK(auth_check("POST", "/v1/runs", "Bearer  alpha-123 ") == 1, "spaces around the token");
    CHECK(auth_check("POST", "/v1/runs", "Bearer alpha-12") == 0, "a prefix is not the token");
    CHECK(auth_check("POST", "/v1/runs", "Bearer alpha-1234") == 0, "an extension is not the token");
    CHECK(auth_check("POST", "/v1/runs", "Bearer ALPHA-123") == 0, "tokens are case-sensitive");
    CHECK(auth_check("POST", "/v1/runs", "Bearer # team tokens") == 0, "comments are not tokens");
    CHECK(auth_check("POST", "/v1/runs", "Bearer ") == 0, "empty token");
    CHECK(auth_check("POST", "/v1/runs", "Basic alpha-123") == 0, "other schemes");
    CHECK(auth_check("POST", "/v1/runs", "alpha-123") == 0, "no scheme");
    CHECK(auth_check("GET", "/v1/variants", NULL) == 0, "reads need a token without public_reads");

    CHECK(load(p, 1, err, sizeof err) == 0, "load public: %s", err);
    CHECK(auth_check("GET", "/v1/variants", NULL) == 1, "public GET");
    CHECK(auth_check("HEAD", "/v1/runs/1", NULL) == 1, "public HEAD");
    CHECK(auth_check("POST", "/v1/runs", NULL) == 0, "POST still needs a token");
    CHECK(auth_check("DELETE", "/v1/runs/1", "Bearer nope") == 0, "DELETE with a wrong token");

    /* What a refusal says: no header, or a token that is not one of them. */
    CHECK(strstr(auth_refusal_message(NULL), "needs Authorization: Bearer") != NULL, "message without a header");
    CHECK(strstr(auth_refusal_message("Bearer nope"), "not valid") != NULL, "message for a wrong token");
    CHECK(strcmp(AUTH_CHALLENGE, "Bearer realm=\"attnd\"") == 0, "the challenge");

    /* Errors: a missing file, a file without tokens, an over-long line. */
    CHECK(load("/nonexistent/tokens", 0, err, sizeof err) == -1 && strstr(err, "/nonexistent/tokens"),
          "missing file: %s", err);
    p = write_tokens("t2", "# nothing\n   \n");
    CHECK(load(p, 0, err, sizeof err) == -1 && strstr(err, "no token"), "empty file: %s", err);
    {
        char big[700];
        memset(big, 'x', sizeof big - 2);
        big[sizeof big - 2] = '\n';
        big[sizeof big - 1] = '\0';
        p = write_tokens("t3", big);
        CHECK(load(p, 0, err, sizeof err) == -1 && strstr(err, "longer"), "long line: %s", err);
    }
    CHECK(auth_check("POST", "/v1/runs", NULL) == 1, "a failed load leaves no tokens behind");

    auth_unload();
    unlink(write_tokens("t1", ""));
    unlink(write_tokens("t2", ""));
    unlink(write_tokens("t3", ""));
    rmdir(dir);
    return CHECK_DONE();
}
