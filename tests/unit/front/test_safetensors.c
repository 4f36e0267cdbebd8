/* test_safetensors.c — the safetensors header parser (server/front/tensors/safetensors.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/front/tensors/safetensors.h"
#include "tests/unit/check.h"

/* 8-byte length + json + data zero bytes. Returns the length. */
static size_t make_st(uint8_t *buf, const char *json, size_t data)
{
    size_t n = strlen(json);
    int i;
    for (i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    memset(buf + 8 + n, 0, data);
    return 8 + n + data;
}

static int parse(const uint8_t *buf, size_t n, st_tensor **t, int *count, char *err)
{
    return st_parse(buf, n, n, t, count, err, 300);
}

int main(void)
{
    static uint8_t buf[1 << 16];
    char err[300];
    st_tensor *t = NULL;
    int count = 0;
    size_t n;

    n = make_st(buf,
                "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[16,24]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                "\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]}}",
                26);
    CHECK(parse(buf, n, &t, &count, err) == 0, "good: %s", err);
    CHECK(count == 3, "count %d", count);
    if (count == 3) {
        CHECK(!strcmp(t[0].name, "b") && t[0].dtype == ATTN_FP16 && t[0].bytes == 8, "b");
        CHECK(!strcmp(t[1].name, "a") && t[1].dtype == ATTN_FP32 && t[1].offset == n - 26, "a at the data start");
        CHECK(!strcmp(t[2].name, "c") && t[2].ndim == 0 && t[2].bytes == 2, "c scalar bf16");
    }
    free(t);
    t = NULL;

    /* Trailing spaces after the JSON are allowed (the format pads to 8). */
    n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ", 4);
    CHECK(parse(buf, n, &t, &count, err) == 0 && count == 1, "padding: %s", err);
    free(t);
    t = NULL;

#define BAD(json, data, what)                                                                  \
    do {                                                                                       \
        n = make_st(buf, json, data);                                                          \
        CHECK(parse(buf, n, &t, &count, err) != 0 && t == NULL && count == 0, "%s accepted", what); \
        CHECK(strstr(err, "safetensors") != NULL, "%s: message '%s'", what, err);              \
    } while (0)

    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "duplicate names");
    BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "F64");
    BAD("{\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "I8");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "span disagrees");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing data");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4, "overlap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,40]}}", 4, "end past the data");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before begin");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "overflow");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, "huge dim");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative dim");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "fractional dim");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "no offsets");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "extra key");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "metadata not strings");
    BAD("[1,2]", 0, "not an object");
    BAD("{\"a\":", 0, "not JSON");
    BAD("{} x", 0, "garbage after the JSON");

    /* Names and metadata must be UTF-8; names also free of control characters (C0, DEL, C1). */
    BAD("{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "name not UTF-8");
    CHECK(strstr(err, "UTF-8") && strstr(err, "\\xff\\xfe"), "the name is shown escaped: '%s'", err);
    BAD("{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "raw control character");
    CHECK(strstr(err, "control character (U+0001)") != NULL, "'%s'", err);
    BAD("{\"a\\u001b[2J\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "escaped ESC");
    BAD("{\"a\\u0085\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "C1 (NEL)");
    BAD("{\"a\x7f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "DEL");
    BAD("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "escaped NUL");
    BAD("{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "overlong");
    BAD("{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "surrogate");
    BAD("{\"__metadata__\":{\"k\":\"\xc3\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "metadata value not UTF-8");
    BAD("{\"__metadata__\":{\"\xff\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "metadata key not UTF-8");
    /* … while printable UTF-8 passes, a backslash before u0000 is no escape, and metadata may
     * hold control characters (it is never shown). */
    n = make_st(buf, "{\"__metadata__\":{\"cfg\":\"a\\nb\"},\"q\\\\u0000 \xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80\":"
                     "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    CHECK(parse(buf, n, &t, &count, err) == 0 && count == 1, "printable UTF-8: %s", err);
    if (count == 1) CHECK(!strcmp(t[0].name, "q\\u0000 \xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80"), "name '%s'", t[0].name);
    free(t);
    t = NULL;
    CHECK(st_name_check("ok", 2, err, sizeof err) == 0, "ascii");
    CHECK(st_name_check("a\0b", 3, err, sizeof err) != 0 && strstr(err, "U+0000"), "NUL: '%s'", err);
    CHECK(st_name_check("\xf4\x90\x80\x80", 4, err, sizeof err) != 0, "past U+10FFFF");
    CHECK(st_name_check("\xe2\x82", 2, err, sizeof err) != 0 && strstr(err, "byte 1 (0xe2)"), "cut: '%s'", err);
    CHECK(st_name_check("\xc2\xa0", 2, err, sizeof err) == 0, "U+00A0 is not C1");
    /* Invisible format characters: bidi controls, zero-width ones, tags, separators. */
    {
        static const char *const format_chars[] = {
            "\xe2\x80\xaa", "\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x81\xa9", "\xe2\x80\x8e", "\xe2\x80\x8f",
            "\xd8\x9c",     "\xe2\x80\x8b", "\xe2\x80\x8d", "\xef\xbb\xbf", "\xc2\xad",     "\xf3\xa0\x81\x81",
            "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x81\xa0"};
        size_t i;
        char name[16];
        for (i = 0; i < sizeof format_chars / sizeof format_chars[0]; i++) {
            snprintf(name, sizeof name, "a%sb", format_chars[i]);
            CHECK(st_name_check(name, strlen(name), err, sizeof err) != 0 && strstr(err, "format character") &&
                      strstr(err, "byte 2"),
                  "format character %zu: '%s'", i, err);
        }
        CHECK(st_name_check("\xe2\x80\x90", 3, err, sizeof err) == 0, "U+2010 (a hyphen) is printable");
        CHECK(st_name_check("\xd8\xa7\xd9\x84", 4, err, sizeof err) == 0, "Arabic letters are names");
    }
    BAD("{\"a\\u202eb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "escaped bidi override");
    CHECK(strstr(err, "U+202E") != NULL, "'%s'", err);
    BAD("{\"p\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "a key twice in an entry");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "a number JSON does not write");

    /* Lengths. */
    {
        uint64_t hl;
        memset(buf, 0xff, 8);
        CHECK(st_header_length(buf, 8, 100, &hl, err, sizeof err) != 0, "huge length");
        n = make_st(buf, "{}", 0);
        buf[0] = 50;
        CHECK(st_header_length(buf, n, n, &hl, err, sizeof err) != 0 && strstr(err, "only"), "past the body: %s", err);
        CHECK(st_header_length(buf, 4, 4, &hl, err, sizeof err) != 0, "too short");
        n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
        CHECK(st_parse(buf, 20, n, &t, &count, err, sizeof err) != 0 && strstr(err, "truncated"), "truncated: %s", err);
        n = make_st(buf, "{}", 0);
        CHECK(parse(buf, n, &t, &count, err) == 0 && count == 0, "empty file: %s", err);
        free(t);
    }
    return CHECK_DONE();
}
