/* test_json_text.c — JSON from untrusted text, read strictly (common/json_text.c). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_text.h"
#include "tests/unit/check.h"

/* json_text_parse over exactly len bytes (no NUL after them, so a read past shows in ASan). */
static cJSON *parse_n(const char *text, size_t len, json_text_error *err)
{
    char *copy = malloc(len ? len : 1);
    cJSON *json;

    memcpy(copy, text, len);
    json = json_text_parse(copy, len, err);
    free(copy);
    return json;
}

#define PARSE(text, err) parse_n(text, sizeof(text) - 1, err)

/* Refused with this fault, member and a message holding `says`. */
#define REFUSED(text, want_fault, want_member, says)                                                            \
    do {                                                                                                        \
        json_text_error e_;                                                                                     \
        cJSON *j_ = PARSE(text, &e_);                                                                           \
        CHECK(!j_ && e_.fault == (want_fault) && !strcmp(e_.member, want_member) && strstr(e_.message, says),   \
              "'%s': fault %d member '%s' message '%s'", text, e_.fault, e_.member, e_.message);                \
        cJSON_Delete(j_);                                                                                       \
    } while (0)

static void test_accepts_json(void)
{
    json_text_error err;
    cJSON *j = PARSE("\xEF\xBB\xBF {\"a\": [1, -2.5e3, {\"b\": \"x\\\"y\\\\u0000\"}], \"c\": 0, \"d\": true} \r\n\t",
                     &err);
    const cJSON *a, *c;

    CHECK(cJSON_IsObject(j), "accepted: %s", err.message);
    a = cJSON_GetObjectItemCaseSensitive(j, "a");
    c = cJSON_GetObjectItemCaseSensitive(j, "c");
    CHECK(a && !strcmp(cJSON_GetArrayItem(a, 0)->valuestring, "1") &&
              !strcmp(cJSON_GetArrayItem(a, 1)->valuestring, "-2.5e3") &&
              cJSON_GetArrayItem(a, 1)->valuedouble == -2500.0,
          "numbers keep their text");
    CHECK(c && !strcmp(c->valuestring, "0"), "0");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a, 2), "b")->valuestring, "x\"y\\u0000"),
          "an escaped backslash before u0000 is text");
    {
        cJSON *copy = cJSON_Duplicate(a, 1);
        CHECK(copy && !strcmp(cJSON_GetArrayItem(copy, 1)->valuestring, "-2.5e3"), "a duplicate keeps the text");
        cJSON_Delete(copy);
    }
    cJSON_Delete(j);

    j = PARSE("8.0", &err);
    CHECK(cJSON_IsNumber(j) && !strcmp(j->valuestring, "8.0"), "a number alone");
    cJSON_Delete(j);
    j = PARSE("[{\"a\": 1}, {\"a\": 2}]", &err);
    CHECK(cJSON_IsArray(j), "the same key in two objects: %s", err.message);
    cJSON_Delete(j);
}

static void test_refuses(void)
{
    REFUSED("{\"a\": 1", JSON_TEXT_SYNTAX, "", "at byte");
    REFUSED("", JSON_TEXT_SYNTAX, "", "at byte 0 of 0");
    REFUSED("{} {}", JSON_TEXT_SYNTAX, "", "more than white space");
    REFUSED("{}\f", JSON_TEXT_SYNTAX, "", "more than white space");
    REFUSED("{}\0junk", JSON_TEXT_NUL_BYTE, "", "NUL byte at byte 2");
    /* cJSON takes any byte up to 0x20 as white space, and raw control characters in strings. */
    REFUSED("{\"a\":\x01 1}", JSON_TEXT_SYNTAX, "a", "0x01");
    REFUSED("{\"a\": \"x\ty\"}", JSON_TEXT_SYNTAX, "a", "control character (U+0009)");
    /* \u0000: in a name, the name as written; in a value, its member's name. */
    REFUSED("{\"iters\\u0000junk\": 3}", JSON_TEXT_ESCAPED_NUL, "iters\\u0000junk", "'iters\\u0000junk'");
    REFUSED("{\"a\": 1, \"b\": {\"c\": [\"x\\u0000\"]}}", JSON_TEXT_ESCAPED_NUL, "b", "\\u0000");
    REFUSED("[\"\\u0000\"]", JSON_TEXT_ESCAPED_NUL, "", "\\u0000");
    REFUSED("{\"a\": \"\\\\\\u0000\"}", JSON_TEXT_ESCAPED_NUL, "a", "\\u0000"); /* \\ then \u0000 */
    /* Numbers cJSON reads (strtod) that JSON does not write. */
    REFUSED("{\"a\": 01}", JSON_TEXT_BAD_NUMBER, "a", "01");
    REFUSED("{\"a\": -01}", JSON_TEXT_BAD_NUMBER, "a", "-01");
    REFUSED("{\"a\": 1.}", JSON_TEXT_BAD_NUMBER, "a", "1.");
    REFUSED("{\"a\": 1.e5}", JSON_TEXT_BAD_NUMBER, "a", "1.e5");
    REFUSED("[00]", JSON_TEXT_BAD_NUMBER, "", "00");
    /* Keys given twice, at any depth (decoded: \u0061 is a). */
    REFUSED("{\"a\": 1, \"\\u0061\": 2}", JSON_TEXT_DUPLICATE_KEY, "a", "'a' appears twice");
    REFUSED("{\"p\": {\"x\": 1, \"y\": 2, \"x\": 3}}", JSON_TEXT_DUPLICATE_KEY, "p",
            "'x' appears twice in an object under 'p'");
    REFUSED("[{\"x\": 1, \"x\": 1}]", JSON_TEXT_DUPLICATE_KEY, "", "'x' appears twice");
    REFUSED("{\"\": 1, \"\": 2}", JSON_TEXT_DUPLICATE_KEY, "", "appears twice");
}

static void test_number_spelling(void)
{
    static const char *const numbers[] = {"0", "-0", "12", "-3", "0.5", "-0.5", "1e3", "1E+3", "2.5e-1", "10"};
    static const char *const not_numbers[] = {"", "+1", "01", ".5", "1.", "0x10", "inf", "nan", " 1", "1 ", "-",
                                              "1e", "1e+", "--1", "1.5.5", "0.5x"};
    static const char *const integers[] = {"0", "12", "-3", "18446744073709551615", "100000"};
    static const char *const not_integers[] = {"-0", "+12", "012", "00", "1e3", "8.0", "1E1", "", "1_000"};
    size_t i;

    for (i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        CHECK(json_text_is_number(numbers[i], strlen(numbers[i])), "'%s' is a number", numbers[i]);
    for (i = 0; i < sizeof not_numbers / sizeof not_numbers[0]; i++)
        CHECK(!json_text_is_number(not_numbers[i], strlen(not_numbers[i])), "'%s' is no number", not_numbers[i]);
    for (i = 0; i < sizeof integers / sizeof integers[0]; i++)
        CHECK(json_text_is_integer(integers[i], strlen(integers[i])), "'%s' is an integer", integers[i]);
    for (i = 0; i < sizeof not_integers / sizeof not_integers[0]; i++)
        CHECK(!json_text_is_integer(not_integers[i], strlen(not_integers[i])), "'%s' is no integer", not_integers[i]);
    CHECK(json_text_number_len("12,", 3) == 2 && json_text_number_len("1.e5", 4) == 1, "longest prefix");
}

int main(void)
{
    test_accepts_json();
    test_refuses();
    test_number_spelling();
    return CHECK_DONE();
}
