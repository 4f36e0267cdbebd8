/* pool.c — the front's side of the workers (pool.h): the pool's life (start, quiesce, stop)
 * and what it tells about its devices.
 *
 * One worker_slot per device (queue.h), the cpu first, then cuda:N in ordinal order. Each
 * slot has a child process (children.h), a bounded FIFO of jobs and one dispatcher thread
 * that owns the child (pool_dispatch.h). The HTTP threads only enqueue a job and wait on its
 * condition variable (pool_runs.c, pool_tensors.c).
 *
 * Shutdown is two steps: pool_quiesce ends every queued run at once (the running ones go
 * on, so their clients get their answers), then pool_stop waits for the running jobs and
 * ends the workers.
 */
#include "server/front/pool/pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "server/front/pool/children.h"
#include "server/front/metrics.h"
#include "server/front/pool/pool_dispatch.h"
#include "server/front/pool/pool_finish.h"
#include "server/front/pool/queue.h"

static const char *const slot_state_names[] = {"starting", "up", "down"}; /* slot_state */

void pool_set_worker_exe(const char *path) { children_set_worker_exe(path); }
void pool_set_worker_flags(int argc, char *const *argv) { children_set_worker_flags(argc, argv); }

void pool_on_worker_restart(pool_restart_fn fn) { pool_dispatch_on_restart(fn); }

/* Which GPU ordinals to serve, from settings.devices ("all", "none", "0,2"); an ordinal
 * the probe did not find is logged and skipped. Fills ordinals (at most max); returns n. */
static int pool_choose_gpus(const char *devices, int count, int *ordinals, int max)
{
    char list[128], *save = NULL, *tok;
    int n = 0, i;

    if (strcmp(devices, "none") == 0) return 0;
    if (strcmp(devices, "all") == 0 || devices[0] == '\0') {
        for (i = 0; i < count && n < max; i++) ordinals[n++] = i;
        return n;
    }
    snprintf(list, sizeof list, "%s", devices);
    for (tok = strtok_r(list, ", ", &save); tok && n < max; tok = strtok_r(NULL, ", ", &save)) {
        long long k;
        int dup = 0;
        if (parse_int_in(tok, 0, 1023, &k) != 0) {
            log_warn("devices: %s is not a GPU ordinal; skipped", tok);
            continue;
        }
        if (k >= count) {
            log_warn("devices: GPU %lld requested but only %d found; skipped", k, count);
            continue;
        }
        for (i = 0; i < n; i++) dup |= ordinals[i] == (int)k;
        if (!dup) ordinals[n++] = (int)k;
    }
    return n;
}

/* The gauges of /metrics (metrics_devices_fn), read under queue_mu. */
static int pool_metrics_devices(metrics_device *out, int max)
{
    int i, n = 0;

    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < queue_nslots && n < max; i++, n++) {
        const worker_slot *w = &queue_slots[i];
        const cJSON *total = cJSON_GetObjectItem(w->device, "memory_total_bytes");
        const cJSON *free_b = cJSON_GetObjectItem(w->device, "memory_free_bytes");
        snprintf(out[n].id, sizeof out[n].id, "%s", w->name);
        out[n].queue_depth = w->queued;
        out[n].up = w->state == SLOT_UP;
        out[n].restarts = w->restarts;
        out[n].memory_total_bytes = cJSON_IsNumber(total) ? total->valuedouble : -1.0;
        out[n].memory_free_bytes = cJSON_IsNumber(free_b) ? free_b->valuedouble : -1.0;
    }
    pthread_mutex_unlock(&queue_mu);
    return n;
}

/* Wait for the hellos: a slot that keeps failing is down within a few tries, but a slow
 * one is not waited for longer than one hello limit (readyz says when it is up). Under
 * queue_mu. */
static void pool_wait_hellos_locked(void)
{
    double deadline_s = clock_monotonic_s() + (CHILDREN_HELLO_LIMIT_MS + 5000) * 1e-3;
    int i;

    for (;;) {
        int starting = 0;
        struct timespec until = clock_deadline(200);
        for (i = 0; i < queue_nslots; i++) starting += queue_slots[i].state == SLOT_STARTING;
        if (!starting || clock_monotonic_s() >= deadline_s) break;
        pthread_cond_timedwait(&queue_slots[0].state_cond, &queue_mu, &until);
    }
}

int pool_start(const settings *s, char *err, size_t err_len)
{
    int gpus = 0, ordinals[64], n_gpu, i;
    char why[512] = "";
    worker_slot *slots;

    pthread_mutex_lock(&queue_mu);
    if (queue_started) {
        pthread_mutex_unlock(&queue_mu);
        snprintf(err, err_len, "the pool is already started");
        return -1;
    }
    queue_settings = *s;
    pthread_mutex_unlock(&queue_mu);
    if (children_find_worker(err, err_len) != 0) return -1;

    if (strcmp(s->devices, "none") != 0) {
        gpus = children_probe_gpus(why, sizeof why);
        if (gpus > 0)
            log_info("probe: %d GPU(s)", gpus);
        else
            log_warn("probe: no GPU: %s; serving the cpu device only", why);
    }
    n_gpu = pool_choose_gpus(s->devices, gpus, ordinals, (int)(sizeof ordinals / sizeof ordinals[0]));

    slots = calloc((size_t)n_gpu + 1, sizeof *slots);
    if (!slots) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    for (i = 0; i <= n_gpu; i++) {
        worker_slot *w = &slots[i];
        if (i == 0)
            snprintf(w->name, sizeof w->name, "cpu");
        else
            snprintf(w->name, sizeof w->name, "cuda:%d", ordinals[i - 1]);
        w->sock = -1;
        w->state = SLOT_STARTING;
        clock_cond_init(&w->work_cond);
        clock_cond_init(&w->state_cond);
    }
    metrics_set_device_source(pool_metrics_devices);

    if (pool_finish_start(err, err_len) != 0) return -1;
    pthread_mutex_lock(&queue_mu);
    queue_slots = slots; /* an earlier pool's slots are left allocated: see queue.h */
    queue_nslots = n_gpu + 1;
    queue_stopping = 0;
    queue_draining = 0;
    queue_started = 1;
    for (i = 0; i < queue_nslots; i++) {
        int rc = pthread_create(&queue_slots[i].thread, NULL, pool_dispatch_thread, &queue_slots[i]);
        if (rc != 0) {
            pthread_mutex_unlock(&queue_mu);
            snprintf(err, err_len, "pthread_create: %s", strerror(rc));
            pool_stop();
            return -1;
        }
        queue_slots[i].thread_started = 1;
    }
    pool_wait_hellos_locked();
    if (queue_slots[0].state == SLOT_DOWN) {
        snprintf(err, err_len, "the cpu worker did not start: %s", queue_slots[0].reason);
        pthread_mutex_unlock(&queue_mu);
        pool_stop();
        return -1;
    }
    for (i = 0; i < queue_nslots; i++)
        log_info("pool: %s %s%s%s", queue_slots[i].name, slot_state_names[queue_slots[i].state],
                 queue_slots[i].reason[0] ? ": " : "", queue_slots[i].reason);
    pthread_mutex_unlock(&queue_mu);
    return 0;
}

void pool_quiesce(void)
{
    int i;

    pthread_mutex_lock(&queue_mu);
    if (queue_started && !queue_draining) {
        queue_draining = 1;
        for (i = 0; i < queue_nslots; i++) queue_shutdown_locked(&queue_slots[i], 0);
        log_info("pool: stopping: queued runs ended, running ones go on");
    }
    pthread_mutex_unlock(&queue_mu);
}

void pool_stop(void)
{
    int i, n;

    pool_quiesce();
    pthread_mutex_lock(&queue_mu);
    if (!queue_started || queue_stopping) {
        pthread_mutex_unlock(&queue_mu);
        return;
    }
    queue_stopping = 1;
    n = queue_nslots;
    for (i = 0; i < n; i++) {
        worker_slot *w = &queue_slots[i];
        /* Wakes a dispatcher blocked on a hello: it reads EOF. A running job is let finish
         * and stored (SIGTERM finishes the running job): its dispatcher sees queue_stopping
         * once it ends, and the job's own job_timeout_s bounds the wait. */
        if (w->sock >= 0 && !w->running) shutdown(w->sock, SHUT_RDWR);
        pthread_cond_broadcast(&w->work_cond);
        pthread_cond_broadcast(&w->state_cond);
    }
    pthread_mutex_unlock(&queue_mu);

    for (i = 0; i < n; i++)
        if (queue_slots[i].thread_started) pthread_join(queue_slots[i].thread, NULL);
    pool_finish_stop(); /* the runs the dispatchers handed over end before the pool does */

    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < n; i++) queue_slots[i].thread_started = 0;
    queue_started = 0;
    queue_draining = 0;
    pthread_mutex_unlock(&queue_mu);
    log_info("pool: stopped");
}

/* ------------------------------------------------------------------------- devices -- */

int pool_ready(void)
{
    int i, ready;

    pthread_mutex_lock(&queue_mu);
    ready = queue_started && !queue_stopping && !queue_draining && queue_nslots > 0;
    for (i = 0; ready && i < queue_nslots; i++) ready = queue_slots[i].state == SLOT_UP;
    pthread_mutex_unlock(&queue_mu);
    return ready;
}

/* Set member key of obj to item (taken), in its place when obj has it. */
static void pool_set_member(cJSON *obj, const char *key, cJSON *item)
{
    if (cJSON_GetObjectItem(obj, key))
        cJSON_ReplaceItemInObject(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

cJSON *pool_devices_json(void)
{
    cJSON *out = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(out, "devices");
    int i;

    cJSON_AddItemToObject(out, "build", build_info_json());
    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < queue_nslots; i++) {
        worker_slot *w = &queue_slots[i];
        cJSON *d = w->device ? cJSON_Duplicate(w->device, 1) : cJSON_CreateObject();
        if (!cJSON_GetObjectItem(d, "id")) cJSON_AddStringToObject(d, "id", w->name);
        pool_set_member(d, "state", cJSON_CreateString(slot_state_names[w->state]));
        pool_set_member(d, "restarts", cJSON_CreateNumber(w->restarts));
        if (w->state != SLOT_UP && w->reason[0]) pool_set_member(d, "error", cJSON_CreateString(w->reason));
        cJSON_AddItemToArray(list, d);
    }
    pthread_mutex_unlock(&queue_mu);
    return out;
}

const char *pool_default_device(int on_cpu)
{
    const char *name = NULL;
    int i;

    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < queue_nslots && !name; i++) {
        worker_slot *w = &queue_slots[i];
        if (on_cpu ? i == 0 : (i > 0 && w->state != SLOT_DOWN)) name = w->name;
    }
    pthread_mutex_unlock(&queue_mu);
    return name;
}

int pool_device_cc(const char *device)
{
    worker_slot *w;
    const cJSON *cc;
    int result = -1;
    struct timespec until = clock_deadline(CHILDREN_HELLO_LIMIT_MS);

    if (device && strcmp(device, "cpu") == 0) return 0;
    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(device);
    /* A request right after start (or after a restart) waits for the hello it needs. */
    while (w && w->state == SLOT_STARTING && !queue_stopping)
        if (pthread_cond_timedwait(&w->state_cond, &queue_mu, &until) == ETIMEDOUT) break;
    if (w && w->state == SLOT_UP && w->device) {
        cc = cJSON_GetObjectItem(w->device, "compute_capability");
        if (cJSON_IsString(cc)) {
            int major = 0, minor = 0;
            if (sscanf(cc->valuestring, "%d.%d", &major, &minor) >= 1) result = major * 10 + minor;
        } else if (cJSON_IsNumber(cc)) {
            double v = cc->valuedouble;
            result = v >= 10 && v == (int)v ? (int)v : (int)(v * 10 + 0.5); /* 9.0 or 90 */
        }
    }
    pthread_mutex_unlock(&queue_mu);
    return result;
}

int pool_device_generation(const char *device)
{
    worker_slot *w;
    int g = -1;

    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(device);
    if (w && w->state != SLOT_DOWN) g = w->restarts;
    pthread_mutex_unlock(&queue_mu);
    return g;
}

/* A copy of a part of device's last hello: its device object (variant NULL), or the report
 * of that variant. */
static cJSON *pool_hello_part(const char *device, const char *variant)
{
    const worker_slot *w;
    const cJSON *part = NULL, *item;
    cJSON *copy = NULL;

    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(device);
    if (w && !variant) part = w->device;
    if (w && variant && cJSON_IsArray(w->variants))
        cJSON_ArrayForEach(item, w->variants) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(item, "name"));
            if (name && !strcmp(name, variant)) {
                part = item;
                break;
            }
        }
    if (part) copy = cJSON_Duplicate(part, 1);
    pthread_mutex_unlock(&queue_mu);
    return copy;
}

cJSON *pool_device_json(const char *device) { return pool_hello_part(device, NULL); }

cJSON *pool_device_variant(const char *device, const char *name) { return pool_hello_part(device, name); }

void pool_device_list(char *out, size_t len)
{
    cJSON *o = pool_devices_json(), *list = o ? cJSON_GetObjectItemCaseSensitive(o, "devices") : NULL, *d;
    size_t n = 0;

    out[0] = '\0';
    cJSON_ArrayForEach(d, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (cJSON_IsString(id) && n < len)
            n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", id->valuestring);
    }
    if (!out[0]) snprintf(out, len, "cpu");
    cJSON_Delete(o);
}
