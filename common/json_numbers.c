/* json_numbers.c — the top-level numbers of a JSON object, as written (json_numbers.h).
 *
 * A hand-written lexer over untrusted bytes: every read is guarded by `p < end`. It follows
 * the text only as far as it needs to: member names and values that are not numbers are
 * skipped (strings by their quotes and escapes, objects and arrays by counting brackets
 * outside strings), and the first thing out of place ends the walk.
 */
#include "common/json_numbers.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

/* cJSON's white space: every byte up to 0x20 (its buffer_skip_whitespace). */
static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (unsigned char)*p <= 0x20) p++;
    return p;
}

/* p at '"': past the closing quote; NULL when the string does not end. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (end - p < 2) return NULL;
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* The bytes cJSON's parse_number copies before strtod. */
static int is_number_byte(char c)
{
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* Past one value that is not a number: a string, a literal, or an object or array of any
 * depth; NULL when it does not end. */
static const char *skip_value(const char *p, const char *end)
{
    long depth = 0;

    if (p >= end) return NULL;
    if (*p == '"') return skip_string(p, end);
    if (*p != '{' && *p != '[') { /* true, false, null */
        while (p < end && is_letter(*p)) p++;
        return p;
    }
    while (p < end) {
        if (*p == '"') {
            if (!(p = skip_string(p, end))) return NULL;
            continue;
        }
        if (*p == '{' || *p == '[')
            depth++;
        else if ((*p == '}' || *p == ']') && --depth == 0)
            return p + 1;
        p++;
    }
    return NULL;
}

/* The member name quoted[0, len) (quotes included) into out, decoded as cJSON decodes it. */
static void decode_name(const char *quoted, size_t len, char *out)
{
    out[0] = '\0';
    if (!memchr(quoted, '\\', len)) {
        const char *nul = memchr(quoted + 1, '\0', len - 2); /* cJSON's name ends there */
        size_t n = nul ? (size_t)(nul - quoted - 1) : len - 2;
        if (n < JSON_NUMBERS_NAME_MAX) {
            memcpy(out, quoted + 1, n);
            out[n] = '\0';
        }
    } else {
        cJSON *s = cJSON_ParseWithLength(quoted, len);
        if (cJSON_IsString(s) && strlen(s->valuestring) < JSON_NUMBERS_NAME_MAX)
            snprintf(out, JSON_NUMBERS_NAME_MAX, "%s", s->valuestring);
        cJSON_Delete(s);
    }
}

void json_numbers_start(json_numbers *it, const char *text, size_t len)
{
    const char *p = text, *end = text + len;

    it->end = end;
    it->index = 0;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* a UTF-8 BOM, which cJSON skips too */
    p = skip_space(p, end);
    it->p = p < end && *p == '{' ? skip_space(p + 1, end) : end;
}

int json_numbers_next(json_numbers *it, json_number *out)
{
    const char *p = it->p, *end = it->end;

    while (p < end && *p == '"') {
        const char *key = p, *key_end, *value;
        size_t index = it->index++;

        if (!(key_end = p = skip_string(p, end))) break;
        p = skip_space(p, end);
        if (p >= end || *p != ':') break;
        value = p = skip_space(p + 1, end);
        if (p < end && (*p == '-' || (*p >= '0' && *p <= '9'))) {
            while (p < end && is_number_byte(*p)) p++;
            out->index = index;
            decode_name(key, (size_t)(key_end - key), out->name);
            out->text = value;
            out->len = (size_t)(p - value);
            out->integer = !memchr(value, '.', out->len) && !memchr(value, 'e', out->len) &&
                           !memchr(value, 'E', out->len);
            p = skip_space(p, end);
            it->p = p < end && *p == ',' ? skip_space(p + 1, end) : end;
            return 1;
        }
        if (!(p = skip_value(p, end))) break;
        p = skip_space(p, end);
        if (p >= end || *p != ',') break;
        p = skip_space(p + 1, end);
    }
    it->p = end;
    return 0;
}
