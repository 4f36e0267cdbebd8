/* parse_error.h — how the upload parsers (npy.c, safetensors.c) report a refusal: a message
 * formatted into the caller's buffer, and -1, so a check reads `return parse_fail(err, …);`.
 * Header-only, so each parser still builds alone into its fuzz target (tests/fuzz/run.sh). */
#ifndef PARSE_ERROR_H
#define PARSE_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int parse_fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int parse_fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    if (err && err_len) {
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
