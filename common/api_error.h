/* api_error.h — the one shape of a refusal, from validation to the HTTP answer:
 * {"error": {"code", "message", "field"}} with an HTTP status (DESIGN.md). */
#ifndef API_ERROR_H
#define API_ERROR_H

#include <stdarg.h>

#include <cjson/cJSON.h>

typedef struct api_error {
    int status;        /* HTTP status: 400, 404, 409, 410, 413, 422, 429, 500, 503, 507 */
    char code[40];     /* stable machine-readable: "bad_json", "unknown_backend", "out_of_range", … */
    char message[512]; /* one sentence for people, names the value and the limit */
    char field[40];    /* the parameter at fault, or "" */
} api_error;

/* Fill e and return -1, so validators can `return api_fail(e, 422, …);`. */
int api_fail(api_error *e, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The answer of a refusal: {"error":{"code","message","field"}} with field null when empty,
 * message and field made valid UTF-8 (they quote client input). Caller deletes; NULL when out
 * of memory. */
cJSON *api_error_json(const api_error *e);

#endif
