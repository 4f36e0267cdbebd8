/* static_files.c — serve files from a directory, safely (static_files.h).
 *
 * Safety comes from the name, not from path arithmetic: a served name is one segment of
 * [A-Za-z0-9._-] that does not start with '.', so it cannot name a parent, a hidden file or
 * a subdirectory; the file must be regular (a symlink is followed only when its target is
 * one, and the directory is the operator's).
 */
#include "server/front/http/static_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

#define STATIC_MAX_BYTES (8u << 20)

int static_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    if (n == 0 || n >= 100 || name[0] == '.') return 0;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static const char *content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},   {".json", "application/json"},
        {".svg", "image/svg+xml"},             {".png", "image/png"},
        {".ico", "image/x-icon"},              {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(name, '.');
    size_t i;

    for (i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0) return types[i].type;
    return "application/octet-stream";
}

void static_send_file(http_request *req, const char *dir, const char *name)
{
    char path[PATH_MAX];
    struct stat st;
    char *buf;
    size_t got = 0;
    int fd;

    if (!static_name_ok(name)) {
        http_fail(req, 404, "not_found", "", "no such file: %.100s", name ? name : "");
        return;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        http_fail(req, 404, "not_found", "", "no such file: %s", name);
        return;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        http_fail(req, 404, "not_found", "", "no such file: %s", name);
        return;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > STATIC_MAX_BYTES) {
        close(fd);
        http_fail(req, 404, "not_found", "", "%s is not a servable file", name);
        return;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        http_fail(req, 500, "internal", "", "out of memory reading %s", name);
        return;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != (size_t)st.st_size) {
        free(buf);
        log_error("static: short read of %s", path);
        http_fail(req, 500, "internal", "", "cannot read %s", name);
        return;
    }
    if (http_add_header(req, "Cache-Control", "no-cache") != 0 ||
        http_add_header(req, "X-Content-Type-Options", "nosniff") != 0)
        log_warn("static: no room for headers of %s", name);
    http_send_bytes(req, 200, content_type(name), buf, got);
    free(buf);
}
