/* json_fields.c — "value or null" members of the worker's JSON (json_fields.h). */
#include "server/worker/json_fields.h"

#include <math.h>

void json_add_number_or_null(cJSON *o, const char *key, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

void json_add_string_or_null(cJSON *o, const char *key, const char *s)
{
    if (s && s[0]) cJSON_AddStringToObject(o, key, s);
    else cJSON_AddNullToObject(o, key);
}
