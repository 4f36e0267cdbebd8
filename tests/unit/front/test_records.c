/* test_records.c — the run record: its JSON in the API's field order at each state, the
 * worker result merged in (its trace kept apart, its median read once), the error and
 * client_gone of a final record, one store write per state change (the first one filling
 * in the id), and the metrics counted from the struct. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "server/front/metrics.h"
#include "server/front/records.h"
#include "server/front/store/store.h"

/* The member names of o joined by commas, into buf. */
static const char *keys_of(const cJSON *o, char *buf, size_t len)
{
    const cJSON *item;
    size_t n = 0;

    buf[0] = '\0';
    cJSON_ArrayForEach(item, o) n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? "," : "", item->string);
    return buf;
}

/* The stored record of run id (caller deletes; NULL when none), its member names in keys. */
static cJSON *stored(long long id, char *keys, size_t len)
{
    char *text = store_get_run(id);
    cJSON *o = cJSON_Parse(text ? text : "null");
    keys_of(o, keys, len);
    free(text);
    return cJSON_IsObject(o) ? o : (cJSON_Delete(o), NULL);
}

static void small_request(run_request *r)
{
    run_request_defaults(r);
    snprintf(r->backend, sizeof r->backend, "reference");
    snprintf(r->device, sizeof r->device, "cpu");
}

int main(void)
{
    char dir[] = "/tmp/attnd-test-records-XXXXXX", err[512] = "", keys[512], cmd[300];
    run_record rec;
    run_request r;
    cJSON *json, *o, *device, *result;
    long long id;

    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(store_open(dir, err, sizeof err) == 0, "open: %s", err);
    small_request(&r);

    /* queued: one insert, the id filled in the stored text and in the struct */
    device = cJSON_CreateObject();
    cJSON_AddStringToObject(device, "id", "cpu");
    run_record_init(&rec, &r, device);
    CHECK(rec.status == RUN_QUEUED && strlen(rec.created) == 24 && rec.finished[0] == '\0', "init");
    CHECK(run_record_save(&rec) == 0 && rec.id > 0, "saved queued, id %lld", rec.id);
    CHECK(store_count_runs() == 1, "one row");
    o = stored(rec.id, keys, sizeof keys);
    CHECK(!strcmp(keys, "id,status,created,finished,node,backend,build,params,device"),
          "queued keys: %s", keys);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "id")) == (double)rec.id, "stored id");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "finished")), "finished null while queued");
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "status")), "queued"), "queued");
    cJSON_Delete(o);

    /* running: a new device object, replaced in place */
    run_record_set_device(&rec, NULL);
    rec.status = RUN_RUNNING;
    CHECK(run_record_save(&rec) == 0, "saved running");
    o = stored(rec.id, keys, sizeof keys);
    CHECK(!strcmp(keys, "id,status,created,finished,node,backend,build,params,device"),
          "running keys: %s", keys);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "device")) && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "status")), "running"),
          "running, device null");
    cJSON_Delete(o);

    /* done: the result's members after device, its trace apart, its median read */
    result = cJSON_Parse("{\"timing\":{\"median_us\":250.5},\"kernels\":null,\"trace\":{\"traceEvents\":[]},"
                         "\"output\":{\"fingerprint\":\"x\"},\"verify\":{\"ok\":true}}");
    run_record_set_result(&rec, result);
    CHECK(rec.median_us == 250.5, "median %g", rec.median_us);
    CHECK(rec.trace && !cJSON_GetObjectItem(rec.result, "trace"), "trace apart");
    rec.client_gone = 1;
    run_record_finish(&rec, RUN_DONE);
    CHECK(strlen(rec.finished) == 24, "finished %s", rec.finished);
    json = run_record_to_json(&rec);
    CHECK(!strcmp(keys_of(json, keys, sizeof keys),
                  "id,status,created,finished,node,backend,build,params,device,timing,kernels,output,verify,client_gone"),
          "done keys: %s", keys);
    CHECK(run_record_store(&rec, json) == 0, "stored done");
    cJSON_Delete(json);
    {
        char *trace = store_get_trace(rec.id);
        CHECK(trace && strstr(trace, "traceEvents"), "trace stored: %s", trace ? trace : "(null)");
        free(trace);
    }
    CHECK(store_count_runs() == 1, "still one row");
    { /* the counters take the median from the struct */
        char *text;
        metrics_observe_run(&rec);
        text = metrics_render();
        CHECK(text && strstr(text, "attnd_run_cpu_seconds_sum{backend=\"reference\",device=\"cpu\"} 0.0002505\n") &&
                  strstr(text, "attnd_runs_total{backend=\"reference\",status=\"done\"} 1\n"),
              "metrics: %s", text ? text : "(null)");
        free(text);
    }
    run_record_free(&rec);

    /* failed: the error after the device; client_gone only in a final record */
    run_record_init(&rec, &r, NULL);
    rec.client_gone = 1;
    json = run_record_to_json(&rec);
    CHECK(!cJSON_GetObjectItem(json, "client_gone"), "no client_gone while queued");
    cJSON_Delete(json);
    rec.client_gone = 0;
    CHECK(run_record_save(&rec) == 0, "second run saved");
    id = rec.id;
    run_record_set_error(&rec, "worker_crashed", "worker cpu crashed");
    run_record_finish(&rec, RUN_FAILED);
    CHECK(run_record_save(&rec) == 0, "saved failed");
    o = stored(id, keys, sizeof keys);
    CHECK(!strcmp(keys, "id,status,created,finished,node,backend,build,params,device,error"),
          "failed keys: %s", keys);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "code")), "worker_crashed"),
          "error code");
    CHECK(rec.median_us < 0, "no median");
    cJSON_Delete(o);

    /* refused: the row goes */
    run_record_delete(&rec);
    CHECK(store_get_run(id) == NULL && store_count_runs() == 1, "deleted");
    run_record_free(&rec);

    CHECK(!strcmp(run_status_name(RUN_CANCELLED), "cancelled"), "status names");
    store_close();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return CHECK_DONE();
}
