/* test_pool_record.c — the pool against real worker processes on the cpu device: the run
 * record, crash / timeout / sticky recovery, refusals (unknown device, full queue, over
 * cpu_max_macs), a synchronous client that leaves (queued: cancelled; running: it finishes
 * and says so), and a stop with a job running and jobs queued (each ends exactly once; the
 * queued ones at once: sync refused and deleted, async stored cancelled).
 *
 * The workers are the build's real attnd-worker (ATTND_WORKER_BIN, which `make test-unit`
 * sets), started with this test's settings flags.
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "common/log.h"
#include "server/front/pool/pool.h"
#include "common/settings.h"
#include "server/front/store/store.h"

static char data_dir[] = "/tmp/attnd-test-pool-XXXXXX";
static char *test_argv[16];
static int test_argc;


static void small_request(run_request *r, const char *fault)
{
    run_request_defaults(r);
    snprintf(r->backend, sizeof r->backend, "reference");
    snprintf(r->device, sizeof r->device, "cpu");
    r->problem.batch = 1;
    r->problem.heads = 2;
    r->problem.seq_q = r->problem.seq_kv = 32;
    r->problem.head_dim = 16;
    r->problem.scale = 0.25;
    r->iters = 2;
    r->warmup = 1;
    snprintf(r->fault, sizeof r->fault, "%s", fault ? fault : "");
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *error_code(const cJSON *o)
{
    return str_of(cJSON_GetObjectItem(o, "error"), "code");
}

static const cJSON *error_field(const cJSON *o)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "field");
}

typedef struct async_run {
    pthread_t thread;
    run_request r;
    int status;
    cJSON *response;
    int gone;           /* the client's state, as pool_run_watched's gone() reads it */
    long long ended_ms; /* when pool_run_* returned */
} async_run;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *run_thread(void *arg)
{
    async_run *a = arg;
    a->status = pool_run_sync(&a->r, &a->response);
    a->ended_ms = now_ms();
    return NULL;
}

static int client_gone(const void *client) { return __atomic_load_n(&((const async_run *)client)->gone, __ATOMIC_ACQUIRE); }

static void *watched_thread(void *arg)
{
    async_run *a = arg;
    a->status = pool_run_watched(&a->r, NULL, client_gone, a, &a->response);
    a->ended_ms = now_ms();
    return NULL;
}

/* The stored record of run id (caller deletes), NULL when none. */
static cJSON *stored_record(long long id)
{
    char *text = store_get_run(id);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    return o;
}

/* The id of the run in state status (the first), waiting up to 5 s; -1 when none. */
static long long wait_for_state(const char *status)
{
    int tries;
    for (tries = 0; tries < 500; tries++) {
        char *rows = store_list_runs(0, 1000, NULL, status);
        cJSON *list = rows ? cJSON_Parse(rows) : NULL;
        long long id = cJSON_GetArraySize(list) > 0
                           ? (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id"))
                           : -1;
        cJSON_Delete(list);
        free(rows);
        if (id > 0) return id;
        usleep(10000);
    }
    return -1;
}

static int restarts_of_cpu(void)
{
    cJSON *d = pool_devices_json();
    cJSON *cpu = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "devices"), 0);
    const cJSON *n = cJSON_GetObjectItem(cpu, "restarts");
    int restarts = cJSON_IsNumber(n) ? (int)n->valuedouble : -1;
    cJSON_Delete(d);
    return restarts;
}

int main(int argc, char **argv)
{
    settings s;
    char err[512] = "", *stored;
    run_request r;
    cJSON *resp = NULL;
    int status, i;
    long long id;

    const char *worker = getenv("ATTND_WORKER_BIN");

    if (!worker) {
        fprintf(stderr, "test_pool_record: set ATTND_WORKER_BIN to the attnd-worker to start\n");
        return 1;
    }
    if (!mkdtemp(data_dir)) return 1;
    test_argv[test_argc++] = argv[0];
    test_argv[test_argc++] = "--devices=none";
    test_argv[test_argc++] = "--job-timeout-s=2";
    test_argv[test_argc++] = "--queue-depth=2";
    test_argv[test_argc++] = "--enable-fault-injection=true";
    test_argv[test_argc++] = "--log-level=warn";
    test_argv[test_argc++] = "--cpu-threads=1";
    test_argv[test_argc++] = "--cpu-max-macs=4000000000";
    test_argv[test_argc] = NULL;
    if (settings_load(&s, test_argc, test_argv, err, sizeof err) != 0) {
        fprintf(stderr, "settings: %s\n", err);
        return 1;
    }
    snprintf(s.data_dir, sizeof s.data_dir, "%s", data_dir);
    log_init("test", "warn");

    CHECK(store_open(data_dir, err, sizeof err) == 0, "store_open: %s", err);
    pool_set_worker_exe(worker);
    pool_set_worker_flags(test_argc - 1, test_argv + 1);
    CHECK(pool_start(&s, err, sizeof err) == 0, "pool_start: %s", err);
    CHECK(pool_ready() == 1, "ready after start");
    CHECK(pool_default_device(1) && strcmp(pool_default_device(1), "cpu") == 0, "default cpu device");
    CHECK(pool_default_device(0) == NULL, "no GPU device");
    CHECK(pool_device_cc("cpu") == 0, "cpu cc");
    CHECK(pool_device_cc("cuda:0") == -1, "unknown device cc");

    /* A run: 200 and the whole record, stored the same. */
    small_request(&r, NULL);
    status = pool_run_sync(&r, &resp);
    CHECK(status == 200, "run status %d", status);
    CHECK(strcmp(str_of(resp, "status"), "done") == 0, "done");
    CHECK(strlen(str_of(resp, "created")) == 24 && str_of(resp, "created")[23] == 'Z', "created %s",
          str_of(resp, "created"));
    CHECK(strlen(str_of(resp, "finished")) == 24, "finished %s", str_of(resp, "finished"));
    CHECK(strcmp(str_of(resp, "backend"), "reference") == 0, "backend");
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(resp, "params")), "params");
    CHECK(strcmp(str_of(cJSON_GetObjectItem(resp, "device"), "id"), "cpu") == 0, "device object");
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(resp, "timing")), "timing merged from the worker");
    id = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(resp, "id"));
    CHECK(id > 0, "id %lld", id);
    stored = store_get_run(id);
    {
        cJSON *o = stored ? cJSON_Parse(stored) : NULL;
        char *answered = cJSON_PrintUnformatted(resp);
        CHECK(o && strcmp(str_of(o, "status"), "done") == 0, "stored done");
        CHECK(answered && stored && strcmp(answered, stored) == 0, "the answer is the stored record, byte for byte");
        cJSON_free(answered);
        cJSON_Delete(o);
    }
    free(stored);
    cJSON_Delete(resp);

    /* Crash: failed with the signal, worker restarted, next run fine. */
    small_request(&r, "crash");
    status = pool_run_sync(&r, &resp);
    CHECK(status == 500 && strcmp(error_code(resp), "worker_crashed") == 0, "crash: %d %s", status, error_code(resp));
    CHECK(strstr(str_of(cJSON_GetObjectItem(resp, "error"), "message"), "signal 11") != NULL, "crash message");
    cJSON_Delete(resp);
    small_request(&r, NULL);
    status = pool_run_sync(&r, &resp);
    CHECK(status == 200, "run after crash %d", status);
    cJSON_Delete(resp);
    CHECK(restarts_of_cpu() == 1, "one restart, got %d", restarts_of_cpu());

    /* Timeout (job_timeout_s=2): killed, failed, restarted. */
    small_request(&r, "hang");
    status = pool_run_sync(&r, &resp);
    CHECK(status == 500 && strcmp(error_code(resp), "timeout") == 0, "hang: %d %s", status, error_code(resp));
    CHECK(strstr(str_of(cJSON_GetObjectItem(resp, "error"), "message"), "job_timeout_s=2 s") != NULL,
          "timeout message");
    cJSON_Delete(resp);

    /* Sticky on cpu: failed (fatal), restarted. */
    small_request(&r, "sticky");
    status = pool_run_sync(&r, &resp);
    CHECK(status == 500 && strcmp(error_code(resp), "job_failed") == 0, "sticky: %d %s", status, error_code(resp));
    cJSON_Delete(resp);
    small_request(&r, NULL);
    status = pool_run_sync(&r, &resp);
    CHECK(status == 200, "run after sticky %d", status);
    cJSON_Delete(resp);
    CHECK(restarts_of_cpu() == 3, "three restarts, got %d", restarts_of_cpu());

    /* Unknown device: 503, nothing stored. */
    {
        long long before = store_count_runs();
        small_request(&r, NULL);
        snprintf(r.device, sizeof r.device, "cuda:7");
        status = pool_run_sync(&r, &resp);
        CHECK(status == 503 && strcmp(error_code(resp), "no_device") == 0, "no device: %d", status);
        cJSON_Delete(resp);
        CHECK(store_count_runs() == before, "refusal stored nothing");
    }

    /* Over cpu_max_macs (4*10^9 here, for the whole run): 422 before it queues, nothing
     * stored, saying what would run. */
    {
        long long before = store_count_runs();
        const char *message;
        small_request(&r, NULL);
        r.problem.seq_q = r.problem.seq_kv = 8192; /* 1*2*8192*8192*16 = 2147483648 MACs, 4 forwards */
        status = pool_run_sync(&r, &resp);
        CHECK(status == 422 && strcmp(error_code(resp), "too_costly") == 0, "too costly: %d %s", status,
              error_code(resp));
        message = str_of(cJSON_GetObjectItem(resp, "error"), "message");
        CHECK(strstr(message, "8589934592") && strstr(message, "4 forwards") && strstr(message, "2147483648 each") &&
                  strstr(message, "cpu_max_macs=4000000000"),
              "the estimate and the setting in the message: %s", message);
        /* 4e9 / 4 forwards = 1e9 a forward: seq 5590 (1*2*5590^2*16 = 999987200) */
        CHECK(strstr(message, "as asked, it fits with seq=5590") && !strstr(message, "iters="), "what would fit: %s", message);
        CHECK(cJSON_IsNull(error_field(resp)), "field null");
        cJSON_Delete(resp);
        /* A cheap forward, many times: the count is the whole run's. 131072 MACs * 100002. */
        small_request(&r, NULL);
        r.problem.seq_q = r.problem.seq_kv = 64;
        r.iters = 100000;
        status = pool_run_sync(&r, &resp);
        message = str_of(cJSON_GetObjectItem(resp, "error"), "message");
        CHECK(status == 422 && strstr(message, "100002 forwards") && strstr(message, "iters=30515"),
              "100000 cheap iterations: %d %s", status, message); /* 4e9 / 131072 = 30517, less warmup and output */
        cJSON_Delete(resp);
        CHECK(store_count_runs() == before, "a refusal stores nothing");
    }

    /* A synchronous client that leaves while its run waits: cancelled at once (stored,
     * client_gone), its slot freed; the run behind the hanging one never runs. */
    {
        async_run hang, w;
        long long t0, id;
        cJSON *o;
        small_request(&hang.r, "hang");
        hang.response = NULL;
        pthread_create(&hang.thread, NULL, run_thread, &hang);
        CHECK(wait_for_state("running") > 0, "the hanging run runs");
        small_request(&w.r, NULL);
        w.response = NULL;
        w.gone = 0;
        pthread_create(&w.thread, NULL, watched_thread, &w);
        id = wait_for_state("queued");
        CHECK(id > 0 && pool_queue_depth("cpu") == 1, "one queued: %lld, depth %d", id, pool_queue_depth("cpu"));
        t0 = now_ms();
        __atomic_store_n(&w.gone, 1, __ATOMIC_RELEASE);
        pthread_join(w.thread, NULL);
        CHECK(w.ended_ms - t0 < 1000, "answered %lld ms after the client left", w.ended_ms - t0);
        CHECK(w.status == 409 && strcmp(error_code(w.response), "client_gone") == 0, "gone while queued: %d %s",
              w.status, error_code(w.response));
        CHECK(pool_queue_depth("cpu") == 0, "its slot is free");
        o = stored_record(id);
        CHECK(o && !strcmp(str_of(o, "status"), "cancelled") && !strcmp(error_code(o), "client_gone") &&
                  cJSON_IsTrue(cJSON_GetObjectItem(o, "client_gone")) && strlen(str_of(o, "finished")) == 24,
              "stored cancelled, client_gone");
        cJSON_Delete(o);
        cJSON_Delete(w.response);
        pthread_join(hang.thread, NULL);
        cJSON_Delete(hang.response);

        /* Leaves while it runs: the run finishes unattended and its record says so. */
        small_request(&w.r, NULL);
        w.r.iters = 0, w.r.max_iters = 100000, w.r.min_time_ms = w.r.max_time_ms = 800;
        w.response = NULL;
        w.gone = 0;
        pthread_create(&w.thread, NULL, watched_thread, &w);
        id = wait_for_state("running");
        CHECK(id > 0, "the run runs");
        __atomic_store_n(&w.gone, 1, __ATOMIC_RELEASE);
        pthread_join(w.thread, NULL);
        CHECK(w.status == 409 && strcmp(error_code(w.response), "client_gone") == 0, "gone while running: %d %s",
              w.status, error_code(w.response));
        cJSON_Delete(w.response);
        for (i = 0; i < 300; i++) {
            o = stored_record(id);
            if (o && strcmp(str_of(o, "status"), "running") != 0) break;
            cJSON_Delete(o);
            o = NULL;
            usleep(10000);
        }
        CHECK(o && !strcmp(str_of(o, "status"), "done") && cJSON_IsTrue(cJSON_GetObjectItem(o, "client_gone")),
              "finished done, client_gone");
        cJSON_Delete(o);
    }

    /* A hanging job runs, a sync and an async run wait (queue_depth 2), the next is refused
     * 429 (field null). Then stop: the waiting ones end at once (the sync one 503
     * shutting_down and deleted, the async one stored cancelled); the running job is let
     * finish, bounded by job_timeout_s, so a hanging one ends "timeout". */
    {
        async_run runs[2];
        long long before = store_count_runs(), async_id, stop_ms;
        cJSON *o;
        for (i = 0; i < 2; i++) {
            small_request(&runs[i].r, i == 0 ? "hang" : NULL);
            runs[i].response = NULL;
            pthread_create(&runs[i].thread, NULL, run_thread, &runs[i]);
            usleep(200000); /* in order: the first is running before the other queues */
        }
        small_request(&r, NULL);
        status = pool_run_async(&r, &resp);
        CHECK(status == 202, "async queued: %d", status);
        async_id = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(resp, "id"));
        cJSON_Delete(resp);
        small_request(&r, NULL);
        status = pool_run_sync(&r, &resp);
        CHECK(status == 429 && strcmp(error_code(resp), "queue_full") == 0, "queue full: %d %s", status,
              error_code(resp));
        CHECK(cJSON_IsNull(error_field(resp)), "429 field null");
        cJSON_Delete(resp);
        stop_ms = now_ms();
        pool_stop();
        for (i = 0; i < 2; i++) pthread_join(runs[i].thread, NULL);
        CHECK(runs[0].status == 500 && strcmp(error_code(runs[0].response), "timeout") == 0,
              "running job at stop: %d %s", runs[0].status, error_code(runs[0].response));
        CHECK(runs[1].status == 503 && strcmp(error_code(runs[1].response), "shutting_down") == 0 &&
                  cJSON_IsNull(error_field(runs[1].response)),
              "queued job at stop: %d %s", runs[1].status, error_code(runs[1].response));
        CHECK(runs[1].ended_ms - stop_ms < 500 && runs[1].ended_ms < runs[0].ended_ms,
              "the queued one is answered at once (%lld ms), before the running one ends",
              runs[1].ended_ms - stop_ms);
        o = stored_record(async_id);
        CHECK(o && !strcmp(str_of(o, "status"), "cancelled") && !strcmp(error_code(o), "shutting_down") &&
                  strlen(str_of(o, "finished")) == 24,
              "async queued run stored cancelled, shutting_down");
        cJSON_Delete(o);
        CHECK(store_count_runs() == before + 2, "kept: the run that ran and the async one: %lld vs %lld",
              store_count_runs(), before + 2);
        for (i = 0; i < 2; i++) cJSON_Delete(runs[i].response);
    }
    CHECK(pool_ready() == 0, "not ready after stop");
    small_request(&r, NULL);
    status = pool_run_sync(&r, &resp);
    CHECK(status == 503 && strcmp(error_code(resp), "shutting_down") == 0, "run after stop: %d %s", status,
          error_code(resp));
    cJSON_Delete(resp);

    store_close();
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
    return CHECK_DONE();
}
