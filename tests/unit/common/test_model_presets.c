/* test_model_presets.c — config/models.json loads and says what the models are; a
 * bad file is refused with a reason and leaves what was loaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model_presets.h"
#include "tests/unit/check.h"

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void test_the_shipped_file(void)
{
    char err[512] = "";
    const model_preset *p;
    static const char *const wanted[] = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b-v0.1",
                                         "qwen2.5-7b", "qwen2.5-72b", "gemma-2-9b", "gemma-2-27b",
                                         "deepseek-v3-prefill"};
    size_t i;

    CHECK(model_presets_load("config/models.json", err, sizeof err) == 0, "config/models.json: %s", err);
    for (i = 0; i < sizeof wanted / sizeof wanted[0]; i++) CHECK(model_presets_find(wanted[i]) != NULL, "%s", wanted[i]);
    p = model_presets_find("llama-3.1-70b");
    CHECK(p && p->heads == 64 && p->kv_heads == 8 && p->head_dim == 128 && p->window == -1 && p->scale == 0,
          "llama 70b");
    p = model_presets_find("mistral-7b-v0.1");
    CHECK(p && p->window == 4095, "mistral's window: 4096 keys with the query itself");
    p = model_presets_find("deepseek-v3-prefill");
    CHECK(p && p->head_dim == 192 && p->head_dim_v == 128 && fabs(p->scale - 0.13523377886) < 1e-9, "deepseek");
    CHECK(model_presets_find("gpt-5") == NULL, "unknown");
    {
        cJSON *j = model_presets_json();
        cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "models")) == model_presets_count() &&
                  cJSON_IsString(cJSON_GetObjectItem(first, "source")),
              "the listing carries every preset with its source");
        cJSON_Delete(j);
    }
}

static void test_bad_files(void)
{
    char path[] = "/tmp/attnd-test-models-XXXXXX", err[512];
    static const char *const bad[][2] = {
        {"{\"models\":[{\"name\":\"a\",\"heads\":8,\"kv_heads\":3,\"head_dim\":64,\"source\":\"s\"}]}", "does not divide"},
        {"{\"models\":[{\"name\":\"a\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64}]}", "source"},
        {"{\"models\":[{\"name\":\"A b\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64,\"source\":\"s\"}]}", "name"},
        {"{\"models\":[{\"name\":\"a\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64,\"source\":\"s\"},"
         "{\"name\":\"a\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64,\"source\":\"s\"}]}", "twice"},
        {"{\"models\":[{\"name\":\"a\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64.5,\"source\":\"s\"}]}", "head_dim"},
        {"{\"models\":[{\"name\":\"a\",\"heads\":8,\"kv_heads\":8,\"head_dim\":64,\"scale\":-1,\"source\":\"s\"}]}", "scale"},
        {"[1, 2]", "models"},
    };
    int fd = mkstemp(path);
    size_t i;

    CHECK(fd >= 0, "mkstemp");
    close(fd);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(write_file(path, bad[i][0]) == 0, "write");
        CHECK(model_presets_load(path, err, sizeof err) == -1 && strstr(err, bad[i][1]), "bad file %zu: '%s'", i, err);
    }
    CHECK(model_presets_find("llama-3.1-8b") != NULL, "a refused file leaves the presets loaded before");
    CHECK(model_presets_load("/nonexistent/models.json", err, sizeof err) == -1, "missing file");
    unlink(path);
}

int main(void)
{
    test_the_shipped_file();
    test_bad_files();
    model_presets_free();
    CHECK(model_presets_count() == 0 && model_presets_find("llama-3.1-8b") == NULL, "freed");
    return CHECK_DONE();
}
