/* node_heartbeat.c — the heartbeat thread (node_heartbeat.h). A write that fails (the fleet
 * database is away) is not retried: the next beat carries the same news. */
#include "server/front/pool/node_heartbeat.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/pool/pool.h"
#include "server/front/store/store.h"

static pthread_mutex_t beat_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t beat_cv; /* on the monotonic clock: node_heartbeat_start */
static pthread_once_t beat_cv_once = PTHREAD_ONCE_INIT;
static pthread_t beat_thread;
static int beat_running, beat_stopping, beat_period_s;

/* The devices in brief: each device's scalar members (id, name, memory, state…), not the
 * nested reports, so a heartbeat stays a few hundred bytes. */
static char *heartbeat_devices_text(void)
{
    cJSON *all = pool_devices_json(), *brief = cJSON_CreateArray(), *d, *m;
    char *text = NULL, *copy = NULL;

    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(all, "devices")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_ArrayForEach(m, d) {
            if (cJSON_IsString(m) || cJSON_IsNumber(m) || cJSON_IsBool(m))
                cJSON_AddItemToObject(o, m->string, cJSON_Duplicate(m, 0));
        }
        cJSON_AddItemToArray(brief, o);
    }
    text = cJSON_PrintUnformatted(brief);
    cJSON_Delete(all);
    cJSON_Delete(brief);
    if (text) copy = strdup(text);
    cJSON_free(text);
    return copy;
}

static void heartbeat_once(void)
{
    char *devices = heartbeat_devices_text();
    if (store_heartbeat(devices ? devices : "[]") != 0) log_debug("heartbeat not written");
    free(devices);
}

static void *heartbeat_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&beat_mu);
    while (!beat_stopping) {
        struct timespec until = clock_deadline(beat_period_s * 1000LL);
        pthread_cond_timedwait(&beat_cv, &beat_mu, &until);
        if (beat_stopping) break;
        pthread_mutex_unlock(&beat_mu);
        heartbeat_once();
        pthread_mutex_lock(&beat_mu);
    }
    pthread_mutex_unlock(&beat_mu);
    return NULL;
}

static void beat_cv_init(void) { clock_cond_init(&beat_cv); }

int node_heartbeat_start(int period_s)
{
    int rc;

    pthread_once(&beat_cv_once, beat_cv_init);
    heartbeat_once();
    pthread_mutex_lock(&beat_mu);
    beat_period_s = period_s > 0 ? period_s : 5;
    beat_stopping = 0;
    rc = pthread_create(&beat_thread, NULL, heartbeat_main, NULL);
    beat_running = rc == 0;
    pthread_mutex_unlock(&beat_mu);
    if (rc != 0) log_error("heartbeat thread: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

void node_heartbeat_stop(void)
{
    pthread_mutex_lock(&beat_mu);
    if (!beat_running) {
        pthread_mutex_unlock(&beat_mu);
        return;
    }
    beat_stopping = 1;
    pthread_cond_signal(&beat_cv);
    pthread_mutex_unlock(&beat_mu);
    pthread_join(beat_thread, NULL);
    beat_running = 0;
}
