/* study_params.c — a study request read (study.h's study_parse): its own keys, then every
 * variant's run parsed by the run parser itself, so a study takes exactly the run parameters
 * POST /v1/runs takes, spelled and checked the same way (docs/api.md, Studies).
 */
#include "server/front/studies/study.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_text.h"
#include "common/parse_int.h"
#include "common/variant_info.h"

/* Run parameters a study sets itself, or that belong to one run's session. */
static const struct {
    const char *name, *why;
} study_refused[] = {
    {"backend", "a study runs its variants: name them in variants (variants=naive,flash)"},
    {"impl", "a study names an implementation in its variant: variants=flash:tma,flash:wgmma"},
    {"async", "a study is always answered at once (202); follow it with GET /v1/studies/ID"},
    {"keep_output", "a study keeps no output (its variants' fingerprints say whether they agree)"},
    {"output_tensor", "a study keeps no output"},
};

const char *study_status_name(study_status s)
{
    static const char *const names[] = {"queued", "running", "done", "failed", "cancelled"};
    return s >= STUDY_QUEUED && s <= STUDY_CANCELLED ? names[s] : "unknown";
}

/* The value of key: the query's (a string), else the body's; NULL when neither has it (a
 * JSON null counts as not given). */
static const cJSON *study_value(const cJSON *query, const cJSON *body, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(query, key);
    if (v) return v;
    v = cJSON_GetObjectItemCaseSensitive(body, key);
    return cJSON_IsNull(v) ? NULL : v;
}

/* Add one variant name (`len` bytes at name) to s. 0, or -1 with e. */
static int study_add_variant(study *s, const char *name, size_t len, api_error *e)
{
    int i;

    if (len == 0 || len >= STUDY_NAME_MAX)
        return api_fail(e, 400, "bad_value", "variants", "a variant is a backend or backend:impl of 1 to %d characters",
                        STUDY_NAME_MAX - 1);
    if (s->n_variants == STUDY_MAX_VARIANTS)
        return api_fail(e, 400, "out_of_range", "variants", "a study has at most %d variants", STUDY_MAX_VARIANTS);
    for (i = 0; i < s->n_variants; i++)
        if (strlen(s->variants[i]) == len && !memcmp(s->variants[i], name, len))
            return api_fail(e, 400, "bad_value", "variants", "variant %.*s is named twice", (int)len, name);
    memcpy(s->variants[s->n_variants], name, len);
    s->variants[s->n_variants][len] = '\0';
    s->n_variants++;
    return 0;
}

/* variants: "a,b" (the query, or a string in a body) or an array of strings. 0, or -1. */
static int study_read_variants(study *s, const cJSON *v, api_error *e)
{
    const char *text = STUDY_DEFAULT_VARIANTS, *p;
    const cJSON *item;

    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) == 0) return api_fail(e, 400, "bad_value", "variants", "variants is empty");
        cJSON_ArrayForEach(item, v) {
            if (!cJSON_IsString(item))
                return api_fail(e, 400, "bad_value", "variants", "variants must be an array of names");
            if (study_add_variant(s, item->valuestring, strlen(item->valuestring), e) != 0) return -1;
        }
        return 0;
    }
    if (v && !cJSON_IsString(v))
        return api_fail(e, 400, "bad_value", "variants", "variants must be names: variants=a,b or [\"a\", \"b\"]");
    if (v) text = v->valuestring;
    for (p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (study_add_variant(s, p, len, e) != 0) return -1;
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

/* rounds: an integer as a run parameter spells one. 0, or -1. */
static int study_read_rounds(study *s, const cJSON *v, api_error *e)
{
    const char *text;
    long long n;

    s->rounds = STUDY_DEFAULT_ROUNDS;
    if (!v) return 0;
    text = cJSON_IsString(v) ? v->valuestring : cJSON_IsNumber(v) ? v->valuestring : NULL;
    if (!text || !json_text_is_integer(text, strlen(text)) || parse_int(text, &n) != 0)
        return api_fail(e, 400, "bad_value", "rounds", "rounds must be an integer");
    if (n < 1 || n > STUDY_MAX_ROUNDS)
        return api_fail(e, 400, "out_of_range", "rounds", "rounds %lld is out of range (1..%d)", n, STUDY_MAX_ROUNDS);
    s->rounds = (int)n;
    return 0;
}

/* A copy of obj (an object, or NULL: an empty one) without the study's own keys. */
static cJSON *study_run_params(const cJSON *obj)
{
    cJSON *copy = obj ? cJSON_Duplicate(obj, 1) : cJSON_CreateObject();

    if (!copy) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "variants");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "rounds");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "baseline");
    return copy;
}

/* Parse variant i's run: the shared parameters with its backend and impl. A refusal about
 * the backend or impl names the variant and the parameter `variants`. 0, or -1 with e. */
static int study_parse_variant(study *s, int i, cJSON *query, const cJSON *body, int allow_faults, api_error *e)
{
    char backend[STUDY_NAME_MAX];
    const char *colon;

    snprintf(backend, sizeof backend, "%s", s->variants[i]);
    colon = strchr(s->variants[i], ':');
    if (colon) backend[colon - s->variants[i]] = '\0';
    cJSON_DeleteItemFromObjectCaseSensitive(query, "backend");
    cJSON_DeleteItemFromObjectCaseSensitive(query, "impl");
    cJSON_AddStringToObject(query, "backend", backend);
    if (colon) cJSON_AddStringToObject(query, "impl", colon + 1);
    if (run_request_parse(&s->requests[i], query, body, allow_faults, e) == 0) return 0;
    if (!strcmp(e->field, "backend") || !strcmp(e->field, "impl")) {
        char message[sizeof e->message];
        snprintf(message, sizeof message, "variant %.47s: %.450s", s->variants[i], e->message);
        snprintf(e->message, sizeof e->message, "%s", message);
        snprintf(e->field, sizeof e->field, "variants");
    }
    return -1;
}

/* Lay the runs out in their order: round 1 the variants in order, round 2 in reverse, … */
static int study_lay_out_runs(study *s, api_error *e)
{
    int r, i, k = 0;

    s->n_runs = s->n_variants * s->rounds;
    if (s->n_runs > STUDY_MAX_RUNS)
        return api_fail(e, 400, "out_of_range", "rounds", "%d variants x %d rounds is %d runs; a study has at most %d",
                        s->n_variants, s->rounds, s->n_runs, STUDY_MAX_RUNS);
    s->runs = calloc((size_t)s->n_runs, sizeof *s->runs);
    if (!s->runs) return api_fail(e, 500, "internal", "", "out of memory");
    for (r = 0; r < s->rounds; r++)
        for (i = 0; i < s->n_variants; i++, k++) {
            s->runs[k].variant = r % 2 == 0 ? i : s->n_variants - 1 - i;
            s->runs[k].round = r + 1;
            s->runs[k].status = RUN_QUEUED;
        }
    return 0;
}

int study_parse(study *s, const cJSON *query, const cJSON *body, int allow_faults, api_error *e)
{
    const cJSON *baseline;
    cJSON *run_query = NULL, *run_body = NULL;
    size_t k;
    int i, rc = -1;

    memset(s, 0, sizeof *s);
    for (k = 0; k < sizeof study_refused / sizeof study_refused[0]; k++)
        if (study_value(query, body, study_refused[k].name))
            return api_fail(e, 400, "unknown_parameter", study_refused[k].name, "%s is not a study parameter: %s",
                            study_refused[k].name, study_refused[k].why);
    if (study_read_variants(s, study_value(query, body, "variants"), e) != 0 ||
        study_read_rounds(s, study_value(query, body, "rounds"), e) != 0)
        return -1;
    baseline = study_value(query, body, "baseline");
    if (baseline) {
        if (!cJSON_IsString(baseline)) return api_fail(e, 400, "bad_value", "baseline", "baseline must be a variant's name");
        for (s->baseline = 0; s->baseline < s->n_variants; s->baseline++)
            if (!strcmp(s->variants[s->baseline], baseline->valuestring)) break;
        if (s->baseline == s->n_variants)
            return api_fail(e, 400, "bad_value", "baseline", "baseline %.40s is not one of the study's variants",
                            baseline->valuestring);
    }

    run_query = study_run_params(query);
    run_body = study_run_params(body);
    if (!run_query || !run_body) {
        api_fail(e, 500, "internal", "", "out of memory");
        goto out;
    }
    /* A study says how each output agrees with the reference unless told not to. */
    if (!study_value(query, body, "verify")) cJSON_AddTrueToObject(run_body, "verify");
    for (i = 0; i < s->n_variants; i++)
        if (study_parse_variant(s, i, run_query, run_body, allow_faults, e) != 0) goto out;
    rc = study_lay_out_runs(s, e);
out:
    cJSON_Delete(run_query);
    cJSON_Delete(run_body);
    return rc;
}

int study_init(study *s, const char *const *names, const run_request *requests, int n, int rounds, int baseline,
               api_error *e)
{
    int i;

    memset(s, 0, sizeof *s);
    if (n < 1 || n > STUDY_MAX_VARIANTS || rounds < 1 || rounds > STUDY_MAX_ROUNDS || baseline < 0 || baseline >= n)
        return api_fail(e, 400, "out_of_range", "variants", "a study has 1 to %d variants and 1 to %d rounds",
                        STUDY_MAX_VARIANTS, STUDY_MAX_ROUNDS);
    for (i = 0; i < n; i++) {
        if (study_add_variant(s, names[i], strlen(names[i]), e) != 0) return -1;
        s->requests[i] = requests[i];
    }
    s->rounds = rounds;
    s->baseline = baseline;
    return study_lay_out_runs(s, e);
}

void study_free(study *s)
{
    int k;

    if (!s->runs) return;
    for (k = 0; k < s->n_runs; k++) cJSON_Delete(s->runs[k].top_kernels);
    free(s->runs);
    s->runs = NULL;
}
