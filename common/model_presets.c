/* model_presets.c — load and look up the model presets (model_presets.h). */
#include "common/model_presets.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_MAX_PRESETS 256
#define MODEL_MAX_FILE_BYTES (1 << 20)

static model_preset *presets;
static int npresets;
static cJSON *presets_doc; /* the whole file, owning every entry */

/* A whole file as a NUL-terminated buffer (caller frees); NULL with err filled. */
static char *read_file(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n;

    if (!f) {
        snprintf(err, err_len, "cannot open %s", path);
        return NULL;
    }
    buf = malloc(MODEL_MAX_FILE_BYTES + 1);
    n = buf ? fread(buf, 1, MODEL_MAX_FILE_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || n > MODEL_MAX_FILE_BYTES) {
        snprintf(err, err_len, "%s: %s", path, buf ? "larger than 1 MiB" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* A required member (no default) of a preset. */
#define MODEL_REQUIRED INT64_MIN

/* Member key of o as an integer in [min, max], or dflt when absent (MODEL_REQUIRED: absent is
 * an error). 0, or -1 with err. */
static int member_int(const cJSON *o, const char *key, int64_t min, int64_t max, int64_t dflt, int64_t *out,
                      const char *name, char *err, size_t err_len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    *out = dflt;
    if (!v && dflt == MODEL_REQUIRED) {
        snprintf(err, err_len, "model %s: '%s' is missing", name, key);
        return -1;
    }
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)min ||
        v->valuedouble > (double)max) {
        snprintf(err, err_len, "model %s: '%s' must be an integer in %lld..%lld", name, key, (long long)min,
                 (long long)max);
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < MODEL_NAME_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* One entry into p. 0, or -1 with err. */
static int preset_parse(cJSON *e, model_preset *p, char *err, size_t err_len)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(e, "source");
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(e, "scale");
    const char *n = cJSON_IsString(name) ? name->valuestring : "";

    memset(p, 0, sizeof *p);
    if (!cJSON_IsObject(e) || !name_ok(n)) {
        snprintf(err, err_len, "a model's 'name' must be 1..%d characters of a-z, 0-9, '.', '_', '-' (got '%.60s')",
                 MODEL_NAME_MAX - 1, n);
        return -1;
    }
    snprintf(p->name, sizeof p->name, "%s", n);
    if (member_int(e, "heads", 1, 4096, MODEL_REQUIRED, &p->heads, n, err, err_len) != 0 ||
        member_int(e, "kv_heads", 1, 4096, MODEL_REQUIRED, &p->kv_heads, n, err, err_len) != 0 ||
        member_int(e, "head_dim", 1, 1024, MODEL_REQUIRED, &p->head_dim, n, err, err_len) != 0 ||
        member_int(e, "head_dim_v", 1, 1024, 0, &p->head_dim_v, n, err, err_len) != 0 ||
        member_int(e, "window", 0, 1LL << 31, -1, &p->window, n, err, err_len) != 0)
        return -1;
    if (p->heads % p->kv_heads != 0) {
        snprintf(err, err_len, "model %s: kv_heads %lld does not divide heads %lld", n, (long long)p->kv_heads,
                 (long long)p->heads);
        return -1;
    }
    if (scale && (!cJSON_IsNumber(scale) || !(scale->valuedouble > 0) || !isfinite(scale->valuedouble))) {
        snprintf(err, err_len, "model %s: 'scale' must be a positive number", n);
        return -1;
    }
    p->scale = scale ? scale->valuedouble : 0.0;
    if (!cJSON_IsString(source) || !source->valuestring[0]) {
        snprintf(err, err_len, "model %s: every preset says where its numbers come from ('source')", n);
        return -1;
    }
    p->entry = e;
    return 0;
}

int model_presets_load(const char *path, char *err, size_t err_len)
{
    char *text = read_file(path, err, err_len);
    cJSON *doc, *list, *e;
    model_preset *all;
    int n = 0, i;

    if (!text) return -1;
    doc = cJSON_Parse(text);
    free(text);
    list = cJSON_GetObjectItemCaseSensitive(doc, "models");
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > MODEL_MAX_PRESETS) {
        snprintf(err, err_len, "%s: not a JSON object with a \"models\" array of at most %d presets", path,
                 MODEL_MAX_PRESETS);
        cJSON_Delete(doc);
        return -1;
    }
    all = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *all);
    if (!all) {
        snprintf(err, err_len, "%s: out of memory", path);
        cJSON_Delete(doc);
        return -1;
    }
    cJSON_ArrayForEach(e, list) {
        char why[256];
        if (preset_parse(e, &all[n], why, sizeof why) != 0) {
            snprintf(err, err_len, "%s: %.255s", path, why);
            goto fail;
        }
        for (i = 0; i < n; i++)
            if (!strcmp(all[i].name, all[n].name)) {
                snprintf(err, err_len, "%s: model %s is listed twice", path, all[n].name);
                goto fail;
            }
        n++;
    }
    model_presets_free();
    presets = all, npresets = n, presets_doc = doc;
    return 0;
fail:
    free(all);
    cJSON_Delete(doc);
    return -1;
}

const model_preset *model_presets_find(const char *name)
{
    int i;
    for (i = 0; name && i < npresets; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

int model_presets_count(void) { return npresets; }

cJSON *model_presets_json(void)
{
    cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "models");
    int i;
    for (i = 0; list && i < npresets; i++) cJSON_AddItemToArray(list, cJSON_Duplicate(presets[i].entry, 1));
    return o;
}

void model_presets_free(void)
{
    free(presets);
    cJSON_Delete(presets_doc);
    presets = NULL, presets_doc = NULL, npresets = 0;
}
