/* test_json_numbers.c — the top-level numbers of a JSON object as written (common/json_numbers.c). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_numbers.h"
#include "tests/unit/check.h"

/* The walk over text[0, len) as one line: "index:name=text(i|r) ..." (i: integer, r: not). */
static const char *walk(const char *text, size_t len)
{
    static char out[1024];
    char *copy = malloc(len ? len : 1); /* exactly len bytes, no NUL after them */
    json_numbers it;
    json_number n;
    size_t k = 0;

    memcpy(copy, text, len);
    out[0] = '\0';
    json_numbers_start(&it, copy, len);
    while (json_numbers_next(&it, &n) && k < sizeof out)
        k += (size_t)snprintf(out + k, sizeof out - k, "%s%zu:%s=%.*s(%c)", k ? " " : "", n.index, n.name, (int)n.len,
                              n.text, n.integer ? 'i' : 'r');
    CHECK(!json_numbers_next(&it, &n), "the walk over '%s' stays ended", text);
    free(copy);
    return out;
}

#define EXPECT(text, want)                                                                                   \
    do {                                                                                                     \
        const char *got_ = walk(text, sizeof(text) - 1);                                                     \
        CHECK(!strcmp(got_, want), "'%s': got '%s', want '%s'", text, got_, want);                          \
    } while (0)

static void test_members(void)
{
    EXPECT("{\"batch\": 8, \"scale\": 0.5, \"seq\": 1e3, \"heads\": -0, \"x\": 2E1, \"y\": 8.0}",
           "0:batch=8(i) 1:scale=0.5(r) 2:seq=1e3(r) 3:heads=-0(i) 4:x=2E1(r) 5:y=8.0(r)");
    /* Values that are not numbers are skipped, nested numbers are not top-level members. */
    EXPECT("{\"a\": \"1e3\", \"b\": [1.5, {\"c\": 2.0}], \"d\": {\"e\": \"}\\\"{\"}, \"f\": true, \"g\": null, "
           "\"h\": 7}",
           "5:h=7(i)");
    EXPECT("{}", "");
    EXPECT("{\"a\":1,\"b\":2}", "0:a=1(i) 1:b=2(i)");
    /* Names are decoded as cJSON decodes them; a name too long to hold is "". */
    EXPECT("{\"b\\u0061tch\": 2.0, \"a\\\"b\": 3}", "0:batch=2.0(r) 1:a\"b=3(i)");
    EXPECT("{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 1}", "0:=1(i)");
    /* A byte order mark, and every byte up to 0x20 between tokens, as cJSON reads them. */
    EXPECT("\xEF\xBB\xBF {\"a\": 1e3}", "0:a=1e3(r)");
    EXPECT("{\x0b\"a\"\x01:\x1f" "1.5\x0c,\"b\":2}", "0:a=1.5(r) 1:b=2(i)");
}

static void test_malformed(void)
{
    /* Not an object, or text that stops making sense: what came before, then nothing. */
    EXPECT("[1, 2]", "");
    EXPECT("8", "");
    EXPECT("", "");
    EXPECT("{\"a\": 1 \"b\": 2}", "0:a=1(i)");
    EXPECT("{\"a\": 1, \"b\" 2}", "0:a=1(i)");
    EXPECT("{\"a\": [1, 2, \"b\": 3}", "");
    EXPECT("{\"a\": \"unterminated, \"b\": 3", "");
    EXPECT("{\"a\\", "");
    EXPECT("{\"a\": 12", "0:a=12(i)"); /* a number cut by the end of the text */
    EXPECT("{\"a\": -", "0:a=-(i)");
    EXPECT("{'a': 1}", "");
}

/* On text cJSON reads as an object, the lexer visits exactly cJSON's number members. */
static void test_agrees_with_cjson(void)
{
    static const char *const texts[] = {
        "{\"backend\": \"math\", \"batch\": 1e3, \"a\": [1, {\"b\": 2.0}], \"c\": \"q\\\"\", \"seq\": 8}",
        "{\"x\":-0.0,\"y\":1E+2,\"z\":0}",
        "\xEF\xBB\xBF{\"a\"\t:\r\n1}",
        "{\"n\": null, \"t\": true, \"f\": false, \"o\": {}, \"l\": [], \"m\": 3}",
        "{\"a\": 11111111111111111111111111111111111111111111111111111111111111111111112.0}",
        "{\"\": 5, \"\": 6}",
    };
    size_t i;

    for (i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        cJSON *obj = cJSON_ParseWithLength(texts[i], strlen(texts[i])), *child;
        json_numbers it;
        json_number n;
        size_t index = 0;
        int more;

        CHECK(cJSON_IsObject(obj), "cJSON reads text %zu", i);
        json_numbers_start(&it, texts[i], strlen(texts[i]));
        more = json_numbers_next(&it, &n);
        for (child = obj ? obj->child : NULL; child; child = child->next, index++) {
            if (!cJSON_IsNumber(child)) continue;
            CHECK(more && n.index == index && !strcmp(n.name, child->string) &&
                      strtod(n.text, NULL) == child->valuedouble,
                  "text %zu member %zu (%s)", i, index, child->string);
            more = json_numbers_next(&it, &n);
        }
        CHECK(!more, "text %zu: no numbers past cJSON's", i);
        cJSON_Delete(obj);
    }
}

int main(void)
{
    test_members();
    test_malformed();
    test_agrees_with_cjson();
    return CHECK_DONE();
}
