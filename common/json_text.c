/* json_text.c — JSON from untrusted text, read strictly (json_text.h).
 *
 * cJSON parses first (syntax, its nesting limit, escapes). Three passes follow, over what it
 * accepted: a scan of the text's tokens for what cJSON lets through, a walk of the tree beside
 * the text that gives each number its text, and a check of each object's keys. The scan may
 * rely on the shape cJSON saw (a backslash occurs only inside strings, strings end), but every
 * read is still guarded by `p < end`.
 */
#include "common/json_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* JSON's white space; cJSON takes every byte up to 0x20 as white space. */
static int is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The bytes cJSON's parse_number hands to strtod: a number is refused when its JSON
 * prefix is followed by one of them (01, 1., 1.e5), since cJSON read them all as one. */
static int is_number_byte(char c) { return is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'; }

static int fail(json_text_error *err, json_text_fault fault, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(json_text_error *err, json_text_fault fault, size_t offset, const char *fmt, ...)
{
    va_list ap;

    err->fault = fault;
    err->offset = offset;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* name[0, len) into err->member, or "" when it does not fit. */
static void set_member(json_text_error *err, const char *name, size_t len)
{
    err->member[0] = '\0';
    if (name && len < sizeof err->member) {
        memcpy(err->member, name, len);
        err->member[len] = '\0';
    }
}

size_t json_text_number_len(const char *s, size_t len)
{
    size_t i = 0, j;

    if (i < len && s[i] == '-') i++;
    if (i >= len || !is_digit(s[i])) return 0;
    if (s[i] == '0')
        i++;
    else
        while (i < len && is_digit(s[i])) i++;
    if (i + 1 < len && s[i] == '.' && is_digit(s[i + 1]))
        for (i += 2; i < len && is_digit(s[i]);) i++;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        j = i + 1;
        if (j < len && (s[j] == '+' || s[j] == '-')) j++;
        if (j < len && is_digit(s[j]))
            for (i = j + 1; i < len && is_digit(s[i]);) i++;
    }
    return i;
}

int json_text_is_number(const char *s, size_t len) { return len > 0 && json_text_number_len(s, len) == len; }

int json_text_is_integer(const char *s, size_t len)
{
    return json_text_is_number(s, len) && !memchr(s, '.', len) && !memchr(s, 'e', len) && !memchr(s, 'E', len) &&
           !(len == 2 && s[0] == '-' && s[1] == '0');
}

/* ---------------------------------------------------------------- the scan ------------- */

/* p at '"': past the closing quote (end when it does not close). The first \u0000 escape
 * or raw control character inside goes to *nul / *control (when still NULL). */
static const char *scan_string(const char *p, const char *end, const char **nul, const char **control)
{
    for (p++; p < end && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20 && !*control) *control = p;
        if (*p != '\\') continue;
        if (++p >= end) break;
        if (*p == 'u' && end - p >= 5 && !memcmp(p + 1, "0000", 4) && !*nul) *nul = p - 1;
    }
    return p < end ? p + 1 : end;
}

/* Every token of text[0, len), which cJSON accepted: 0, or -1 with err. The top-level
 * member each token belongs to is kept for err->member. */
static int scan(const char *text, size_t len, json_text_error *err)
{
    const char *p = text, *end = text + len, *name = NULL;
    size_t name_len = 0;
    long depth = 0;
    int root_object = 0, want_name = 0;

    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* a UTF-8 byte order mark, which cJSON skips */
    while (p < end) {
        char c = *p;
        if (c == '"') {
            const char *start = p, *nul = NULL, *control = NULL;
            int is_name = root_object && depth == 1 && want_name;
            p = scan_string(p, end, &nul, &control);
            if (is_name) {
                name = start + 1;
                name_len = (size_t)(p - 1 - name);
                want_name = 0;
            }
            if (control) {
                set_member(err, name, name_len);
                return fail(err, JSON_TEXT_SYNTAX, (size_t)(control - text),
                            "a raw control character (U+%04X) in a string, at byte %zu of %zu; JSON escapes them: "
                            "\\n, \\u001b",
                            (unsigned)(unsigned char)*control, (size_t)(control - text), len);
            }
            if (nul) {
                set_member(err, name, name_len);
                err->in_name = is_name;
                if (is_name)
                    return fail(err, JSON_TEXT_ESCAPED_NUL, (size_t)(nul - text),
                                "the name '%.*s' holds an escaped NUL (\\u0000), which would cut it short",
                                (int)(name_len > 60 ? 60 : name_len), name);
                return fail(err, JSON_TEXT_ESCAPED_NUL, (size_t)(nul - text),
                            "a string holds an escaped NUL (\\u0000) at byte %zu, which would cut it short",
                            (size_t)(nul - text));
            }
            continue;
        }
        if (c == '-' || is_digit(c)) {
            size_t n = json_text_number_len(p, (size_t)(end - p)), k = n;
            if (n == 0 || (p + n < end && is_number_byte(p[n]))) {
                while (p + k < end && is_number_byte(p[k]) && k < 24) k++;
                set_member(err, name, name_len);
                return fail(err, JSON_TEXT_BAD_NUMBER, (size_t)(p - text),
                            "the number %.*s at byte %zu is not written as JSON writes numbers (no leading zeros, "
                            "digits on both sides of a '.')",
                            (int)k, p, (size_t)(p - text));
            }
            p += n;
            continue;
        }
        if ((unsigned char)c <= 0x20 && !is_json_space(c)) {
            set_member(err, name, name_len);
            return fail(err, JSON_TEXT_SYNTAX, (size_t)(p - text),
                        "a control byte 0x%02x outside a string, at byte %zu of %zu", (unsigned)(unsigned char)c,
                        (size_t)(p - text), len);
        }
        if (c == '{' || c == '[') {
            if (depth == 0) root_object = c == '{';
            if (++depth == 1) want_name = root_object;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            want_name = root_object;
        }
        p++; /* ':', white space, and the letters of true, false and null */
    }
    return 0;
}

/* ---------------------------------------------------------------- numbers' texts ------- */

/* From p: the start of the next number outside strings, or NULL. */
static const char *next_number(const char *p, const char *end)
{
    const char *nul = NULL, *control = NULL;

    while (p < end) {
        if (*p == '"')
            p = scan_string(p, end, &nul, &control);
        else if (*p == '-' || is_digit(*p))
            return p;
        else
            p++;
    }
    return NULL;
}

/* Give each number of the items from `item` on (and their children, in the order cJSON
 * built them, which is the text's) its text, from *p on. 0, or -1 (out of memory). */
static int keep_number_texts(cJSON *item, const char **p, const char *end)
{
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            const char *at = next_number(*p, end);
            size_t n = at ? json_text_number_len(at, (size_t)(end - at)) : 0;
            if (!at || n == 0) return 0; /* cannot happen on text the scan passed; leave the rest without */
            item->valuestring = malloc(n + 1); /* freed by cJSON_Delete, with the default hooks (free) */
            if (!item->valuestring) return -1;
            memcpy(item->valuestring, at, n);
            item->valuestring[n] = '\0';
            *p = at + n;
        } else if (item->child && keep_number_texts(item->child, p, end) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- keys ----------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* No object at or under item names a key twice. top: the top-level member item is in, NULL
 * for the root and anything under a root that is no object. 0, or -1 with err. Sorted, so a
 * large object costs n log n, not n². */
static int check_keys(const cJSON *item, const cJSON *top, int is_root, json_text_error *err)
{
    const cJSON *child;
    const cJSON **names;
    size_t n = 0, i;

    for (child = item->child; child; child = child->next) n++;
    if (cJSON_IsObject(item) && n > 1) {
        names = malloc(n * sizeof *names);
        if (!names) return fail(err, JSON_TEXT_NO_MEMORY, 0, "out of memory checking the keys");
        for (i = 0, child = item->child; child; child = child->next) names[i++] = child;
        qsort(names, n, sizeof *names, by_name);
        for (i = 1; i < n && strcmp(names[i - 1]->string, names[i]->string) != 0;) i++;
        child = i < n ? names[i] : NULL;
        free(names);
        if (child && is_root) {
            set_member(err, child->string, strlen(child->string));
            return fail(err, JSON_TEXT_DUPLICATE_KEY, 0, "the key '%.60s' appears twice", child->string);
        }
        if (child && top) {
            set_member(err, top->string, strlen(top->string));
            return fail(err, JSON_TEXT_DUPLICATE_KEY, 0, "the key '%.60s' appears twice in an object under '%.60s'",
                        child->string, top->string);
        }
        if (child)
            return fail(err, JSON_TEXT_DUPLICATE_KEY, 0, "the key '%.60s' appears twice in one object", child->string);
    }
    for (child = item->child; child; child = child->next)
        if (child->child && check_keys(child, top ? top : is_root && cJSON_IsObject(item) ? child : NULL, 0, err) != 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- the parse ------------ */

cJSON *json_text_parse(const char *text, size_t len, json_text_error *err)
{
    const char *nul, *end = NULL, *rest;
    const char *text_end = text + len;
    cJSON *json;

    memset(err, 0, sizeof *err);
    if ((nul = memchr(text, '\0', len))) {
        fail(err, JSON_TEXT_NUL_BYTE, (size_t)(nul - text), "a NUL byte at byte %zu of %zu", (size_t)(nul - text), len);
        return NULL;
    }
    json = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!json) {
        size_t at = end && end >= text && end <= text_end ? (size_t)(end - text) : 0;
        fail(err, JSON_TEXT_SYNTAX, at, "at byte %zu of %zu", at, len);
        return NULL;
    }
    for (rest = end; rest < text_end && is_json_space(*rest);) rest++;
    if (rest < text_end) {
        fail(err, JSON_TEXT_SYNTAX, (size_t)(rest - text), "more than white space after the value, at byte %zu of %zu",
             (size_t)(rest - text), len);
        cJSON_Delete(json);
        return NULL;
    }
    rest = text;
    if (scan(text, len, err) != 0 || check_keys(json, NULL, 1, err) != 0) {
        cJSON_Delete(json);
        return NULL;
    }
    if (keep_number_texts(json, &rest, text_end) != 0) {
        fail(err, JSON_TEXT_NO_MEMORY, 0, "out of memory keeping the numbers' texts");
        cJSON_Delete(json);
        return NULL;
    }
    return json;
}
