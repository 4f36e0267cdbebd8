/* fuzz_json_numbers.c — libFuzzer target for the JSON number lexer (common/json_numbers.c).
 *
 * The input is a request body. The lexer must never read past it, and whenever cJSON reads
 * it as an object (as run_request_parse_body does), the lexer must report exactly cJSON's
 * members whose value is a number, in order, with their names, and text that reads back as
 * cJSON's value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_numbers.h"

/* The lexer's text read as cJSON reads a number: strtod over the whole run of number bytes. */
static double number_of(const json_number *n)
{
    char *buf = malloc(n->len + 1);
    double x;
    if (!buf) abort();
    memcpy(buf, n->text, n->len);
    buf[n->len] = '\0';
    x = strtod(buf, NULL);
    free(buf);
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    json_numbers it;
    json_number n;
    size_t seen = 0;
    cJSON *obj, *child;
    int more;

    if (!copy) return 0;
    memcpy(copy, data, size); /* exactly the input's bytes, so ASan sees any overread */

    /* Whatever the bytes: numbers inside the text, in member order. */
    json_numbers_start(&it, copy, size);
    while (json_numbers_next(&it, &n)) {
        if (n.text < copy || n.len == 0 || n.len > size || n.text + n.len > copy + size) abort();
        if (seen && n.index < seen) abort();
        if (memchr(n.name, '\0', sizeof n.name) == NULL) abort();
        seen = n.index + 1;
    }

    /* Where cJSON reads an object: the same members, the same values. */
    obj = cJSON_ParseWithLengthOpts(copy, size, NULL, 0);
    if (cJSON_IsObject(obj)) {
        size_t index = 0;
        json_numbers_start(&it, copy, size);
        more = json_numbers_next(&it, &n);
        for (child = obj->child; child; child = child->next, index++) {
            if (more && n.index < index) abort(); /* a member cJSON does not see as a number */
            if (!cJSON_IsNumber(child)) {
                if (more && n.index == index) abort();
                continue;
            }
            if (!more || n.index != index) abort(); /* a number the lexer missed */
            if (number_of(&n) != child->valuedouble) abort();
            if (strlen(child->string) < JSON_NUMBERS_NAME_MAX ? strcmp(n.name, child->string) != 0 : n.name[0] != '\0')
                abort();
            more = json_numbers_next(&it, &n);
        }
        if (more) abort(); /* a number past cJSON's last member */
    }
    cJSON_Delete(obj);
    free(copy);
    return 0;
}
