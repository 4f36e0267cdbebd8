/* clock.c — the one wall clock format and the one monotonic clock (clock.h). */
#include "common/clock.h"

#include <stdio.h>
#include <time.h>

void clock_text_now_iso(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

double clock_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long long clock_monotonic_ms(void) { return (long long)(clock_monotonic_s() * 1e3); }
