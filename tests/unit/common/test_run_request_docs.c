/* test_run_request_docs.c — docs/api.md and docs/openapi.json say what the run-parameter
 * table (common/run_request.c) says.
 *
 *   test_run_request_docs           check, from the repository root (make test-unit runs it there)
 *   test_run_request_docs --write   rewrite docs/api.md's table between its run-params markers
 *
 * docs/api.md holds run_request_params_markdown's output. docs/openapi.json's query
 * parameters of POST /v1/runs and POST /run, and its RunParams schema, name every parameter
 * with the table's type, bounds, words and defaults. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/run_request.h"
#include "common/variant_info.h"
#include "tests/unit/check.h"

#define API_MD "docs/api.md"
#define OPENAPI "docs/openapi.json"
#define BEGIN "<!-- run-params:begin"
#define END "<!-- run-params:end -->"

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n;

    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc(n + 1))) {
        if (fread(text, 1, (size_t)n, f) != (size_t)n) {
            free(text);
            text = NULL;
        } else {
            text[n] = '\0';
        }
    }
    fclose(f);
    return text;
}

/* ---------------------------------------------------------------- docs/api.md ----------- */

static void test_api_md(int write)
{
    char *doc = read_text(API_MD), *table = NULL, *begin, *end;
    size_t table_len = 0;
    FILE *mem = open_memstream(&table, &table_len);

    CHECK(doc != NULL, "cannot read %s (run from the repository root)", API_MD);
    CHECK(mem != NULL, "open_memstream");
    if (!doc || !mem) return;
    run_request_params_markdown(mem);
    fclose(mem);
    begin = strstr(doc, BEGIN);
    end = begin ? strstr(begin, END) : NULL;
    CHECK(begin && end, "%s has no %s ... %s markers", API_MD, BEGIN, END);
    if (begin && end) {
        begin = strchr(begin, '\n') + 1; /* the table starts on the line after the marker */
        if (write) {
            FILE *f = fopen(API_MD, "wb");
            CHECK(f && fwrite(doc, 1, (size_t)(begin - doc), f) == (size_t)(begin - doc) &&
                      fputs(table, f) >= 0 && fputs(end, f) >= 0 && fclose(f) == 0,
                  "cannot write %s", API_MD);
            printf("%s: run-parameter table written\n", API_MD);
        } else if ((size_t)(end - begin) != table_len || memcmp(begin, table, table_len) != 0) {
            size_t i = 0, line = 1;
            while (i < table_len && begin + i < end && begin[i] == table[i]) line += table[i++] == '\n';
            CHECK(0, "%s's run-parameter table differs from common/run_request.c's, from its line %zu on; "
                  "rewrite it with: %s --write", API_MD, line, "build/tests/unit/common/test_run_request_docs");
        }
    }
    free(table);
    free(doc);
}

/* ---------------------------------------------------------------- docs/openapi.json ----- */

/* The string s holds under key; "" when none. */
static const char *text_of(const cJSON *s, const char *key)
{
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, key));
    return t ? t : "";
}

/* The member of s's oneOf whose type is `type`, or s itself when it has that type. */
static const cJSON *branch(const cJSON *s, const char *type)
{
    const cJSON *b;
    if (!strcmp(text_of(s, "type"), type)) return s;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
        if (!strcmp(text_of(b, "type"), type)) return b;
    return NULL;
}

static double number_of(const cJSON *s, const char *key, double missing)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    return cJSON_IsNumber(x) ? x->valuedouble : missing;
}

/* The words of an enum, "a|b|c" ("" when there is none). */
static void enum_words(const cJSON *s, char *out, size_t len)
{
    const cJSON *w;
    size_t n = 0;
    out[0] = '\0';
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(s, "enum"))
        n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", n ? "|" : "",
                              cJSON_IsString(w) ? w->valuestring : cJSON_IsTrue(w) ? "true" : "false");
}

static int compare_words(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* words ("a|b|c") sorted, duplicates dropped, in place. */
static void sort_words(char *words)
{
    char copy[600], *w[64], *save = NULL, *t;
    size_t n = 0, i, len = 0;

    snprintf(copy, sizeof copy, "%s", words);
    for (t = strtok_r(copy, "|", &save); t && n < 64; t = strtok_r(NULL, "|", &save)) w[n++] = t;
    qsort(w, n, sizeof w[0], compare_words);
    words[0] = '\0';
    for (i = 0; i < n; i++)
        if (!i || strcmp(w[i], w[i - 1])) len += (size_t)sprintf(words + len, "%s%s", len ? "|" : "", w[i]);
}

/* Every implementation name of the variants table ("a|b|c", sorted). */
static void impl_words(char *out, size_t len)
{
    size_t i, k, n = 0;
    out[0] = '\0';
    for (i = 0; i < variant_infos_count; i++)
        for (k = 0; k < variant_infos[i]->impl_count; k++)
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", n ? "|" : "",
                                  variant_infos[i]->impls[k].name);
    sort_words(out);
}

/* Whether the default s states is p's (def read as p's type). */
static int default_agrees(const run_param *p, const cJSON *d)
{
    switch (p->type) {
    case RUN_PARAM_INT:
    case RUN_PARAM_SEED:
    case RUN_PARAM_NUMBER:
        return cJSON_IsNumber(d) && d->valuedouble == strtod(p->def, NULL);
    case RUN_PARAM_BOOL:
        return cJSON_IsBool(d) ? cJSON_IsTrue(d) == !strcmp(p->def, "true")
                               : cJSON_IsString(d) && !strcmp(d->valuestring, p->def);
    default:
        return cJSON_IsString(d) && !strcmp(d->valuestring, p->def);
    }
}

/* Schema s of parameter p agrees with its row. in_query: a query parameter's schema (every
 * value a string there: booleans are the words true and false). */
static void check_schema(const run_param *p, const cJSON *s, int in_query, const char *where)
{
    const cJSON *t, *d = cJSON_GetObjectItemCaseSensitive(s, "default");
    char words[400], want[400];
    int literal = p->def && !p->def_doc, is_open;

    switch (p->type) {
    case RUN_PARAM_INT:
        t = branch(s, "integer");
        CHECK(t && number_of(t, "minimum", -1) == p->min && number_of(t, "maximum", -1) == p->max,
              "%s %s: want an integer %.17g..%.17g", where, p->name, p->min, p->max);
        if (p->max >= 1e15) /* "params" writes it as a decimal string from 10^15 on */
            CHECK(branch(s, "string") != NULL, "%s %s: want a string branch too", where, p->name);
        break;
    case RUN_PARAM_SEED:
        t = branch(s, "integer");
        CHECK(t && number_of(t, "minimum", -1) == 0 && branch(s, "string"), "%s %s: want an integer from 0 or a string",
              where, p->name);
        break;
    case RUN_PARAM_NUMBER:
        CHECK(branch(s, "number") == s, "%s %s: want a number", where, p->name);
        CHECK(number_of(s, "minimum", -1) == p->min && number_of(s, "maximum", -1) == p->max,
              "%s %s: want minimum %g, maximum %g", where, p->name, p->min, p->max);
        is_open = (p->flags & RUN_PARAM_OPEN) != 0;
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) == is_open &&
                  cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) == is_open,
              "%s %s: exclusive bounds exactly when the row's are open", where, p->name);
        break;
    case RUN_PARAM_BOOL:
        if (in_query) {
            enum_words(s, words, sizeof words);
            CHECK(branch(s, "string") == s && !strcmp(words, "true|false"), "%s %s: want the words true|false", where,
                  p->name);
        } else {
            CHECK(branch(s, "boolean") == s, "%s %s: want a boolean", where, p->name);
        }
        break;
    case RUN_PARAM_LENGTHS: /* text in the query; in a body that, an array or a distribution object */
        t = branch(s, "array");
        if (in_query)
            CHECK(branch(s, "string") == s, "%s %s: want a string", where, p->name);
        else
            CHECK(t && branch(s, "object") && branch(s, "string") && number_of(t, "maxItems", -1) == RUN_MAX_SEQS,
                  "%s %s: want an array of at most %d lengths, a distribution object or a string", where, p->name,
                  RUN_MAX_SEQS);
        break;
    case RUN_PARAM_TAGS: /* "a,b" in the query; in a body that or an array of strings */
        t = branch(s, "array");
        if (in_query)
            CHECK(branch(s, "string") == s, "%s %s: want a string", where, p->name);
        else
            CHECK(t && branch(s, "string") && number_of(t, "maxItems", -1) == RUN_MAX_TAGS,
                  "%s %s: want an array of at most %d strings, or a string", where, p->name, RUN_MAX_TAGS);
        break;
    case RUN_PARAM_ENUM:
    case RUN_PARAM_STRING:
    case RUN_PARAM_TENSOR:
        CHECK(branch(s, "string") == s, "%s %s: want a string", where, p->name);
        enum_words(s, words, sizeof words);
        if (!strcmp(p->name, "impl")) { /* its words are the variants table's */
            impl_words(want, sizeof want);
            sort_words(words);
        } else
            snprintf(want, sizeof want, "%s", p->values ? p->values : "");
        CHECK(!strcmp(words, want), "%s %s: enum '%s', want '%s'", where, p->name, words, want);
        break;
    }
    if (d)
        CHECK(literal && default_agrees(p, d), "%s %s: its default is not the table's (%s)", where, p->name,
              literal ? p->def : "none");
    else if (!in_query)
        CHECK(!literal, "%s %s: no default; the table's is %s", where, p->name, p->def);
}

/* The query parameters of one operation: every row but the fault-only ones, and no other. */
static void check_query(const cJSON *op, const char *where)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(op, "parameters"), *q;
    size_t i, n = 0;

    CHECK(cJSON_IsArray(list), "%s has no parameters", where);
    cJSON_ArrayForEach(q, list) {
        const char *name = text_of(q, "name");
        const run_param *p = NULL;
        for (i = 0; i < run_request_params_count; i++)
            if (!strcmp(run_request_params[i].name, name)) p = &run_request_params[i];
        CHECK(p && !(p->flags & RUN_PARAM_FAULT_ONLY), "%s: query parameter %s is not in the table", where, name);
        if (!p) continue;
        CHECK(!strcmp(text_of(q, "in"), "query"), "%s %s: in query", where, name);
        check_schema(p, cJSON_GetObjectItemCaseSensitive(q, "schema"), 1, where);
        n++;
    }
    for (i = 0; i < run_request_params_count; i++) n += (run_request_params[i].flags & RUN_PARAM_FAULT_ONLY) != 0;
    CHECK(n == run_request_params_count, "%s: %zu of the table's %zu parameters", where, n, run_request_params_count);
}

static void test_openapi(void)
{
    char *text = read_text(OPENAPI);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(doc, "paths"), *props, *s;
    size_t i;

    CHECK(doc != NULL, "cannot read %s as JSON (run from the repository root)", OPENAPI);
    if (!doc) {
        free(text);
        return;
    }
    check_query(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(paths, "/v1/runs"), "post"),
                "POST /v1/runs");
    check_query(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(paths, "/run"), "post"), "POST /run");

    props = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "components"), "schemas"),
            "RunParams"),
        "properties");
    CHECK(cJSON_GetArraySize(props) == (int)run_request_params_count, "RunParams has %d properties, the table %zu",
          cJSON_GetArraySize(props), run_request_params_count);
    for (i = 0; i < run_request_params_count; i++) {
        const run_param *p = &run_request_params[i];
        s = cJSON_GetObjectItemCaseSensitive(props, p->name);
        CHECK(s != NULL, "RunParams lacks %s", p->name);
        if (s) check_schema(p, s, 0, "RunParams");
    }
    cJSON_Delete(doc);
    free(text);
}

/* ---------------------------------------------------------------- the table itself ------ */

/* An ENUM row's words are the index order of the field's enum (attn.h). */
static void test_words_follow_attn(void)
{
    size_t i;
    int k;

    for (i = 0; i < run_request_params_count; i++) {
        const run_param *p = &run_request_params[i];
        char want[200] = "";
        size_t n = 0;
        if (!strcmp(p->name, "dtype"))
            for (k = 0; k < ATTN_DTYPE_COUNT; k++)
                n += (size_t)snprintf(want + n, sizeof want - n, "%s%s", k ? "|" : "", attn_dtype_name((attn_dtype)k));
        else if (!strcmp(p->name, "mask"))
            for (k = 0; k < ATTN_MASK_COUNT; k++)
                n += (size_t)snprintf(want + n, sizeof want - n, "%s%s", k ? "|" : "", attn_mask_name((attn_mask)k));
        else
            continue;
        CHECK(p->type == RUN_PARAM_ENUM && !strcmp(p->values, want), "%s's words '%s', attn.h's '%s'", p->name,
              p->values, want);
    }
}

int main(int argc, char **argv)
{
    int write = argc > 1 && !strcmp(argv[1], "--write");

    test_api_md(write);
    if (!write) {
        test_openapi();
        test_words_follow_attn();
    }
    return CHECK_DONE();
}
