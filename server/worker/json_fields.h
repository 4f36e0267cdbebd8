/* json_fields.h — the record's two "value or null" rules, in one place: a number that is not
 * finite (NaN, ±inf: not JSON) and an unknown string are written as null. */
#ifndef JSON_FIELDS_H
#define JSON_FIELDS_H

#include <cjson/cJSON.h>

void json_add_number_or_null(cJSON *o, const char *key, double v);

/* NULL or "" → null. */
void json_add_string_or_null(cJSON *o, const char *key, const char *s);

#endif
