/* model_presets.h — the attention presets of well-known models (config/models.json): one
 * layer's heads, K/V heads, head dims, window and scale, each with its source. A run with
 * model=NAME takes them unless it gives a parameter itself (run_request.c). Loaded once, by
 * the front, before it serves; read-only after that.
 */
#ifndef MODEL_PRESETS_H
#define MODEL_PRESETS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define MODEL_NAME_MAX 48

typedef struct model_preset {
    char name[MODEL_NAME_MAX];
    int64_t heads, kv_heads, head_dim, head_dim_v; /* head_dim_v 0: head_dim */
    int64_t window;      /* keys before the query that stay visible (the run parameter); -1: none */
    double scale;        /* 0: 1/sqrt(head_dim) */
    cJSON *entry;        /* the file's entry as written (source, not_modelled, …) */
} model_preset;

/* Read and check the presets of path (a JSON object with "models": [{name, heads, kv_heads,
 * head_dim, [head_dim_v], [window], [scale], source, [not_modelled]}]): names unique, of
 * [a-z0-9._-]; kv_heads divides heads; every number in range; a source for each. Replaces
 * what was loaded. 0, or -1 with err filled (nothing loaded). */
int model_presets_load(const char *path, char *err, size_t err_len);

/* The preset called name; NULL when there is none (or nothing was loaded). */
const model_preset *model_presets_find(const char *name);

/* How many presets are loaded. */
int model_presets_count(void);

/* GET /v1/models: {"models":[…the file's entries…]} (caller deletes). */
cJSON *model_presets_json(void);

/* Free what was loaded. */
void model_presets_free(void);

#endif
