/* test_common_helpers.c — common/parse_int.c and common/grow.c: the one integer parser and the
 * one growable array every other file uses. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/grow.h"
#include "common/parse_int.h"
#include "tests/unit/check.h"

static void test_parse_int(void)
{
    long long x = 7;
    CHECK(parse_int("42", &x) == 0 && x == 42, "42");
    CHECK(parse_int("-3", &x) == 0 && x == -3, "-3");
    CHECK(parse_int("+5", &x) == 0 && x == 5, "+5");
    CHECK(parse_int("9223372036854775807", &x) == 0 && x == LLONG_MAX, "LLONG_MAX");
    x = 7;
    CHECK(parse_int("9223372036854775808", &x) == -1 && x == 7, "overflow refused, out untouched");
    CHECK(parse_int("", &x) == -1 && parse_int(NULL, &x) == -1, "empty and NULL");
    CHECK(parse_int(" 1", &x) == -1 && parse_int("1 ", &x) == -1 && parse_int("1x", &x) == -1, "no spaces, no tail");
    CHECK(parse_int("0x10", &x) == -1 && parse_int("1e3", &x) == -1, "decimal only");

    CHECK(parse_int_in("1", 1, 10, &x) == 0 && x == 1, "lower bound");
    CHECK(parse_int_in("10", 1, 10, &x) == 0 && x == 10, "upper bound");
    CHECK(parse_int_in("0", 1, 10, &x) == -1 && parse_int_in("11", 1, 10, &x) == -1, "out of range");
    CHECK(parse_int_in("-1", -5, 5, &x) == -1 && parse_int_in("+1", 0, 5, &x) == -1, "no sign for ids");
    CHECK(parse_int_in("007", 0, 10, &x) == 0 && x == 7, "leading zeros are digits");
}

static void test_grow(void)
{
    int *a = NULL;
    size_t cap = 0;
    CHECK(grow_array(&a, &cap, 1, sizeof *a, 16) == 0 && a && cap == 16, "first: min_cap (%zu)", cap);
    for (int i = 0; i < 16; i++) a[i] = i;
    CHECK(grow_array(&a, &cap, 16, sizeof *a, 16) == 0 && cap == 16, "enough: unchanged");
    CHECK(grow_array(&a, &cap, 17, sizeof *a, 16) == 0 && cap == 32 && a[15] == 15, "doubles, keeps content");
    CHECK(grow_array(&a, &cap, 100, sizeof *a, 16) == 0 && cap == 100, "jumps to need when doubling is short");
    {
        int *before = a;
        size_t cap_before = cap;
        CHECK(grow_array(&a, &cap, SIZE_MAX / 2, sizeof *a, 16) == -1 && a == before && cap == cap_before,
              "overflow refused, array untouched");
    }
    free(a);
}

int main(void)
{
    test_parse_int();
    test_grow();
    return CHECK_DONE();
}
