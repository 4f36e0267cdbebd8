/* clock.h — the one timestamp format of attnd's records: UTC ISO-8601 with
 * milliseconds, "2026-12-02T10:31:05.123Z"; and the monotonic seconds that the phases of a
 * request (receive, queue, copy, fill, send) are timed with. */
#ifndef CLOCK_H
#define CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

/* The current wall-clock time in that format; len ≥ 25 holds it whole. */
void clock_text_now_iso(char *buf, size_t len);

/* CLOCK_MONOTONIC in seconds: only differences mean anything, and they are the same in
 * the front and its workers (one clock per machine). */
double clock_monotonic_s(void);

/* The same clock in whole milliseconds: for deadlines of polls and waits. */
long long clock_monotonic_ms(void);

/* A condition variable whose timed waits run on this monotonic clock, so a step of the wall
 * clock neither cuts a wait short nor stretches it. */
void clock_cond_init(pthread_cond_t *cond);

/* The absolute time ms from now on that clock, for pthread_cond_timedwait on such a variable. */
struct timespec clock_deadline(long long ms);

#endif
