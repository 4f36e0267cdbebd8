/* fuzz_json_text.c — libFuzzer target for the strict JSON reader (common/json_text.c).
 *
 * The input is a request body. json_text_parse must never read past it; it accepts only what
 * cJSON accepts, builds the same tree, and gives every number the text it was written as: a
 * JSON number that reads back as cJSON's value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_text.h"

/* Every number under item (item included) carries its text, spelled as JSON spells numbers. */
static void check_numbers(const cJSON *item)
{
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            if (!item->valuestring || !json_text_is_number(item->valuestring, strlen(item->valuestring))) abort();
            if (strtod(item->valuestring, NULL) != item->valuedouble) abort();
        }
        check_numbers(item->child);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    json_text_error err;
    cJSON *strict, *loose;

    if (!copy) return 0;
    memcpy(copy, data, size); /* exactly the input's bytes, so ASan sees any overread */
    strict = json_text_parse(copy, size, &err);
    loose = cJSON_ParseWithLengthOpts(copy, size, NULL, 0);
    if (strict) {
        char *a, *b;
        if (!loose || err.fault != JSON_TEXT_OK) abort();
        a = cJSON_PrintUnformatted(strict);
        b = cJSON_PrintUnformatted(loose);
        if (a && b && strcmp(a, b) != 0) abort();
        free(a);
        free(b);
        check_numbers(strict);
    } else if (err.fault == JSON_TEXT_OK || !memchr(err.member, '\0', sizeof err.member) ||
               !memchr(err.message, '\0', sizeof err.message)) {
        abort();
    }
    cJSON_Delete(strict);
    cJSON_Delete(loose);
    free(copy);
    return 0;
}
