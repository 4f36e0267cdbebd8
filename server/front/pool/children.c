/* children.c — the worker processes (children.h).
 *
 * A worker is `attnd-worker --device DEVICE --ipc-fd 3 …the front's own flags`, so it loads
 * the same settings; the probe is `attnd-worker --probe`. argv is built before fork: nothing
 * between fork and exec may allocate.
 */
#include "server/front/pool/children.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/proto.h"

#define CHILDREN_PROBE_LIMIT_MS 30000
#define CHILDREN_WORKER_EXE "attnd-worker" /* beside the front's executable */
#define CHILDREN_WORKER_FD 3               /* the socket's number in the worker (--ipc-fd 3) */

/* The worker executable: attnd-worker beside the front's own file (the front links no CUDA;
 * the worker holds it). Resolved once by children_find_worker, before any fork. */
static char children_worker_path[4096];
/* The settings flags every worker is started with (children_set_worker_flags). */
static char *const *children_worker_flags;
static int children_worker_nflags;

/* Milliseconds left until deadline_s (clock_monotonic_s), at least 0. */
static long long children_ms_left(double deadline_s)
{
    double left = (deadline_s - clock_monotonic_s()) * 1e3;
    return left > 0 ? (long long)left : 0;
}

void children_describe_status(int status, char *buf, size_t len)
{
    if (status < 0)
        snprintf(buf, len, "vanished (exit status unknown)");
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "crashed (signal %d, %s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status))
        snprintf(buf, len, "exited (status %d)", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended (wait status 0x%x)", status);
}

int children_reap(pid_t pid, int sig, int grace_ms)
{
    double deadline_s = clock_monotonic_s() + grace_ms * 1e-3;
    int status;

    if (pid <= 0) return -1;
    if (sig > 0) kill(pid, sig);
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) return -1;
        if (children_ms_left(deadline_s) == 0) break;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

/* argv of a child: argv0, the given words, then the settings flags. Caller frees the array
 * (not the strings). */
static char **children_argv(const char *const *words, int nwords, int with_front_flags)
{
    int nflags = with_front_flags ? children_worker_nflags : 0;
    int n = 0, i;
    char **argv = calloc((size_t)(nflags + nwords + 2), sizeof *argv);

    if (!argv) return NULL;
    argv[n++] = children_worker_path;
    for (i = 0; i < nwords; i++) argv[n++] = (char *)words[i];
    for (i = 0; i < nflags; i++) argv[n++] = children_worker_flags[i];
    argv[n] = NULL;
    return argv;
}

void children_set_worker_flags(int argc, char *const *argv)
{
    children_worker_flags = argv;
    children_worker_nflags = argc;
}

void children_set_worker_exe(const char *path)
{
    snprintf(children_worker_path, sizeof children_worker_path, "%s", path ? path : "");
}

int children_find_worker(char *err, size_t err_len)
{
    char self[4096];
    ssize_t n;
    char *slash;

    if (children_worker_path[0]) return 0; /* children_set_worker_exe */
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(err, err_len, "cannot read /proc/self/exe: %s", strerror(errno));
        return -1;
    }
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash) slash[1] = '\0';
    if (snprintf(children_worker_path, sizeof children_worker_path, "%s%s", slash ? self : "./",
                 CHILDREN_WORKER_EXE) >= (int)sizeof children_worker_path) {
        snprintf(err, err_len, "the path of %s is too long", CHILDREN_WORKER_EXE);
        return -1;
    }
    if (access(children_worker_path, X_OK) != 0) {
        snprintf(err, err_len, "cannot run the worker %s: %s (it is built and installed beside attnd)",
                 children_worker_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* In a forked child only: async-signal-safe calls. Signal mask back to empty (the front's
 * threads may block signals); a process group of its own, so a terminal's Ctrl-C reaches the
 * front alone, which ends the running job in order (the worker still dies with the front:
 * PR_SET_PDEATHSIG); then exec the worker. */
static void children_exec(char **argv)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);
    execv(children_worker_path, argv);
    _exit(127);
}

/* Read what fd gives into out (NUL-terminated) until EOF, a full buffer or deadline_s.
 * Returns 1 when the deadline passed first. */
static int children_read_until(int fd, char *out, size_t cap, double deadline_s)
{
    size_t got = 0;
    int timed_out = 0;

    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN, .revents = 0};
        long long left = children_ms_left(deadline_s);
        ssize_t r;
        int rc;

        if (left <= 0) {
            timed_out = 1;
            break;
        }
        rc = poll(&pf, 1, (int)left);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) continue; /* the deadline check ends it */
        if (got >= cap - 1) break;
        r = read(fd, out + got, cap - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    out[got] = '\0';
    return timed_out;
}

int children_probe_gpus(char *why, size_t why_len)
{
    static const char *const words[] = {"--probe"};
    char out[4096];
    int p[2], status, gpus = 0, timed_out;
    char **argv;
    pid_t pid;
    cJSON *json, *n, *err;

    snprintf(why, why_len, "probe failed");
    argv = children_argv(words, 1, 0);
    if (!argv) return 0;
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe2: %s", strerror(errno));
        free(argv);
        return 0;
    }
    pid = fork();
    if (pid == 0) {
        if (dup2(p[1], STDOUT_FILENO) < 0) _exit(127); /* dup2 clears CLOEXEC on fd 1 */
        children_exec(argv);
    }
    free(argv);
    close(p[1]);
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(p[0]);
        return 0;
    }
    timed_out = children_read_until(p[0], out, sizeof out, clock_monotonic_s() + CHILDREN_PROBE_LIMIT_MS * 1e-3);
    close(p[0]);
    status = children_reap(pid, timed_out ? SIGKILL : 0, timed_out ? 0 : CHILDREN_PROBE_LIMIT_MS);
    if (timed_out) {
        snprintf(why, why_len, "the GPU probe did not answer within %d s", CHILDREN_PROBE_LIMIT_MS / 1000);
        return 0;
    }
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char how[128];
        children_describe_status(status, how, sizeof how);
        snprintf(why, why_len, "the GPU probe %s", how);
        return 0;
    }
    json = cJSON_Parse(out);
    n = cJSON_GetObjectItem(json, "gpus");
    err = cJSON_GetObjectItem(json, "error");
    if (!cJSON_IsNumber(n)) {
        snprintf(why, why_len, "the GPU probe answered no GPU count: %.200s", out);
    } else {
        gpus = n->valuedouble > 0 ? (int)n->valuedouble : 0;
        snprintf(why, why_len, "%s", cJSON_IsString(err) ? err->valuestring : "no GPU");
    }
    cJSON_Delete(json);
    return gpus;
}

int children_start(const char *device, pid_t *pid, char *why, size_t why_len)
{
    const char *words[] = {"--device", device, "--ipc-fd", "3"};
    char **argv = children_argv(words, 4, 1);
    int sv[2];

    *pid = 0;
    if (!argv) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        free(argv);
        return -1;
    }
    *pid = fork();
    if (*pid == 0) {
        if (sv[1] == CHILDREN_WORKER_FD) {
            if (fcntl(CHILDREN_WORKER_FD, F_SETFD, 0) < 0) _exit(127); /* dup2 onto itself keeps CLOEXEC */
        } else if (dup2(sv[1], CHILDREN_WORKER_FD) < 0) {
            _exit(127);
        }
        children_exec(argv);
    }
    free(argv);
    close(sv[1]);
    if (*pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(sv[0]);
        *pid = 0;
        return -1;
    }
    log_info("worker %s: started, pid %d", device, (int)*pid);
    return sv[0];
}

int children_await_hello(int sock, pid_t pid, cJSON **device, cJSON **variants, char *why, size_t why_len)
{
    cJSON *msg = NULL;
    const cJSON *error;
    int fd = -1, rc, status;

    *device = *variants = NULL;
    rc = ipc_recv_json(sock, &msg, &fd, CHILDREN_HELLO_LIMIT_MS);
    if (fd >= 0) close(fd);
    if (rc == IPC_OK && proto_type_parse(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "type"))) == PROTO_HELLO &&
        cJSON_IsObject(cJSON_GetObjectItem(msg, "device"))) {
        *device = cJSON_DetachItemFromObject(msg, "device");
        *variants = cJSON_DetachItemFromObject(msg, "variants");
        cJSON_Delete(msg);
        return 0;
    }

    error = cJSON_GetObjectItem(msg, "error");
    if (rc == IPC_OK && cJSON_IsString(error))
        snprintf(why, why_len, "%s", error->valuestring);
    else if (rc == IPC_OK)
        snprintf(why, why_len, "its first message was not a hello");
    else if (rc == IPC_TIMEOUT)
        snprintf(why, why_len, "no hello within %d s", CHILDREN_HELLO_LIMIT_MS / 1000);
    cJSON_Delete(msg);
    status = children_reap(pid, rc == IPC_TIMEOUT || rc == IPC_OK ? SIGKILL : 0, CHILDREN_STOP_GRACE_MS);
    if (rc != IPC_OK && rc != IPC_TIMEOUT) {
        char how[128];
        children_describe_status(status, how, sizeof how);
        snprintf(why, why_len, "the worker %s before its hello", how);
    }
    return -1;
}
