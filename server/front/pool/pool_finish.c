/* pool_finish.c — the thread that ends finished runs (pool_finish.h).
 *
 * A FIFO under queue_mu, one thread for every slot: runs end in the order their dispatchers
 * handed them over, and the store, whose writes are serialised anyway, sees one writer of
 * final records. At pool_stop the thread ends what waits before it leaves.
 */
#include "server/front/pool/pool_finish.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

typedef struct finished_run {
    pool_job *job;
    cJSON *result;
    struct finished_run *next;
} finished_run;

static finished_run *finish_head, *finish_tail; /* under queue_mu */
static pthread_cond_t finish_cond;
static int finish_stopping, finish_started;
static pthread_t finish_thread;

/* The run ends as done: its record stored, its hooks run, its waiter answered. */
static void finish_run(pool_job *j, cJSON *result)
{
    cJSON *record;

    run_record_set_result(&j->rec, result);
    record = queue_end_run(j, POOL_RUN_DONE);
    pthread_mutex_lock(&queue_mu);
    queue_finish_locked(j, 200, record);
    pthread_mutex_unlock(&queue_mu);
}

static void *finish_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&queue_mu);
    for (;;) {
        finished_run *f;
        while (!finish_head && !finish_stopping) pthread_cond_wait(&finish_cond, &queue_mu);
        f = finish_head;
        if (!f) break; /* stopping, and nothing left */
        finish_head = f->next;
        if (!finish_head) finish_tail = NULL;
        pthread_mutex_unlock(&queue_mu);
        finish_run(f->job, f->result);
        free(f);
        pthread_mutex_lock(&queue_mu);
    }
    pthread_mutex_unlock(&queue_mu);
    return NULL;
}

int pool_finish_start(char *err, size_t err_len)
{
    int rc;

    pthread_mutex_lock(&queue_mu);
    finish_stopping = 0;
    pthread_mutex_unlock(&queue_mu);
    clock_cond_init(&finish_cond);
    rc = pthread_create(&finish_thread, NULL, finish_main, NULL);
    if (rc != 0) {
        snprintf(err, err_len, "pthread_create: %s", strerror(rc));
        return -1;
    }
    finish_started = 1;
    return 0;
}

void pool_finish_done(pool_job *j, cJSON *result)
{
    finished_run *f = finish_started ? malloc(sizeof *f) : NULL;

    if (!f) { /* no thread, or no memory to hand it over: end it here */
        if (finish_started) log_warn("run %lld: ended on its dispatcher's thread (out of memory)", j->id);
        finish_run(j, result);
        return;
    }
    f->job = j;
    f->result = result;
    f->next = NULL;
    pthread_mutex_lock(&queue_mu);
    if (finish_tail)
        finish_tail->next = f;
    else
        finish_head = f;
    finish_tail = f;
    pthread_cond_signal(&finish_cond);
    pthread_mutex_unlock(&queue_mu);
}

void pool_finish_stop(void)
{
    if (!finish_started) return;
    pthread_mutex_lock(&queue_mu);
    finish_stopping = 1;
    pthread_cond_signal(&finish_cond);
    pthread_mutex_unlock(&queue_mu);
    pthread_join(finish_thread, NULL);
    pthread_cond_destroy(&finish_cond);
    finish_started = 0;
}
