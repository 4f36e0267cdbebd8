/* install_path.c — find what ships beside the binary (install_path.h). */
#include "server/front/install_path.h"

#include "common/model_presets.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_wanted(const char *path, int want_dir)
{
    struct stat st;
    return stat(path, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

int install_path_find(const char *configured, const char *rel, int want_dir, char *out, size_t len)
{
    static const char *const ups[] = {"/../..", "/..", ""};
    char exe[PATH_MAX], *slash;
    ssize_t n;
    size_t i;

    if (configured && configured[0])
        return (size_t)snprintf(out, len, "%s", configured) < len && is_wanted(out, want_dir) ? 0 : -1;
    if ((size_t)snprintf(out, len, "%s", rel) < len && is_wanted(out, want_dir)) return 0;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    for (i = 0; i < sizeof ups / sizeof ups[0]; i++)
        if ((size_t)snprintf(out, len, "%s%s/%s", exe, ups[i], rel) < len && is_wanted(out, want_dir)) return 0;
    return -1;
}

int install_path_load_presets(const char *configured, char *err, size_t err_len)
{
    char path[1024];

    if (install_path_find(configured, "config/models.json", 0, path, sizeof path) != 0) {
        snprintf(err, err_len, "the model presets are not found: %s (set models_file)",
                 configured && configured[0] ? configured : "no config/models.json in the cwd or beside the binary");
        return -1;
    }
    return model_presets_load(path, err, err_len);
}
