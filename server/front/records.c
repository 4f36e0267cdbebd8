/* records.c — the run record (records.h): the struct, its JSON, its row in the store. */
#include "server/front/records.h"

#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/model_presets.h"
#include "server/front/store/store.h"

static const char *const run_status_names[] = {"queued", "running", "done", "failed", "cancelled"};

const char *run_status_name(run_status s)
{
    return (unsigned)s < sizeof run_status_names / sizeof run_status_names[0] ? run_status_names[s] : "unknown";
}

void run_record_init(run_record *rec, const run_request *r, cJSON *device)
{
    memset(rec, 0, sizeof *rec);
    rec->status = RUN_QUEUED;
    clock_text_now_iso(rec->created, sizeof rec->created);
    rec->request = *r;
    rec->device = device;
    rec->median_us = -1.0;
    rec->queue_wait_s = -1.0;
}

void run_record_free(run_record *rec)
{
    cJSON_Delete(rec->device);
    cJSON_Delete(rec->result);
    cJSON_Delete(rec->trace);
    free(rec->error_code);
    free(rec->error_message);
    rec->device = rec->result = rec->trace = NULL;
    rec->error_code = rec->error_message = NULL;
}

void run_record_set_device(run_record *rec, cJSON *device)
{
    cJSON_Delete(rec->device);
    rec->device = device;
}

void run_record_set_result(run_record *rec, cJSON *result)
{
    const cJSON *median;

    cJSON_Delete(rec->result);
    cJSON_Delete(rec->trace);
    rec->trace = cJSON_DetachItemFromObject(result, "trace"); /* GET /v1/runs/ID/trace, not the record */
    rec->result = result;
    median = cJSON_GetObjectItem(cJSON_GetObjectItem(result, "timing"), "median_us");
    rec->median_us = cJSON_IsNumber(median) ? median->valuedouble : -1.0;
}

void run_record_set_error(run_record *rec, const char *code, const char *message)
{
    free(rec->error_code);
    free(rec->error_message);
    rec->error_code = strdup(code ? code : "");
    rec->error_message = strdup(message ? message : "");
}

void run_record_finish(run_record *rec, run_status status)
{
    rec->status = status;
    clock_text_now_iso(rec->finished, sizeof rec->finished);
}

/* The "model" object of a run that named a preset: its name, the preset as config/models.json
 * has it, and the parameters the client gave that differ from it (so the record says both
 * what the model is and what ran: "params"). NULL when the preset is not loaded. */
static cJSON *record_model_json(const run_request *r)
{
    const model_preset *m = model_presets_find(r->model);
    cJSON *o, *over;
    char names[128], *tok, *save = NULL;

    if (!m) return NULL;
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddItemToObject(o, "preset", cJSON_Duplicate(m->entry, 1));
    over = cJSON_AddArrayToObject(o, "overridden");
    run_request_model_overrides(r, names, sizeof names);
    for (tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
        cJSON_AddItemToArray(over, cJSON_CreateString(tok));
    return o;
}

/* Set member key of obj to item (taken): in its place when obj has it, else at the end. */
static void record_set(cJSON *obj, const char *key, cJSON *item)
{
    if (cJSON_GetObjectItem(obj, key))
        cJSON_ReplaceItemInObject(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

cJSON *run_record_to_json(const run_record *rec)
{
    cJSON *o = cJSON_CreateObject();
    const cJSON *item;
    int final = rec->status == RUN_DONE || rec->status == RUN_FAILED || rec->status == RUN_CANCELLED;

    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "id", (double)rec->id);
    cJSON_AddStringToObject(o, "status", run_status_name(rec->status));
    cJSON_AddStringToObject(o, "created", rec->created);
    if (rec->finished[0])
        cJSON_AddStringToObject(o, "finished", rec->finished);
    else
        cJSON_AddNullToObject(o, "finished");
    cJSON_AddStringToObject(o, "node", store_node()); /* where it ran, and where its tensors lived */
    cJSON_AddStringToObject(o, "backend", rec->request.backend);
    cJSON_AddItemToObject(o, "build", build_info_json()); /* which binary made the numbers */
    cJSON_AddItemToObject(o, "params", run_request_to_json(&rec->request));
    if (rec->request.model[0]) {
        cJSON *model = record_model_json(&rec->request);
        if (model) cJSON_AddItemToObject(o, "model", model);
    }
    if (rec->request.study_id > 0) { /* a study's run: which study, variant and round */
        cJSON *study = cJSON_AddObjectToObject(o, "study");
        cJSON_AddNumberToObject(study, "id", (double)rec->request.study_id);
        cJSON_AddStringToObject(study, "variant", rec->request.study_variant);
        cJSON_AddNumberToObject(study, "round", rec->request.study_round);
    }
    cJSON_AddItemToObject(o, "device", rec->device ? cJSON_Duplicate(rec->device, 1) : cJSON_CreateNull());
    cJSON_ArrayForEach(item, rec->result) {
        if (item->string && item->string[0]) record_set(o, item->string, cJSON_Duplicate(item, 1));
    }
    if (rec->error_code) {
        cJSON *error = cJSON_CreateObject();
        cJSON_AddStringToObject(error, "code", rec->error_code);
        cJSON_AddStringToObject(error, "message", rec->error_message ? rec->error_message : "");
        record_set(o, "error", error);
    }
    if (final && rec->client_gone) record_set(o, "client_gone", cJSON_CreateTrue());
    return o;
}

int run_record_store(run_record *rec, const cJSON *json)
{
    const char *status = run_status_name(rec->status);
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    int rc = -1;

    if (cJSON_IsObject(rec->trace) && rec->status == RUN_DONE) {
        char *trace = cJSON_PrintUnformatted(rec->trace);
        if (!trace || store_put_trace(rec->id, trace) != 0) log_error("run %lld: could not store its trace", rec->id);
        cJSON_free(trace);
    }
    if (text && rec->id <= 0) { /* the store fills in the id of a record that starts {"id":0, */
        long long id = store_insert_run(rec->created, rec->request.backend, rec->request.device, status, rec->median_us,
                                        text);
        if (id > 0) rec->id = id, rc = 0;
    } else if (text) {
        rc = store_update_run(rec->id, status, rec->median_us, text);
    }
    if (rc != 0) log_error("run %lld: could not store its %s record", rec->id, status);
    cJSON_free(text);
    return rc;
}

int run_record_save(run_record *rec)
{
    cJSON *json = run_record_to_json(rec);
    int rc = run_record_store(rec, json);

    cJSON_Delete(json);
    return rc;
}

void run_record_delete(run_record *rec)
{
    if (rec->id > 0) store_delete_run(rec->id);
}
