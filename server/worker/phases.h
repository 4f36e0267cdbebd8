/* phases.h — where a job's time goes in the worker: consecutive named phases, in milliseconds
 * of the host's monotonic clock, for the record's service.worker_ms (docs/api.md). A phase ends
 * when the host sees it end: GPU work queued in one phase and waited for in the next counts
 * in the next. */
#ifndef PHASES_H
#define PHASES_H

#include <cjson/cJSON.h>
#include <string.h>

#include "common/clock.h"

#define PHASES_MAX 16

typedef struct phases {
    double begin_s, mark_s; /* clock_monotonic_s at phases_begin and at the last mark */
    int n;
    const char *name[PHASES_MAX];
    double ms[PHASES_MAX];
} phases;

static inline void phases_begin(phases *ph)
{
    ph->begin_s = ph->mark_s = clock_monotonic_s();
    ph->n = 0;
}

/* The time since the last mark (or the beginning) was phase `name`'s (a string literal); a
 * phase marked again, after others, adds to its time. */
static inline void phases_mark(phases *ph, const char *name)
{
    double now = clock_monotonic_s();
    int i;

    for (i = 0; i < ph->n && strcmp(ph->name[i], name) != 0; i++) {
    }
    if (i < ph->n) ph->ms[i] += (now - ph->mark_s) * 1e3;
    else if (ph->n < PHASES_MAX) {
        ph->name[ph->n] = name;
        ph->ms[ph->n++] = (now - ph->mark_s) * 1e3;
    }
    ph->mark_s = now;
}

/* {"phase": ms, …, "total": ms from the beginning to the last mark}; NULL when out of memory. */
static inline cJSON *phases_json(const phases *ph)
{
    cJSON *o = cJSON_CreateObject();
    int i;

    if (!o) return NULL;
    for (i = 0; i < ph->n; i++) cJSON_AddNumberToObject(o, ph->name[i], ph->ms[i]);
    cJSON_AddNumberToObject(o, "total", (ph->mark_s - ph->begin_s) * 1e3);
    return o;
}

#endif
