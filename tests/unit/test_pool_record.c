/* test_pool_record.c — the pool against real worker processes on the cpu device: the run
 * record, crash / timeout / sticky recovery, refusals (unknown device, full queue), and a
 * stop with a job running and jobs queued (each ends exactly once; refused rows deleted).
 *
 * This binary is its own worker: the pool execs /proc/self/exe --worker cpu --ipc-fd 3
 * <our flags>, so main() dispatches --worker like server/main.c does, and this file provides
 * main_original_argv() (main.o is not linked into unit tests).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "server/log.h"
#include "server/main.h"
#include "server/pool.h"
#include "server/settings.h"
#include "server/store.h"
#include "server/worker.h"

static char data_dir[] = "/tmp/attnd-test-pool-XXXXXX";
static char *test_argv[16];
static int test_argc;

char *const *main_original_argv(void) { return test_argv; }
int main_original_argc(void) { return test_argc; }

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

typedef struct async_run {
    pthread_t thread;
    run_request r;
    int status;
    cJSON *response;
} async_run;

static void *run_thread(void *arg)
{
    async_run *a = arg;
    a->status = pool_run_sync(&a->r, &a->response);
    return NULL;
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

    if (argc >= 5 && strcmp(argv[1], "--worker") == 0) { /* we are the pool's worker */
        if (settings_load(&s, argc - 4, argv + 4, err, sizeof err) != 0) return 2;
        return worker_main(&s, argv[2], atoi(argv[4]));
    }

    if (!mkdtemp(data_dir)) return 1;
    test_argv[test_argc++] = argv[0];
    test_argv[test_argc++] = "--devices=none";
    test_argv[test_argc++] = "--job-timeout-s=2";
    test_argv[test_argc++] = "--queue-depth=2";
    test_argv[test_argc++] = "--enable-fault-injection=true";
    test_argv[test_argc++] = "--log-level=warn";
    test_argv[test_argc++] = "--cpu-threads=1";
    test_argv[test_argc] = NULL;
    if (settings_load(&s, test_argc, test_argv, err, sizeof err) != 0) {
        fprintf(stderr, "settings: %s\n", err);
        return 1;
    }
    snprintf(s.data_dir, sizeof s.data_dir, "%s", data_dir);
    log_init("test", "warn");

    CHECK(store_open(data_dir, err, sizeof err) == 0, "store_open: %s", err);
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
        CHECK(o && strcmp(str_of(o, "status"), "done") == 0, "stored done");
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

    /* A hanging job runs, two wait (queue_depth 2), the next is refused 429. Then stop: the
     * running job is let finish (issue 6: SIGTERM finishes the running job), bounded by
     * job_timeout_s, so a hanging one ends "timeout"; the waiting ones are refused and their
     * rows deleted. */
    {
        async_run runs[3];
        long long before = store_count_runs();
        for (i = 0; i < 3; i++) {
            small_request(&runs[i].r, i == 0 ? "hang" : NULL);
            runs[i].response = NULL;
            pthread_create(&runs[i].thread, NULL, run_thread, &runs[i]);
            usleep(200000); /* in order: the first is running before the others queue */
        }
        small_request(&r, NULL);
        status = pool_run_sync(&r, &resp);
        CHECK(status == 429 && strcmp(error_code(resp), "queue_full") == 0, "queue full: %d %s", status,
              error_code(resp));
        cJSON_Delete(resp);
        pool_stop();
        for (i = 0; i < 3; i++) pthread_join(runs[i].thread, NULL);
        CHECK(runs[0].status == 500 && strcmp(error_code(runs[0].response), "timeout") == 0,
              "running job at stop: %d %s", runs[0].status, error_code(runs[0].response));
        for (i = 1; i < 3; i++)
            CHECK(runs[i].status == 503, "queued job at stop: %d %s", runs[i].status, error_code(runs[i].response));
        CHECK(store_count_runs() == before + 1, "only the run that ran is kept: %lld vs %lld", store_count_runs(),
              before + 1);
        for (i = 0; i < 3; i++) cJSON_Delete(runs[i].response);
    }
    CHECK(pool_ready() == 0, "not ready after stop");
    small_request(&r, NULL);
    status = pool_run_sync(&r, &resp);
    CHECK(status == 503, "run after stop: %d", status);
    cJSON_Delete(resp);

    store_close();
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
    return CHECK_DONE();
}
