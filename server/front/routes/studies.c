/* studies.c — studies (docs/api.md, Studies) and their comparisons (Compare): POST
 * /v1/studies checks every variant's run as POST /v1/runs would and hands the study to its
 * queue (server/front/studies/); GET /v1/studies[/{id}] reads it, live or stored; DELETE
 * cancels it; GET /v1/compare compares runs or studies.
 */
#include "server/front/routes/routes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/parse_int.h"
#include "common/variant_info.h"
#include "server/front/pool/pool.h"
#include "server/front/pool/run_device.h"
#include "server/front/store/store.h"
#include "server/front/studies/compare.h"
#include "server/front/studies/study.h"
#include "server/front/tensors/tensors.h"

#define STUDY_MAX_WAIT_S 600
#define STUDY_LIST_DEFAULT_LIMIT 20

/* A refusal about variant i: its message says which variant. */
static void study_name_variant(api_error *e, const char *variant)
{
    char message[sizeof e->message];

    snprintf(message, sizeof message, "variant %.47s: %.450s", variant, e->message);
    snprintf(e->message, sizeof e->message, "%s", message);
}

/* Check variant i's run as POST /v1/runs checks a run, up to its queue: resident tensors,
 * the problem, the device, the cost on the cpu. 0, or -1 with e. */
static int study_check_variant(http_request *req, study *s, int i, api_error *e)
{
    run_request *r = &s->requests[i];
    const variant_info *v = variant_info_find(r->backend);
    cJSON *refusal = NULL;
    int status;

    if (!v) return api_fail(e, 500, "internal", "variants", "backend %s vanished from the variants table", r->backend);
    if (tensors_apply_run(r, e) != 0 || run_request_check(r, 0, e) != 0 || run_device_resolve(r, v, e) != 0) return -1;
    r->verify_cpu_max_macs = req->settings->verify_cpu_max_macs;
    status = pool_run_admissible(r, &refusal);
    if (status) {
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(refusal, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
        const cJSON *field = cJSON_GetObjectItemCaseSensitive(error, "field");
        api_fail(e, status, cJSON_IsString(code) ? code->valuestring : "refused",
                 cJSON_IsString(field) ? field->valuestring : "", "%s",
                 cJSON_IsString(message) ? message->valuestring : "");
        cJSON_Delete(refusal);
        return -1;
    }
    return 0;
}

void route_study_create(http_request *req)
{
    study *s = calloc(1, sizeof *s);
    cJSON *body = NULL, *response = NULL;
    api_error e;
    int i, status;

    if (!s) {
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    if (req->body && req->body_len && !(body = run_request_body_json(req->body, req->body_len, &e))) goto refuse;
    if (study_parse(s, req->query, body, req->settings->enable_fault_injection, &e) != 0) goto refuse;
    cJSON_Delete(body);
    body = NULL;
    for (i = 0; i < s->n_variants; i++)
        if (study_check_variant(req, s, i, &e) != 0) {
            study_name_variant(&e, s->variants[i]);
            goto refuse;
        }
    s->memory_budget_bytes = req->settings->memory_budget_bytes;

    status = studies_submit(s, &response); /* takes s */
    if (status == 202) {
        char location[64];
        snprintf(location, sizeof location, "/v1/studies/%.0f",
                 cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(response, "id")));
        if (http_add_header(req, "Location", location) != 0) log_warn("cannot add Location");
    } else if (status == 429 && http_add_header(req, "Retry-After", "5") != 0) {
        log_warn("cannot add Retry-After");
    }
    http_send_json(req, status, response);
    cJSON_Delete(response);
    return;
refuse:
    cJSON_Delete(body);
    study_free(s);
    free(s);
    http_send_error(req, &e);
}

/* The query's parameters are only these (NULL-terminated): 0, or -1 after answering 400. */
static int study_only_params(http_request *req, const char *const *allowed)
{
    const cJSON *item;

    cJSON_ArrayForEach(item, req->query) {
        size_t i;
        for (i = 0; allowed[i] && strcmp(allowed[i], item->string); i++) continue;
        if (!allowed[i]) {
            http_fail(req, 400, "unknown_parameter", item->string, "unknown parameter '%.40s'", item->string);
            return -1;
        }
    }
    return 0;
}

void route_study_get(http_request *req)
{
    static const char *const allowed[] = {"wait", NULL};
    const cJSON *wait = cJSON_GetObjectItemCaseSensitive(req->query, "wait");
    long long id, seconds = 0;
    cJSON *live;
    char *record;

    if ((id = http_id_segment(req, "a study id")) < 0 || study_only_params(req, allowed) != 0) return;
    if (wait && parse_int_in(wait->valuestring, 0, STUDY_MAX_WAIT_S, &seconds) != 0) {
        http_fail(req, 400, "bad_value", "wait", "wait is seconds, an integer from 0 to %d", STUDY_MAX_WAIT_S);
        return;
    }
    if (seconds > 0) studies_wait(id, (int)seconds);
    live = studies_live_json(id);
    if (live) {
        http_send_json(req, 200, live);
        cJSON_Delete(live);
        return;
    }
    record = store_get_study(id);
    if (!record) {
        if (!store_available())
            routes_store_read_failed(req, "the studies");
        else
            http_fail(req, 404, "not_found", "id", "there is no study %lld", id);
        return;
    }
    http_send_json_text(req, 200, record, strlen(record));
    free(record);
}

void route_study_list(http_request *req)
{
    static const char *const allowed[] = {"limit", "before", "tag", "status", NULL};
    static const char *const statuses[] = {"queued", "running", "done", "failed", "cancelled"};
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(req->query, "limit");
    const cJSON *before = cJSON_GetObjectItemCaseSensitive(req->query, "before");
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(req->query, "tag");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(req->query, "status");
    store_study_query q = {.limit = STUDY_LIST_DEFAULT_LIMIT};
    long long n, last;
    int rows = 0;
    char *page, *out;
    size_t len, i;

    if (study_only_params(req, allowed) != 0) return;
    if (limit) {
        if (parse_int_in(limit->valuestring, 1, STORE_STUDY_MAX_LIMIT, &n) != 0) {
            http_fail(req, 400, "bad_value", "limit", "limit is an integer from 1 to %d", STORE_STUDY_MAX_LIMIT);
            return;
        }
        q.limit = (int)n;
    }
    if (before && parse_int_in(before->valuestring, 1, LLONG_MAX, &q.before) != 0) {
        http_fail(req, 400, "bad_value", "before", "before is a cursor: a next_before of an earlier page");
        return;
    }
    if (tag) {
        if (!run_request_tag_valid(tag->valuestring, strlen(tag->valuestring))) {
            http_fail(req, 400, "bad_value", "tag", "a tag is 1 to %d of A-Z a-z 0-9 . _ : -", RUN_TAG_MAX_LEN);
            return;
        }
        q.tag = tag->valuestring;
    }
    if (status) {
        for (i = 0; i < sizeof statuses / sizeof statuses[0] && strcmp(statuses[i], status->valuestring); i++) continue;
        if (i == sizeof statuses / sizeof statuses[0]) {
            http_fail(req, 400, "bad_value", "status", "status is queued, running, done, failed or cancelled");
            return;
        }
        q.status = status->valuestring;
    }
    page = store_list_studies(&q, &last, &rows);
    if (!page) {
        routes_store_read_failed(req, "the studies");
        return;
    }
    len = strlen(page) + 64;
    out = malloc(len);
    if (!out) {
        free(page);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    /* A full page may have more behind it: its last cursor; a short one reached the oldest. */
    if (rows >= q.limit)
        snprintf(out, len, "{\"studies\":%s,\"next_before\":%lld}", page, last);
    else
        snprintf(out, len, "{\"studies\":%s,\"next_before\":null}", page);
    free(page);
    http_send_json_text(req, 200, out, strlen(out));
    free(out);
}

void route_study_cancel(http_request *req)
{
    cJSON *record = NULL;
    long long id;
    char *stored;

    if ((id = http_id_segment(req, "a study id")) < 0) return;
    if (studies_cancel(id, &record) == 0) {
        if (record) {
            http_send_json(req, 200, record);
            cJSON_Delete(record);
        } else {
            http_fail(req, 500, "internal", "", "study %lld was cancelled but its record cannot be read", id);
        }
        return;
    }
    stored = store_get_study(id);
    if (!stored) {
        http_fail(req, 404, "not_found", "id", "there is no study %lld", id);
        return;
    }
    free(stored);
    http_fail(req, 409, "not_active", "id", "study %lld has ended: only a queued or running study can be cancelled", id);
}

void route_compare(http_request *req)
{
    api_error e;
    cJSON *answer = compare_answer(req->query, &e);

    if (!answer) {
        if (e.status == 503 && http_add_header(req, "Retry-After", "5") != 0) log_warn("cannot add Retry-After");
        http_send_error(req, &e);
        return;
    }
    http_send_json(req, 200, answer);
    cJSON_Delete(answer);
}
