/* log.c — one line per event on stderr:
 *
 *   2026-12-02T10:31:05.123Z front info message
 *
 * UTC time with milliseconds, the process role, the level, the message. Each line is
 * formatted whole and written with one write(2) so lines of concurrent threads (and of the
 * front and its workers, which share stderr) never interleave.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *const log_level_names[] = {"error", "warn", "info", "debug"};

/* Set once by log_init before any thread starts; read-only afterwards. */
static char log_role[32] = "attnd";
static log_level log_threshold = LOG_INFO;

void log_init(const char *role, const char *level_name)
{
    size_t i;

    snprintf(log_role, sizeof log_role, "%s", role && role[0] ? role : "attnd");
    log_threshold = LOG_INFO;
    if (!level_name) return;
    for (i = 0; i < sizeof log_level_names / sizeof log_level_names[0]; i++)
        if (strcasecmp(level_name, log_level_names[i]) == 0) log_threshold = (log_level)i;
}

void log_msg(log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timespec now;
    struct tm tm;
    size_t n;
    int k;
    va_list ap;

    if (level > log_threshold) return;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        now.tv_sec = time(NULL);
        now.tv_nsec = 0;
    }
    gmtime_r(&now.tv_sec, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(line + n, sizeof line - n, ".%03ldZ %s %s ", now.tv_nsec / 1000000L, log_role,
                 log_level_names[level]);
    if (k > 0) n += (size_t)k;
    if (n >= sizeof line) n = sizeof line - 1;

    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k > 0) n += (size_t)k;
    if (n > sizeof line - 2) n = sizeof line - 2; /* truncated: keep room for the newline */
    while (n > 0 && line[n - 1] == '\n') n--;
    line[n++] = '\n';

    /* One write per line; a short write to stderr is not worth retrying in a loop here. */
    if (write(STDERR_FILENO, line, n) < 0) { /* nowhere left to report it */
    }
}
