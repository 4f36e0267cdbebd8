/* api_error.c — the one shape of a refusal (api_error.h): fill it, and its JSON. */
#include "common/api_error.h"

#include <stdio.h>
#include <string.h>

int api_fail(api_error *e, int status, const char *code, const char *field, const char *fmt, ...)
{
    va_list ap;

    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* Copy s into out (len bytes) as valid UTF-8: each byte that does not start a complete,
 * well-formed sequence becomes '?'. Messages quote client input, cut with %.40s, which can
 * split a character or hold arbitrary bytes; cJSON does not check, and JSON must be UTF-8. */
static const char *api_error_utf8(const char *s, char *out, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;

    while (*p && n + 5 < len) {
        int k = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 && *p >= 0xC2 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                : (*p & 0xF8) == 0xF0 && *p <= 0xF4 ? 4 : 0;
        int i, good = k > 0;
        for (i = 1; good && i < k; i++) good = (p[i] & 0xC0) == 0x80;
        if (good && k == 3) good = !(p[0] == 0xE0 && p[1] < 0xA0) && !(p[0] == 0xED && p[1] >= 0xA0);
        if (good && k == 4) good = !(p[0] == 0xF0 && p[1] < 0x90) && !(p[0] == 0xF4 && p[1] >= 0x90);
        if (!good) {
            out[n++] = '?';
            p++;
            continue;
        }
        memcpy(out + n, p, (size_t)k);
        n += (size_t)k;
        p += k;
    }
    out[n] = '\0';
    return out;
}

cJSON *api_error_json(const api_error *e)
{
    cJSON *root = cJSON_CreateObject(), *err = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char message[sizeof e->message + 8], field[sizeof e->field + 8];
    int ok = err != NULL;

    ok = ok && cJSON_AddStringToObject(err, "code", e->code[0] ? e->code : "internal");
    ok = ok && cJSON_AddStringToObject(err, "message", api_error_utf8(e->message, message, sizeof message));
    ok = ok && (e->field[0] ? cJSON_AddStringToObject(err, "field", api_error_utf8(e->field, field, sizeof field)) != NULL
                            : cJSON_AddNullToObject(err, "field") != NULL);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
