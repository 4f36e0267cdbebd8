/* json_numbers.h — how the numbers of a JSON object's top-level members were written.
 *
 * cJSON reads 8, 8.0 and 1e3 into the same kind of double, so a parsed body no longer says
 * whether an integer parameter was written as an integer. This lexer reads the text again
 * for that, and only that.
 *
 * Contract: the text is untrusted bytes. The lexer never reads outside text[0, len), needs no
 * terminating NUL, and visits the members in order, stopping quietly at anything it does not
 * expect. On every text cJSON_ParseWithLengthOpts reads as an object it visits exactly the
 * members of cJSON's object whose value is a number (tests/fuzz/fuzz_json_numbers.c holds
 * it to that): it skips a UTF-8 byte order mark and takes every byte up to 0x20 as white
 * space, as cJSON does.
 */
#ifndef JSON_NUMBERS_H
#define JSON_NUMBERS_H

#include <stddef.h>

#define JSON_NUMBERS_NAME_MAX 64 /* names this long or longer are reported as "" */

/* One top-level member whose value is a number. */
typedef struct json_number {
    size_t index;                     /* the member's position in the object, from 0 */
    char name[JSON_NUMBERS_NAME_MAX]; /* its name, escapes decoded; "" when too long or not decodable */
    const char *text;                 /* the number as written: a pointer into the text */
    size_t len;
    int integer;                      /* 1: written without a fraction or an exponent */
} json_number;

/* A walk over one text; fill it with json_numbers_start, read with json_numbers_next. */
typedef struct json_numbers {
    const char *p, *end;
    size_t index;
} json_numbers;

void json_numbers_start(json_numbers *it, const char *text, size_t len);

/* The next top-level member whose value is a number: 1 with *out, or 0 when there is none
 * (the object ended, or the text stopped making sense). */
int json_numbers_next(json_numbers *it, json_number *out);

#endif
