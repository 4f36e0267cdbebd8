/* test_study_params.c — a study request read: the variants (default the six, backend:impl,
 * each once), rounds and baseline, each variant's run parsed by the run parser (verify on by
 * default, the same seed and shape for all), the runs laid out interleaved (ABC, CBA, ABC),
 * and the refusals, each naming its parameter. */
#include <stdio.h>
#include <string.h>

#include "tests/unit/check.h"
#include "server/front/studies/study.h"

/* Parse a query of "k=v" pairs (NULL-terminated) and an optional JSON body. */
static int parse(study *s, const char *const *pairs, const char *body_text, api_error *e)
{
    cJSON *query = cJSON_CreateObject(), *body = body_text ? cJSON_Parse(body_text) : NULL;
    int rc;

    for (; pairs && *pairs; pairs++) {
        char key[64];
        const char *eq = strchr(*pairs, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - *pairs), *pairs);
        cJSON_AddStringToObject(query, key, eq + 1);
    }
    rc = study_parse(s, query, body, 0, e);
    cJSON_Delete(query);
    cJSON_Delete(body);
    return rc;
}

static void test_default_six_interleaved(void)
{
    const char *q[] = {"seq=512", "seed=9", NULL};
    static study s;
    api_error e;
    char order[200] = "";
    int k;

    CHECK(parse(&s, q, NULL, &e) == 0, "parse: %s", e.message);
    CHECK(s.n_variants == 6 && !strcmp(s.variants[0], "naive") && !strcmp(s.variants[5], "cudnn"), "the six");
    CHECK(s.rounds == 3 && s.baseline == 0 && s.n_runs == 18, "3 rounds, the first the baseline");
    for (k = 0; k < s.n_runs; k++) {
        char one[8];
        snprintf(one, sizeof one, "%d", s.runs[k].variant);
        strcat(order, one);
    }
    CHECK(!strcmp(order, "012345543210012345"), "interleaved: %s", order);
    CHECK(s.runs[6].round == 2 && s.runs[17].round == 3, "rounds numbered from 1");
    for (k = 0; k < 6; k++)
        CHECK(s.requests[k].verify == 1 && s.requests[k].seed == 9 && s.requests[k].problem.seq_q == 512,
              "variant %d: verify on, the same seed and shape", k);
    CHECK(!strcmp(s.requests[4].backend, "flash") && s.requests[4].impl[0] == '\0', "flash with its default impl");
    study_free(&s);
}

static void test_variants_impls_rounds_baseline(void)
{
    const char *q[] = {"variants=flash:tma,flash:w4,cudnn", "rounds=2", "baseline=cudnn", "verify=false", NULL};
    static study s;
    api_error e;

    CHECK(parse(&s, q, NULL, &e) == 0, "parse: %s", e.message);
    CHECK(s.n_variants == 3 && s.baseline == 2 && s.rounds == 2 && s.n_runs == 6, "three variants, two rounds");
    CHECK(!strcmp(s.requests[0].backend, "flash") && !strcmp(s.requests[0].impl, "tma") &&
              !strcmp(s.requests[1].impl, "w4") && !strcmp(s.requests[2].backend, "cudnn"),
          "backend:impl");
    CHECK(s.requests[0].verify == 0, "verify=false is kept");
    CHECK(s.runs[3].variant == 2 && s.runs[5].variant == 0, "round 2 reversed");
    study_free(&s);

    /* a body: an array of variants, rounds as a number; the query wins */
    CHECK(parse(&s, (const char *[]){"rounds=4", NULL}, "{\"variants\": [\"reference\"], \"rounds\": 2, \"seq\": 16}", &e) ==
              0,
          "body: %s", e.message);
    CHECK(s.n_variants == 1 && s.rounds == 4 && s.requests[0].problem.seq_q == 16, "the query's rounds, the body's rest");
    study_free(&s);
}

static void test_refusals(void)
{
    static const struct {
        const char *query[4];
        const char *body;
        const char *code, *field, *words;
    } cases[] = {
        {{"backend=naive", NULL}, NULL, "unknown_parameter", "backend", "variants"},
        {{"impl=tma", NULL}, NULL, "unknown_parameter", "impl", "flash:tma"},
        {{"variants=naive,naive", NULL}, NULL, "bad_value", "variants", "twice"},
        {{"variants=nosuch", NULL}, NULL, "unknown_backend", "variants", "variant nosuch"},
        {{"variants=naive:tma", NULL}, NULL, "bad_value", "variants", "variant naive:tma"},
        {{"variants=flash:nosuch", NULL}, NULL, "bad_value", "variants", "variant flash:nosuch"},
        {{"baseline=math", "variants=naive", NULL}, NULL, "bad_value", "baseline", "not one of"},
        {{"rounds=0", NULL}, NULL, "out_of_range", "rounds", "1..100"},
        {{"rounds=1e2", NULL}, NULL, "bad_value", "rounds", "integer"},
        {{"seq=-1", NULL}, NULL, "out_of_range", "seq", ""},
        {{NULL}, "{\"variants\": \"\"}", "bad_value", "variants", ""},
        {{NULL}, "{\"async\": true}", "unknown_parameter", "async", "202"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static study s;
        api_error e;
        int rc = parse(&s, cases[i].query, cases[i].body, &e);
        CHECK(rc != 0 && !strcmp(e.code, cases[i].code) && !strcmp(e.field, cases[i].field) &&
                  strstr(e.message, cases[i].words),
              "case %zu: %s %s: %s", i, e.code, e.field, e.message);
        study_free(&s);
    }
    {
        static study s;
        api_error e;
        const char *names[] = {"a", "b"};
        run_request r[2];
        run_request_defaults(&r[0]);
        r[1] = r[0];
        CHECK(study_init(&s, names, r, 2, 100, 1, &e) == 0 && s.n_runs == 200 && s.baseline == 1, "study_init");
        study_free(&s);
        CHECK(study_init(&s, names, r, 2, 101, 0, &e) != 0, "study_init refuses 101 rounds");
    }
}

int main(void)
{
    test_default_six_interleaved();
    test_variants_impls_rounds_baseline();
    test_refusals();
    return CHECK_DONE();
}
