/* parse_int.c — strict decimal integers from text (parse_int.h). */
#include "common/parse_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int parse_int(const char *s, long long *out)
{
    char *end;
    long long x;

    if (!s || !s[0] || isspace((unsigned char)s[0])) return -1;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = x;
    return 0;
}

int parse_int_in(const char *s, long long lo, long long hi, long long *out)
{
    long long x;

    if (!s || !isdigit((unsigned char)s[0]) || parse_int(s, &x) != 0 || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}
