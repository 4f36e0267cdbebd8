/* api_error.c — fill the one shape of a refusal (api_error.h). */
#include "common/api_error.h"

#include <stdio.h>

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
