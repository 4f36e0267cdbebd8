/* json_text.h — JSON from untrusted text, read strictly: the one way request JSON is parsed
 * (run bodies, plans, safetensors headers).
 *
 * cJSON reads more than JSON, and forgets how a value was written. json_text_parse refuses
 * what it would read loosely:
 *   - a NUL byte, and a \u0000 escape in a string: cJSON decodes it into a C string that ends
 *     there, so {"iters\u0000junk": 3} would read as iters;
 *   - anything but white space after the value (cJSON_ParseWithLength stops after it);
 *   - a key given twice in one object (cJSON keeps both and GetObjectItem finds the first);
 *   - what JSON does not allow and cJSON lets through: control bytes (raw in a string, or as
 *     white space outside one) and numbers outside JSON's grammar (01, 1., -01, 1.e5);
 * and keeps what it forgets: every number's text as written, in the item's valuestring
 * (cJSON_Delete frees it and cJSON_Duplicate copies it), because a double no longer says
 * whether 8 was written 8, 8.0 or 1e3. cJSON's own parse leaves valuestring NULL.
 *
 * Contract: the text is untrusted bytes; nothing outside text[0, len) is read and no
 * terminating NUL is needed.
 */
#ifndef JSON_TEXT_H
#define JSON_TEXT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define JSON_TEXT_MEMBER_MAX 64

typedef enum json_text_fault {
    JSON_TEXT_OK = 0,
    JSON_TEXT_SYNTAX,        /* not JSON, control bytes, or more than white space after the value */
    JSON_TEXT_NUL_BYTE,      /* a NUL byte in the text */
    JSON_TEXT_ESCAPED_NUL,   /* \u0000 in a string */
    JSON_TEXT_BAD_NUMBER,    /* a number JSON's grammar does not write: 01, 1., -, 1.e5 */
    JSON_TEXT_DUPLICATE_KEY, /* a key given twice in one object */
    JSON_TEXT_NO_MEMORY,
} json_text_fault;

typedef struct json_text_error {
    json_text_fault fault;
    size_t offset; /* the byte at fault (all but DUPLICATE_KEY and NO_MEMORY) */
    int in_name;   /* ESCAPED_NUL: in a member's name rather than in a value */
    /* The top-level member the fault is in, its name as written (escapes kept: \u0000 shows
     * as such); for a key repeated at the top level, that key. "" when the fault is in no
     * member (or the text is no object), or the name is JSON_TEXT_MEMBER_MAX bytes or more. */
    char member[JSON_TEXT_MEMBER_MAX];
    /* What and where, without a subject. SYNTAX and NUL_BYTE: a detail for "not valid JSON
     * (…)": "at byte 7 of 9", "a NUL byte at byte 2 of 7"; the others a phrase that names the
     * string, number or key: "the key 'iters' appears twice". */
    char message[200];
} json_text_error;

/* Parse text[0, len) as exactly one JSON value, refusing what the header lists. The value
 * (caller deletes), or NULL with err filled. */
cJSON *json_text_parse(const char *text, size_t len, json_text_error *err);

/* The length of the longest JSON number at the start of s[0, len) (JSON's grammar:
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), 0 when none starts there. */
size_t json_text_number_len(const char *s, size_t len);

/* 1 when s[0, len) is one JSON number and nothing else ("0.5", "-2", "1e-3"; not "+1",
 * "01", ".5", "1.", "0x10", "inf", " 1"). */
int json_text_is_number(const char *s, size_t len);

/* 1 when s[0, len) is an integer as attnd spells one: a JSON number without a fraction or an
 * exponent, and not -0 ("0", "12", "-3"; not "+12", "012", "1e3", "8.0", "-0"). Says nothing
 * of range. */
int json_text_is_integer(const char *s, size_t len);

#endif
