/* pool.c — the front's side of the workers (pool.h).
 *
 * One worker_slot per device, the cpu first, then cuda:N in ordinal order. Each slot has a
 * child process (`attnd --worker DEVICE --ipc-fd 3 …the front's own flags`), a bounded FIFO
 * of jobs and one dispatcher thread that owns the child: it starts it, waits for its hello,
 * and then runs one job at a time over the socket. The HTTP threads only enqueue a job and
 * wait on its condition variable (pool_run_sync).
 *
 * Every accepted job ends exactly once, in one of three ways:
 *   done     the worker answered a result            → 200 + record, stored "done"
 *   failed   it ran and broke: worker failure, crash, timeout, shutdown mid-run
 *                                                     → 500 + record, stored "failed"
 *   refused  it never ran: the worker refused it (4xx), its device went down, the server
 *            stopped while it was queued            → the status + {"error":…}, row deleted
 *   cancelled it never ran and its record stays: DELETE while queued (pool_cancel), its
 *            synchronous client went away while queued (client_gone), an async run queued
 *            when the server stops (shutting_down) → stored "cancelled" with that code
 * (an async run keeps a refusal after its 202 as "failed"). Whichever way a run ends, its
 * end hook (pool_run's on_end: the resident tensors' bookkeeping) is called once, by
 * job_end_hook, before the end is stored or handed to a waiter: one step for synchronous
 * and async runs, so neither relies on its HTTP handler still being there when the run ends.
 * A crash, a fatal (sticky) error or a timeout ends the child (SIGKILL for a timeout); the
 * dispatcher reaps it, starts a new one and goes on with the queue.
 *
 * GPU outputs verified against the fp64 reference: the GPU worker answers its result with a
 * memfd of the output; the GPU slot's dispatcher puts a verify job at the front of the cpu
 * slot's queue (ahead of waiting runs, so a verify never waits behind a long queue and is
 * never refused for a full one), waits for it, and puts its answer in result.verify.
 *
 * Shutdown is two steps: pool_quiesce ends every queued run at once (the running ones go
 * on, so their clients get their answers), then pool_stop waits for the running jobs and
 * ends the workers.
 *
 * Locking: one mutex (pool_mu) guards every slot's state, queue and job hand-over; the
 * dispatchers drop it for all I/O (socket, store, fork). Slots are allocated once per
 * pool_start and never freed, so a thread still waiting on a slot's condition variable
 * during shutdown never touches freed memory.
 */
#include "front/pool.h"

#include "common/build_info.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/command_line.h" /* the front's argv: workers get the same flags, so the same settings */
#include "front/metrics.h"
#include "front/store.h"

/* Weak: main.o is not linked into the unit tests, which link this file; without it a worker
 * gets no flags (its defaults). */
#pragma weak main_original_argv
#pragma weak main_original_argc

#define POOL_HELLO_LIMIT_MS 60000 /* CUDA context creation can take seconds; 60 s is generous */
#define POOL_HELLO_TRIES 3        /* failed hellos in a row before a slot is marked down */
#define POOL_RETRY_PAUSE_MS 1000  /* between failed hellos */
#define POOL_PROBE_LIMIT_MS 30000
#define POOL_STOP_GRACE_MS 2000 /* SIGTERM, then SIGKILL after this */
#define POOL_WORKER_EXE "attnd-worker" /* beside the front's executable */
#define POOL_WORKER_FD 3        /* the socket's number in the worker (--ipc-fd 3) */
#define POOL_CLIENT_POLL_MS 200 /* how often a waiting synchronous run asks whether its client left */

typedef enum slot_state { SLOT_STARTING, SLOT_UP, SLOT_DOWN } slot_state;
typedef enum job_kind { JOB_RUN, JOB_VERIFY, JOB_TENSOR } job_kind;

static const char *const slot_state_names[] = {"starting", "up", "down"};

typedef struct pool_job {
    job_kind kind;
    long long id; /* the run's id (a verify job: the id of the run it checks) */
    run_request req;
    cJSON *record; /* JOB_RUN: the run record; the dispatcher's while it runs */
    int fd;        /* JOB_VERIFY: the output bytes (owned by the GPU dispatcher) */
    size_t bytes;
    cJSON *verify; /* JOB_VERIFY answer: the verify object, or {"error":"…"} */
    cJSON *msg;    /* JOB_TENSOR: the message to send (the caller's); fd rides along */
    int reply_fd;  /* JOB_TENSOR: the descriptor of the answer, or -1 (the waiter's) */
    int generation; /* JOB_TENSOR, JOB_RUN: the worker generation (slot restarts) it ran on; -1 before */
    pool_run_end_fn on_end; /* JOB_RUN: the end hook (pool_run), NULL once called or when none */
    /* The end, handed to the waiter under pool_mu. */
    int finished;
    int http_status;
    cJSON *response;
    int detached; /* async (set once queued), or a synchronous run whose client left while it ran:
                     no waiter; the end frees the job and stores refusals */
    int ending;   /* unlinked from its queue by a cancel that ends it outside pool_mu: its waiter
                     must wait for that end, not detach */
    int client_gone; /* the synchronous client left before the answer: the record says so. Atomic
                        (__atomic_*): the dispatcher reads it while storing, without pool_mu */
    pthread_cond_t cond;
    struct pool_job *next;
} pool_job;

typedef struct worker_slot {
    char name[16]; /* "cpu" or "cuda:N" */
    pid_t pid;     /* 0 when no child */
    int sock;      /* the front's end; -1 when no child */
    slot_state state;
    char reason[512]; /* why it is down, or the last failure */
    cJSON *device;    /* the last hello's device object; NULL before the first */
    cJSON *variants;  /* the last hello's variant reports (worker/variants_report.h); NULL before */
    pool_job *head, *tail;
    int queued; /* JOB_RUN jobs waiting or reserved (queue_depth applies to these) */
    int restarts;
    int running; /* the dispatcher is between taking a job and its end (pool_stop waits for it) */
    long long current_run; /* the JOB_RUN being run (its id), 0 when none: for pool_runs_reading_tensor */
    run_request current_req; /* its request (a copy: a detached job is freed at its end) */
    pthread_t thread;
    int thread_started;
    pthread_cond_t work_cond;  /* a job arrived, or stopping */
    pthread_cond_t state_cond; /* state changed, or stopping */
} worker_slot;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static settings pool_settings;
static worker_slot *pool_slots;
static int pool_nslots;
static int pool_started, pool_stopping;
static int pool_draining; /* pool_quiesce: no new runs; the running ones go on */

/* -------------------------------------------------------------------------- helpers -- */

static long long pool_now_ms(void) { return (long long)(clock_monotonic_s() * 1e3); }

/* An absolute CLOCK_REALTIME time ms from now, for pthread_cond_timedwait. */
static struct timespec pool_deadline(long long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* How a child ended, for people: "crashed (signal 11, Segmentation fault)". */
static void pool_describe_status(int status, char *buf, size_t len)
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

/* Wait up to grace_ms for pid to end (after sending sig when sig > 0), then SIGKILL it and
 * wait for good. Returns its wait status, or -1 when it could not be reaped. */
static int pool_reap(pid_t pid, int sig, int grace_ms)
{
    long long deadline = pool_now_ms() + grace_ms;
    int status;

    if (pid <= 0) return -1;
    if (sig > 0) kill(pid, sig);
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) return -1;
        if (pool_now_ms() >= deadline) break;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

static cJSON *pool_error_body(const char *code, const char *message, const char *field)
{
    cJSON *body = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(body, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    if (field && field[0])
        cJSON_AddStringToObject(e, "field", field);
    else
        cJSON_AddNullToObject(e, "field");
    return body;
}

/* Replace member key of obj with item (taking ownership). */
static void pool_set(cJSON *obj, const char *key, cJSON *item)
{
    if (cJSON_GetObjectItem(obj, key))
        cJSON_ReplaceItemInObject(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

static int pool_is_stopping(void)
{
    int stopping;
    pthread_mutex_lock(&pool_mu);
    stopping = pool_stopping;
    pthread_mutex_unlock(&pool_mu);
    return stopping;
}

static worker_slot *pool_find_slot(const char *device)
{
    int i;
    if (!device) return NULL;
    for (i = 0; i < pool_nslots; i++)
        if (strcmp(pool_slots[i].name, device) == 0) return &pool_slots[i];
    return NULL;
}

/* ------------------------------------------------------------------------ processes -- */

/* The worker executable: attnd-worker beside the front's own file (the front links no CUDA;
 * the worker holds it). Resolved once by pool_start, before any fork. */
static char pool_worker_path[4096];

/* argv of a child: argv0, the given words, then the front's own argv[1..]. Built before fork
 * (nothing between fork and exec may allocate). Caller frees the array (not the strings). */
static char **pool_child_argv(const char *const *words, int nwords, int with_front_flags)
{
    char *const *orig = main_original_argv ? main_original_argv() : NULL;
    int orig_argc = orig && main_original_argc ? main_original_argc() : 0;
    int n = 0, i;
    char **argv = calloc((size_t)(orig_argc + nwords + 2), sizeof *argv);

    if (!argv) return NULL;
    argv[n++] = pool_worker_path;
    for (i = 0; i < nwords; i++) argv[n++] = (char *)words[i];
    if (with_front_flags)
        for (i = 1; i < orig_argc; i++) argv[n++] = orig[i];
    argv[n] = NULL;
    return argv;
}

void pool_set_worker_exe(const char *path)
{
    snprintf(pool_worker_path, sizeof pool_worker_path, "%s", path ? path : "");
}

static int pool_find_worker(char *err, size_t err_len)
{
    char self[4096];
    ssize_t n;
    char *slash;

    if (pool_worker_path[0]) return 0; /* pool_set_worker_exe */
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(err, err_len, "cannot read /proc/self/exe: %s", strerror(errno));
        return -1;
    }
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash) slash[1] = '\0';
    if (snprintf(pool_worker_path, sizeof pool_worker_path, "%s%s", slash ? self : "./", POOL_WORKER_EXE) >=
        (int)sizeof pool_worker_path) {
        snprintf(err, err_len, "the path of %s is too long", POOL_WORKER_EXE);
        return -1;
    }
    if (access(pool_worker_path, X_OK) != 0) {
        snprintf(err, err_len, "cannot run the worker %s: %s (it is built and installed beside attnd)",
                 pool_worker_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* In a forked child only: async-signal-safe calls. Signal mask back to empty (the front's
 * threads may block signals), then exec the worker. */
static void pool_child_exec(char **argv)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv(pool_worker_path, argv);
    _exit(127);
}

/* `attnd --probe` in a child: the number of GPUs (0 with why filled when none or when the
 * probe crashed or hung; the front never initialises CUDA itself). */
static int pool_probe(char *why, size_t why_len)
{
    static const char *const words[] = {"--probe"};
    char out[4096];
    size_t got = 0;
    long long deadline = pool_now_ms() + POOL_PROBE_LIMIT_MS;
    int p[2], status, gpus = 0, timed_out = 0;
    char **argv;
    pid_t pid;
    cJSON *json, *n, *err;

    snprintf(why, why_len, "probe failed");
    argv = pool_child_argv(words, 1, 0);
    if (!argv) return 0;
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe2: %s", strerror(errno));
        free(argv);
        return 0;
    }
    pid = fork();
    if (pid == 0) {
        if (dup2(p[1], STDOUT_FILENO) < 0) _exit(127); /* dup2 clears CLOEXEC on fd 1 */
        pool_child_exec(argv);
    }
    free(argv);
    close(p[1]);
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(p[0]);
        return 0;
    }
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN, .revents = 0};
        long long left = deadline - pool_now_ms();
        ssize_t r;
        int rc;

        if (left <= 0) {
            timed_out = 1;
            break;
        }
        rc = poll(&pf, 1, (int)left);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) continue; /* the deadline check ends it */
        if (got >= sizeof out - 1) break;
        r = read(p[0], out + got, sizeof out - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(p[0]);
    out[got] = '\0';
    status = pool_reap(pid, timed_out ? SIGKILL : 0, timed_out ? 0 : POOL_PROBE_LIMIT_MS);
    if (timed_out) {
        snprintf(why, why_len, "the GPU probe did not answer within %d s", POOL_PROBE_LIMIT_MS / 1000);
        return 0;
    }
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char how[128];
        pool_describe_status(status, how, sizeof how);
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

/* Start the slot's child and wait for its hello. 0 with the slot's sock, pid and device
 * set; -1 with why filled and no child left. Called by the slot's dispatcher only. */
static int slot_spawn(worker_slot *w, char *why, size_t why_len)
{
    const char *words[] = {"--device", w->name, "--ipc-fd", "3"};
    char **argv = pool_child_argv(words, 4, 1);
    cJSON *msg = NULL, *type, *device, *error;
    int sv[2], fd = -1, rc, status;
    pid_t pid;

    if (!argv) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        free(argv);
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        if (sv[1] == POOL_WORKER_FD) {
            if (fcntl(POOL_WORKER_FD, F_SETFD, 0) < 0) _exit(127); /* dup2 onto itself keeps CLOEXEC */
        } else if (dup2(sv[1], POOL_WORKER_FD) < 0) {
            _exit(127);
        }
        pool_child_exec(argv);
    }
    free(argv);
    close(sv[1]);
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(sv[0]);
        return -1;
    }
    pthread_mutex_lock(&pool_mu);
    w->sock = sv[0];
    w->pid = pid;
    if (pool_stopping) shutdown(w->sock, SHUT_RDWR);
    pthread_mutex_unlock(&pool_mu);
    log_info("worker %s: started, pid %d", w->name, (int)pid);

    rc = ipc_recv_json(w->sock, &msg, &fd, POOL_HELLO_LIMIT_MS);
    if (fd >= 0) close(fd);
    type = cJSON_GetObjectItem(msg, "type");
    device = cJSON_GetObjectItem(msg, "device");
    error = cJSON_GetObjectItem(msg, "error");
    if (rc == IPC_OK && cJSON_IsString(type) && strcmp(type->valuestring, "hello") == 0 && cJSON_IsObject(device)) {
        pthread_mutex_lock(&pool_mu);
        cJSON_Delete(w->device);
        w->device = cJSON_DetachItemFromObject(msg, "device");
        cJSON_Delete(w->variants);
        w->variants = cJSON_DetachItemFromObject(msg, "variants");
        pthread_mutex_unlock(&pool_mu);
        cJSON_Delete(msg);
        return 0;
    }

    if (rc == IPC_OK && cJSON_IsString(error))
        snprintf(why, why_len, "%s", error->valuestring);
    else if (rc == IPC_OK)
        snprintf(why, why_len, "its first message was not a hello");
    else if (rc == IPC_TIMEOUT)
        snprintf(why, why_len, "no hello within %d s", POOL_HELLO_LIMIT_MS / 1000);
    cJSON_Delete(msg);
    status = pool_reap(pid, rc == IPC_TIMEOUT || rc == IPC_OK ? SIGKILL : 0, POOL_STOP_GRACE_MS);
    if (rc != IPC_OK && rc != IPC_TIMEOUT) {
        char how[128];
        pool_describe_status(status, how, sizeof how);
        snprintf(why, why_len, "the worker %s before its hello", how);
    }
    pthread_mutex_lock(&pool_mu);
    close(w->sock);
    w->sock = -1;
    w->pid = 0;
    pthread_mutex_unlock(&pool_mu);
    return -1;
}

/* The child is gone or must go: kill it with sig (0: it is ending by itself), reap it, and
 * mark the slot for a restart. Returns the wait status (for the failure message). */
static pool_restart_fn pool_restart_hook;

void pool_on_worker_restart(pool_restart_fn fn) { pool_restart_hook = fn; }

static int slot_lose_worker(worker_slot *w, int sig)
{
    int status, stopping, generation;

    /* At shutdown a worker busy on the device does not read its EOF: SIGTERM it. */
    if (sig == 0 && pool_is_stopping()) sig = SIGTERM;
    status = pool_reap(w->pid, sig, POOL_STOP_GRACE_MS);

    pthread_mutex_lock(&pool_mu);
    close(w->sock);
    w->sock = -1;
    w->pid = 0;
    stopping = pool_stopping;
    if (!stopping) {
        w->state = SLOT_STARTING;
        w->restarts++;
    }
    generation = w->restarts;
    pthread_cond_broadcast(&w->state_cond);
    pthread_mutex_unlock(&pool_mu);
    if (!stopping && pool_restart_hook) pool_restart_hook(w->name, generation);
    return status;
}

/* ------------------------------------------------------------------------------ jobs -- */

static void job_store_final(pool_job *j, const char *status);

/* The run's end hook (pool_run_end_fn), once: every way a JOB_RUN ends calls this before
 * it stores the final record or wakes a waiter. Under pool_mu or not (see pool.h). */
static void job_end_hook(pool_job *j, pool_run_outcome outcome)
{
    pool_run_end_fn fn = j->on_end;

    if (j->kind != JOB_RUN || !fn) return;
    j->on_end = NULL;
    fn(&j->req, outcome, j->record, j->generation);
}

/* End the run without a result: {"code","message"} as its record's error, the end hook with
 * outcome (POOL_RUN_FAILED: stored "failed"; POOL_RUN_CANCELLED: a waiting run that will
 * not run, stored "cancelled", j unlinked from its queue and ours alone), the stored final
 * record. Under pool_mu or not, as job_end_hook. */
static void job_record_end(pool_job *j, pool_run_outcome outcome, const char *code, const char *message)
{
    cJSON *error = cJSON_CreateObject();

    cJSON_AddStringToObject(error, "code", code);
    cJSON_AddStringToObject(error, "message", message);
    pool_set(j->record, "error", error);
    job_end_hook(j, outcome);
    job_store_final(j, outcome == POOL_RUN_CANCELLED ? "cancelled" : "failed");
}

static void job_record_failure(pool_job *j, const char *code, const char *message)
{
    job_record_end(j, POOL_RUN_FAILED, code, message);
}

static void job_record_cancelled(pool_job *j, const char *code, const char *message)
{
    job_record_end(j, POOL_RUN_CANCELLED, code, message);
}

/* Hand the end to the waiter. Under pool_mu. A detached (async) job has no waiter: it is
 * freed here, so the caller must not touch j afterwards. */
static void job_finish_locked(pool_job *j, int http_status, cJSON *response)
{
    if (j->detached) {
        cJSON_Delete(response);
        pthread_cond_destroy(&j->cond);
        free(j);
        return;
    }
    j->http_status = http_status;
    j->response = response;
    j->finished = 1;
    pthread_cond_broadcast(&j->cond);
}

/* Refuse a job that never ran: delete its row, answer status + {"error":…}. Under pool_mu.
 * A verify job gets {"error":message} as its verify answer. */
static void job_refuse_locked(pool_job *j, int http_status, const char *code, const char *message,
                              const char *field)
{
    if (j->kind == JOB_TENSOR) { /* resident tensors: no run row */
        job_finish_locked(j, http_status, pool_error_body(code, message, field));
        return;
    }
    if (j->kind == JOB_VERIFY) {
        j->verify = cJSON_CreateObject();
        cJSON_AddStringToObject(j->verify, "error", message);
        job_finish_locked(j, 500, NULL);
        return;
    }
    if (j->detached) { /* the client holds its id (202): keep the run, failed with the reason */
        job_record_failure(j, code, message);
        job_finish_locked(j, http_status, NULL);
        return;
    }
    job_end_hook(j, POOL_RUN_REFUSED);
    store_delete_run(j->id);
    cJSON_Delete(j->record);
    j->record = NULL;
    job_finish_locked(j, http_status, pool_error_body(code, message, field));
}

/* Refuse every queued job of a slot: it went down. Under pool_mu. */
static void slot_refuse_queue_locked(worker_slot *w, const char *code, const char *message)
{
    pool_job *j = w->head;

    w->head = w->tail = NULL;
    while (j) {
        pool_job *next = j->next;
        if (j->kind == JOB_RUN) w->queued--;
        job_refuse_locked(j, 503, code, message, "device");
        j = next;
    }
}

#define POOL_SHUTDOWN_MESSAGE "the server is stopping; the run was not started"

/* End a job that waits in a queue (already unlinked) because the server stops: a
 * synchronous run is answered 503 shutting_down and not stored (its client hears why), an
 * async one is stored "cancelled" (its client holds the id), a tensor or verify job is
 * refused. Under pool_mu. */
static void job_shutdown_locked(pool_job *j)
{
    if (j->kind == JOB_RUN && j->detached) {
        job_record_cancelled(j, "shutting_down", POOL_SHUTDOWN_MESSAGE);
        job_finish_locked(j, 503, NULL);
        return;
    }
    job_refuse_locked(j, 503, "shutting_down", POOL_SHUTDOWN_MESSAGE, NULL);
}

/* Take the jobs of w's queue that the shutdown ends (every run; with all, every job) out
 * of the queue and end them (job_shutdown_locked). Under pool_mu. */
static void slot_shutdown_queue_locked(worker_slot *w, int all)
{
    pool_job *j = w->head, *keep = NULL, **keep_tail = &keep;

    w->head = w->tail = NULL;
    while (j) {
        pool_job *next = j->next;
        j->next = NULL;
        if (all || j->kind == JOB_RUN) {
            if (j->kind == JOB_RUN) w->queued--;
            job_shutdown_locked(j);
        } else { /* a verify of a running job, or a tensor operation: it goes on */
            *keep_tail = j;
            keep_tail = &j->next;
            w->tail = j;
        }
        j = next;
    }
    w->head = keep;
}

/* The record's last change: status, finished time, store it. */
static void job_store_final(pool_job *j, const char *status)
{
    char finished[40], *text;

    clock_text_now_iso(finished, sizeof finished);
    pool_set(j->record, "status", cJSON_CreateString(status));
    pool_set(j->record, "finished", cJSON_CreateString(finished)); /* null until now, same place */
    if (__atomic_load_n(&j->client_gone, __ATOMIC_ACQUIRE)) pool_set(j->record, "client_gone", cJSON_CreateTrue());
    text = cJSON_PrintUnformatted(j->record);
    if (!text || store_update_run(j->id, status, text) != 0)
        log_error("run %lld: could not store its %s record", j->id, status);
    cJSON_free(text);
    {
        const cJSON *median = cJSON_GetObjectItem(cJSON_GetObjectItem(j->record, "timing"), "median_us");
        metrics_run_finished(j->req.backend, j->req.device, status,
                             strcmp(status, "done") == 0 && cJSON_IsNumber(median) ? median->valuedouble * 1e-6 : -1.0);
    }
}

static void job_done(pool_job *j, cJSON *result)
{
    cJSON *item, *trace = cJSON_DetachItemFromObject(result, "trace");

    /* The Chrome trace goes to its own table (GET /v1/runs/ID/trace), not into the record. */
    if (cJSON_IsObject(trace)) {
        char *text = cJSON_PrintUnformatted(trace);
        if (!text || store_put_trace(j->id, text) != 0) log_error("run %lld: could not store its trace", j->id);
        cJSON_free(text);
    }
    cJSON_Delete(trace);

    /* Merge the worker's result members (timing, kernels, output, verify, perf). */
    while ((item = result ? result->child : NULL) != NULL) {
        char key[64];
        snprintf(key, sizeof key, "%s", item->string ? item->string : "");
        item = cJSON_DetachItemViaPointer(result, item);
        if (!key[0]) {
            cJSON_Delete(item);
            continue;
        }
        pool_set(j->record, key, item);
    }
    job_end_hook(j, POOL_RUN_DONE); /* a kept output is registered before "done" is readable */
    job_store_final(j, "done");
    pthread_mutex_lock(&pool_mu);
    job_finish_locked(j, 200, j->record);
    pthread_mutex_unlock(&pool_mu);
}

static void job_failed(pool_job *j, const char *code, const char *message)
{
    job_record_failure(j, code, message);
    log_warn("run %lld failed: %s: %s", j->id, code, message);
    pthread_mutex_lock(&pool_mu);
    job_finish_locked(j, 500, j->record);
    pthread_mutex_unlock(&pool_mu);
}

/* ------------------------------------------------------------------------ dispatcher -- */

typedef enum exchange_outcome {
    EXCHANGE_REPLY,   /* *reply is the worker's answer to this job */
    EXCHANGE_TIMEOUT, /* no answer within job_timeout_s: the worker was killed */
    EXCHANGE_LOST     /* the socket broke or the worker crashed: it was reaped */
} exchange_outcome;

/* Send msg (+fd) and wait for the answer with this job's id, under job_timeout_s. On
 * TIMEOUT and LOST the worker is already gone (killed/reaped, slot marked for restart) and
 * how describes it ("crashed (signal 11, Segmentation fault)"). */
static exchange_outcome slot_exchange(worker_slot *w, long long job_id, cJSON *msg, int fd, cJSON **reply,
                                      int *reply_fd, char *how, size_t how_len)
{
    int rc = ipc_send_json(w->sock, msg, fd);
    int status;

    *reply = NULL;
    *reply_fd = -1;
    if (rc == IPC_OK) rc = ipc_recv_json(w->sock, reply, reply_fd, pool_settings.job_timeout_s * 1000);
    if (rc == IPC_OK) {
        const cJSON *job = cJSON_GetObjectItem(*reply, "job");
        if (cJSON_IsNumber(job) && (long long)job->valuedouble == job_id) return EXCHANGE_REPLY;
        log_error("worker %s answered for job %.0f while running job %lld; restarting it", w->name,
                  cJSON_IsNumber(job) ? job->valuedouble : -1.0, job_id);
        cJSON_Delete(*reply);
        *reply = NULL;
        if (*reply_fd >= 0) close(*reply_fd);
        *reply_fd = -1;
        status = slot_lose_worker(w, SIGKILL);
        snprintf(how, how_len, "broke the protocol");
        return EXCHANGE_LOST;
    }
    if (rc == IPC_TIMEOUT) {
        slot_lose_worker(w, SIGKILL);
        snprintf(how, how_len, "killed");
        return EXCHANGE_TIMEOUT;
    }
    /* EOF or a broken frame: the worker died, or is dying; give it the grace to end. */
    status = slot_lose_worker(w, rc == IPC_EOF ? 0 : SIGKILL);
    pool_describe_status(status, how, how_len);
    return EXCHANGE_LOST;
}

/* Queue a verify job at the front of the cpu slot and wait for its answer. Returns the
 * verify object or {"error":"…"}; caller deletes. */
static cJSON *pool_verify_on_cpu(const pool_job *run, int fd)
{
    worker_slot *cpu = &pool_slots[0];
    pool_job v;
    struct stat st;
    cJSON *answer;

    memset(&v, 0, sizeof v);
    v.kind = JOB_VERIFY;
    v.id = run->id;
    v.req = run->req;
    v.fd = fd;
    v.bytes = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    pthread_cond_init(&v.cond, NULL);

    pthread_mutex_lock(&pool_mu);
    if (cpu->state == SLOT_DOWN || pool_stopping) {
        job_refuse_locked(&v, 503, "no_device",
                          cpu->state == SLOT_DOWN ? "the cpu device is down" : "the server is stopping", "");
    } else {
        v.next = cpu->head;
        cpu->head = &v;
        if (!cpu->tail) cpu->tail = &v;
        pthread_cond_signal(&cpu->work_cond);
    }
    while (!v.finished) pthread_cond_wait(&v.cond, &pool_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_cond_destroy(&v.cond);
    answer = v.verify;
    if (!answer) {
        answer = cJSON_CreateObject();
        cJSON_AddStringToObject(answer, "error", "the cpu verify gave no answer");
    }
    return answer;
}

/* The error object of a worker "error" reply as an api answer: 4xx + {"error":…}. */
static int pool_refusal_from_reply(const cJSON *reply, cJSON **body)
{
    const cJSON *e = cJSON_GetObjectItem(reply, "error");
    const cJSON *status = cJSON_GetObjectItem(e, "status");
    const cJSON *code = cJSON_GetObjectItem(e, "code");
    const cJSON *message = cJSON_GetObjectItem(e, "message");
    const cJSON *field = cJSON_GetObjectItem(e, "field");
    int http = cJSON_IsNumber(status) ? (int)status->valuedouble : 0;

    if (http < 400 || http > 499) return -1;
    *body = pool_error_body(cJSON_IsString(code) ? code->valuestring : "refused",
                            cJSON_IsString(message) ? message->valuestring : "the worker refused the job",
                            cJSON_IsString(field) ? field->valuestring : "");
    return http;
}

/* A lost worker's message for a job's error. */
static void pool_lost_message(const worker_slot *w, exchange_outcome out, const char *how, char *buf,
                              size_t len)
{
    if (out == EXCHANGE_TIMEOUT)
        snprintf(buf, len, "job exceeded job_timeout_s=%d s; worker %s killed%s", pool_settings.job_timeout_s,
                 w->name, pool_is_stopping() ? " (the server is stopping)" : " and restarted");
    else if (pool_is_stopping())
        snprintf(buf, len, "the server stopped while the job ran on worker %s", w->name);
    else
        snprintf(buf, len, "worker %s %s while running the job; restarted", w->name, how);
}

static void slot_run_verify(worker_slot *w, pool_job *v)
{
    cJSON *msg = cJSON_CreateObject(), *reply = NULL, *answer = NULL;
    const cJSON *type;
    char how[160], text[600];
    int reply_fd = -1;
    exchange_outcome out;

    cJSON_AddStringToObject(msg, "type", "verify");
    cJSON_AddNumberToObject(msg, "job", (double)v->id);
    cJSON_AddItemToObject(msg, "request", run_request_to_json(&v->req));
    cJSON_AddNumberToObject(msg, "bytes", (double)v->bytes);
    out = slot_exchange(w, v->id, msg, v->fd, &reply, &reply_fd, how, sizeof how);
    cJSON_Delete(msg);
    if (reply_fd >= 0) close(reply_fd);

    type = cJSON_GetObjectItem(reply, "type");
    if (out == EXCHANGE_REPLY && cJSON_IsString(type) && strcmp(type->valuestring, "verify_result") == 0 &&
        cJSON_IsObject(cJSON_GetObjectItem(reply, "verify"))) {
        answer = cJSON_DetachItemFromObject(reply, "verify");
    } else {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        const cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(reply, "error"), "message");
        const cJSON *fatal = cJSON_GetObjectItem(reply, "fatal");

        if (out != EXCHANGE_REPLY)
            pool_lost_message(w, out, how, text, sizeof text);
        else if (cJSON_IsString(e))
            snprintf(text, sizeof text, "%s", e->valuestring);
        else if (cJSON_IsString(m))
            snprintf(text, sizeof text, "%s", m->valuestring);
        else
            snprintf(text, sizeof text, "unexpected answer from worker %s", w->name);
        answer = cJSON_CreateObject();
        cJSON_AddStringToObject(answer, "error", text);
        if (out == EXCHANGE_REPLY && cJSON_IsTrue(fatal)) slot_lose_worker(w, 0);
    }
    cJSON_Delete(reply);
    pthread_mutex_lock(&pool_mu);
    v->verify = answer;
    job_finish_locked(v, 200, NULL);
    pthread_mutex_unlock(&pool_mu);
}

static void slot_run_job(worker_slot *w, pool_job *j)
{
    cJSON *msg, *reply = NULL, *device;
    const cJSON *type;
    char how[160], text[600], *record_text;
    int reply_fd = -1;
    exchange_outcome out;

    /* running: the device as it said hello this time, and the generation it runs on */
    pthread_mutex_lock(&pool_mu);
    device = w->device ? cJSON_Duplicate(w->device, 1) : cJSON_CreateNull();
    j->generation = w->restarts;
    pthread_mutex_unlock(&pool_mu);
    pool_set(j->record, "device", device);
    pool_set(j->record, "status", cJSON_CreateString("running"));
    record_text = cJSON_PrintUnformatted(j->record);
    if (!record_text || store_update_run(j->id, "running", record_text) != 0)
        log_error("run %lld: could not store its running state", j->id);
    cJSON_free(record_text);

    msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "type", "run");
    cJSON_AddNumberToObject(msg, "job", (double)j->id);
    cJSON_AddItemToObject(msg, "request", run_request_to_json(&j->req));
    out = slot_exchange(w, j->id, msg, -1, &reply, &reply_fd, how, sizeof how);
    cJSON_Delete(msg);
    if (out != EXCHANGE_REPLY) {
        pool_lost_message(w, out, how, text, sizeof text);
        log_warn("worker %s: %s", w->name, text);
        job_failed(j, out == EXCHANGE_TIMEOUT ? "timeout" : pool_is_stopping() ? "server_stopping" : "worker_crashed",
                   text);
        return;
    }

    type = cJSON_GetObjectItem(reply, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "result") == 0 &&
        cJSON_IsObject(cJSON_GetObjectItem(reply, "result"))) {
        cJSON *result = cJSON_DetachItemFromObject(reply, "result");
        if (reply_fd >= 0) { /* the GPU worker wants its output checked by the fp64 reference */
            cJSON *verify;
            if (w == &pool_slots[0]) {
                verify = cJSON_CreateObject();
                cJSON_AddStringToObject(verify, "error", "the cpu device cannot verify its own output");
            } else {
                verify = pool_verify_on_cpu(j, reply_fd);
            }
            close(reply_fd);
            reply_fd = -1;
            pool_set(result, "verify", verify);
        }
        job_done(j, result);
        cJSON_Delete(result);
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "error") == 0) {
        cJSON *body = NULL;
        int http, detached;
        pthread_mutex_lock(&pool_mu); /* a waiter may detach the job meanwhile (its client left) */
        detached = j->detached;
        pthread_mutex_unlock(&pool_mu);
        http = detached ? -1 : pool_refusal_from_reply(reply, &body); /* async: keep it, failed */
        if (http > 0) {
            job_end_hook(j, POOL_RUN_REFUSED);
            pthread_mutex_lock(&pool_mu);
            store_delete_run(j->id);
            cJSON_Delete(j->record);
            j->record = NULL;
            job_finish_locked(j, http, body);
            pthread_mutex_unlock(&pool_mu);
        } else { /* async: the worker's code stays (e.g. 410 "gone": a resident input's worker restarted) */
            const cJSON *e = cJSON_GetObjectItem(reply, "error");
            const cJSON *m = cJSON_GetObjectItem(e, "message"), *code = cJSON_GetObjectItem(e, "code");
            job_failed(j, cJSON_IsString(code) && code->valuestring[0] ? code->valuestring : "job_failed",
                       cJSON_IsString(m) ? m->valuestring : "the worker reported an error");
        }
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "failed") == 0) {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        int fatal = cJSON_IsTrue(cJSON_GetObjectItem(reply, "fatal"));
        if (fatal) {
            int status = slot_lose_worker(w, 0); /* it exits by itself (status 3) */
            pool_describe_status(status, how, sizeof how);
            log_warn("worker %s: fatal error; it %s; restarting", w->name, how);
        }
        job_failed(j, "job_failed", cJSON_IsString(m) ? m->valuestring : "the job failed");
    } else {
        slot_lose_worker(w, SIGKILL);
        snprintf(text, sizeof text, "worker %s sent an unexpected answer; killed and restarted", w->name);
        job_failed(j, "worker_crashed", text);
    }
    if (reply_fd >= 0) close(reply_fd);
    cJSON_Delete(reply);
}

static void slot_run_tensor(worker_slot *w, pool_job *j); /* resident tensors, at the end */

static void *slot_dispatcher(void *arg)
{
    worker_slot *w = arg;
    int failures = 0;

    for (;;) {
        pool_job *j;
        char why[512];

        pthread_mutex_lock(&pool_mu);
        if (pool_stopping) {
            pthread_mutex_unlock(&pool_mu);
            break;
        }
        if (w->state == SLOT_DOWN) { /* nothing more to do until pool_stop */
            pthread_cond_wait(&w->work_cond, &pool_mu);
            pthread_mutex_unlock(&pool_mu);
            continue;
        }
        if (w->sock < 0 && pool_draining && !w->head) { /* stopping: a restart would serve nothing */
            pthread_cond_wait(&w->work_cond, &pool_mu);
            pthread_mutex_unlock(&pool_mu);
            continue;
        }
        if (w->sock < 0) { /* (re)start the worker */
            pthread_mutex_unlock(&pool_mu);
            if (slot_spawn(w, why, sizeof why) == 0) {
                failures = 0;
                pthread_mutex_lock(&pool_mu);
                w->state = SLOT_UP;
                w->reason[0] = '\0';
                pthread_cond_broadcast(&w->state_cond);
                pthread_mutex_unlock(&pool_mu);
                log_info("worker %s: up", w->name);
                continue;
            }
            failures++;
            log_warn("worker %s: hello failed (%d of %d): %s", w->name, failures, POOL_HELLO_TRIES, why);
            pthread_mutex_lock(&pool_mu);
            snprintf(w->reason, sizeof w->reason, "%s", why);
            if (failures >= POOL_HELLO_TRIES && !pool_stopping) {
                char message[700];
                w->state = SLOT_DOWN;
                snprintf(message, sizeof message, "device %s is down: %s", w->name, why);
                log_error("worker %s: marked down after %d failed hellos: %s", w->name, failures, why);
                slot_refuse_queue_locked(w, "no_device", message);
                pthread_cond_broadcast(&w->state_cond);
            } else if (!pool_stopping) {
                struct timespec until = pool_deadline(POOL_RETRY_PAUSE_MS);
                pthread_cond_timedwait(&w->work_cond, &pool_mu, &until);
            }
            pthread_mutex_unlock(&pool_mu);
            continue;
        }
        while (!w->head && !pool_stopping) pthread_cond_wait(&w->work_cond, &pool_mu);
        if (pool_stopping) {
            pthread_mutex_unlock(&pool_mu);
            break;
        }
        j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        j->next = NULL;
        if (j->kind == JOB_RUN) {
            w->queued--;
            w->current_run = j->id;
            w->current_req = j->req;
        }
        w->running = 1;
        pthread_mutex_unlock(&pool_mu);

        if (j->kind == JOB_VERIFY)
            slot_run_verify(w, j);
        else if (j->kind == JOB_TENSOR)
            slot_run_tensor(w, j);
        else
            slot_run_job(w, j);
        pthread_mutex_lock(&pool_mu);
        w->running = 0;
        w->current_run = 0;
        pthread_mutex_unlock(&pool_mu);
    }

    /* Stopping: end what still waits (pool_quiesce took the runs already), end the child. */
    pthread_mutex_lock(&pool_mu);
    slot_shutdown_queue_locked(w, 1);
    pthread_mutex_unlock(&pool_mu);
    if (w->pid > 0) {
        int status = pool_reap(w->pid, SIGTERM, POOL_STOP_GRACE_MS);
        char how[128];
        if (status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
            snprintf(how, sizeof how, "ended on SIGTERM");
        else
            pool_describe_status(status, how, sizeof how);
        log_info("worker %s: stopped; it %s", w->name, how);
    }
    pthread_mutex_lock(&pool_mu);
    if (w->sock >= 0) close(w->sock);
    w->sock = -1;
    w->pid = 0;
    w->state = SLOT_DOWN;
    snprintf(w->reason, sizeof w->reason, "stopped");
    pthread_cond_broadcast(&w->state_cond);
    pthread_mutex_unlock(&pool_mu);
    return NULL;
}

/* ------------------------------------------------------------------------ public API -- */

/* Which GPU ordinals to serve, from settings.devices ("all", "none", "0,2"); an ordinal
 * the probe did not find is logged and skipped. Fills ordinals (at most max); returns n. */
static int pool_choose_gpus(const char *devices, int count, int *ordinals, int max)
{
    char list[128], *save = NULL, *tok;
    int n = 0, i;

    if (strcmp(devices, "none") == 0) return 0;
    if (strcmp(devices, "all") == 0 || devices[0] == '\0') {
        for (i = 0; i < count && n < max; i++) ordinals[n++] = i;
        return n;
    }
    snprintf(list, sizeof list, "%s", devices);
    for (tok = strtok_r(list, ", ", &save); tok && n < max; tok = strtok_r(NULL, ", ", &save)) {
        char *end = NULL;
        long k = strtol(tok, &end, 10);
        int dup = 0;
        if (!end || *end || k < 0) {
            log_warn("devices: %s is not a GPU ordinal; skipped", tok);
            continue;
        }
        if (k >= count) {
            log_warn("devices: GPU %ld requested but only %d found; skipped", k, count);
            continue;
        }
        for (i = 0; i < n; i++) dup |= ordinals[i] == (int)k;
        if (!dup) ordinals[n++] = (int)k;
    }
    return n;
}

int pool_start(const settings *s, char *err, size_t err_len)
{
    int gpus = 0, ordinals[64], n_gpu, i;
    char why[512] = "";
    long long deadline;
    worker_slot *slots;

    pthread_mutex_lock(&pool_mu);
    if (pool_started) {
        pthread_mutex_unlock(&pool_mu);
        snprintf(err, err_len, "the pool is already started");
        return -1;
    }
    pool_settings = *s;
    pthread_mutex_unlock(&pool_mu);
    if (pool_find_worker(err, err_len) != 0) return -1;

    if (strcmp(s->devices, "none") != 0) {
        gpus = pool_probe(why, sizeof why);
        if (gpus > 0)
            log_info("probe: %d GPU(s)", gpus);
        else
            log_warn("probe: no GPU: %s; serving the cpu device only", why);
    }
    n_gpu = pool_choose_gpus(s->devices, gpus, ordinals, (int)(sizeof ordinals / sizeof ordinals[0]));

    slots = calloc((size_t)n_gpu + 1, sizeof *slots);
    if (!slots) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    for (i = 0; i <= n_gpu; i++) {
        worker_slot *w = &slots[i];
        if (i == 0)
            snprintf(w->name, sizeof w->name, "cpu");
        else
            snprintf(w->name, sizeof w->name, "cuda:%d", ordinals[i - 1]);
        w->sock = -1;
        w->state = SLOT_STARTING;
        pthread_cond_init(&w->work_cond, NULL);
        pthread_cond_init(&w->state_cond, NULL);
    }

    pthread_mutex_lock(&pool_mu);
    pool_slots = slots; /* an earlier pool's slots are left allocated: see the top comment */
    pool_nslots = n_gpu + 1;
    pool_stopping = 0;
    pool_draining = 0;
    pool_started = 1;
    for (i = 0; i < pool_nslots; i++) {
        int rc = pthread_create(&pool_slots[i].thread, NULL, slot_dispatcher, &pool_slots[i]);
        if (rc != 0) {
            pthread_mutex_unlock(&pool_mu);
            snprintf(err, err_len, "pthread_create: %s", strerror(rc));
            pool_stop();
            return -1;
        }
        pool_slots[i].thread_started = 1;
    }

    /* Wait for the hellos (a slot that keeps failing is down within 3 tries, but a slow one
     * is not waited for longer than one hello limit: readyz says when it is up). */
    deadline = pool_now_ms() + POOL_HELLO_LIMIT_MS + 5000;
    for (;;) {
        int starting = 0;
        struct timespec until = pool_deadline(200);
        for (i = 0; i < pool_nslots; i++) starting += pool_slots[i].state == SLOT_STARTING;
        if (!starting || pool_now_ms() >= deadline) break;
        pthread_cond_timedwait(&pool_slots[0].state_cond, &pool_mu, &until);
    }
    if (pool_slots[0].state == SLOT_DOWN) {
        snprintf(err, err_len, "the cpu worker did not start: %s", pool_slots[0].reason);
        pthread_mutex_unlock(&pool_mu);
        pool_stop();
        return -1;
    }
    for (i = 0; i < pool_nslots; i++)
        log_info("pool: %s %s%s%s", pool_slots[i].name, slot_state_names[pool_slots[i].state],
                 pool_slots[i].reason[0] ? ": " : "", pool_slots[i].reason);
    pthread_mutex_unlock(&pool_mu);
    return 0;
}

void pool_quiesce(void)
{
    int i;

    pthread_mutex_lock(&pool_mu);
    if (pool_started && !pool_draining) {
        pool_draining = 1;
        for (i = 0; i < pool_nslots; i++) slot_shutdown_queue_locked(&pool_slots[i], 0);
        log_info("pool: stopping: queued runs ended, running ones go on");
    }
    pthread_mutex_unlock(&pool_mu);
}

int pool_runs_running(void)
{
    int i, n = 0;

    pthread_mutex_lock(&pool_mu);
    for (i = 0; i < pool_nslots; i++) n += pool_slots[i].current_run > 0;
    pthread_mutex_unlock(&pool_mu);
    return n;
}

void pool_stop(void)
{
    int i, n;

    pool_quiesce();
    pthread_mutex_lock(&pool_mu);
    if (!pool_started || pool_stopping) {
        pthread_mutex_unlock(&pool_mu);
        return;
    }
    pool_stopping = 1;
    n = pool_nslots;
    for (i = 0; i < n; i++) {
        worker_slot *w = &pool_slots[i];
        /* Wakes a dispatcher blocked on a hello: it reads EOF. A running job is let finish
         * and stored (SIGTERM finishes the running job): its dispatcher sees pool_stopping
         * once it ends, and the job's own job_timeout_s bounds the wait. */
        if (w->sock >= 0 && !w->running) shutdown(w->sock, SHUT_RDWR);
        pthread_cond_broadcast(&w->work_cond);
        pthread_cond_broadcast(&w->state_cond);
    }
    pthread_mutex_unlock(&pool_mu);

    for (i = 0; i < n; i++)
        if (pool_slots[i].thread_started) pthread_join(pool_slots[i].thread, NULL);

    pthread_mutex_lock(&pool_mu);
    for (i = 0; i < n; i++) pool_slots[i].thread_started = 0;
    pool_started = 0;
    pool_draining = 0;
    pthread_mutex_unlock(&pool_mu);
    log_info("pool: stopped");
}

int pool_ready(void)
{
    int i, ready;

    pthread_mutex_lock(&pool_mu);
    ready = pool_started && !pool_stopping && !pool_draining && pool_nslots > 0;
    for (i = 0; ready && i < pool_nslots; i++) ready = pool_slots[i].state == SLOT_UP;
    pthread_mutex_unlock(&pool_mu);
    return ready;
}

cJSON *pool_devices_json(void)
{
    cJSON *out = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(out, "devices");
    int i;

    cJSON_AddItemToObject(out, "build", build_info_json());
    pthread_mutex_lock(&pool_mu);
    for (i = 0; i < pool_nslots; i++) {
        worker_slot *w = &pool_slots[i];
        cJSON *d = w->device ? cJSON_Duplicate(w->device, 1) : cJSON_CreateObject();
        if (!cJSON_GetObjectItem(d, "id")) cJSON_AddStringToObject(d, "id", w->name);
        pool_set(d, "state", cJSON_CreateString(slot_state_names[w->state]));
        pool_set(d, "restarts", cJSON_CreateNumber(w->restarts));
        if (w->state != SLOT_UP && w->reason[0]) pool_set(d, "error", cJSON_CreateString(w->reason));
        cJSON_AddItemToArray(list, d);
    }
    pthread_mutex_unlock(&pool_mu);
    return out;
}

const char *pool_default_device(int on_cpu)
{
    const char *name = NULL;
    int i;

    pthread_mutex_lock(&pool_mu);
    for (i = 0; i < pool_nslots && !name; i++) {
        worker_slot *w = &pool_slots[i];
        if (on_cpu ? i == 0 : (i > 0 && w->state != SLOT_DOWN)) name = w->name;
    }
    pthread_mutex_unlock(&pool_mu);
    return name;
}

int pool_device_cc(const char *device)
{
    worker_slot *w;
    const cJSON *cc;
    int result = -1;
    struct timespec until = pool_deadline(POOL_HELLO_LIMIT_MS);

    if (device && strcmp(device, "cpu") == 0) return 0;
    pthread_mutex_lock(&pool_mu);
    w = pool_find_slot(device);
    /* A request right after start (or after a restart) waits for the hello it needs. */
    while (w && w->state == SLOT_STARTING && !pool_stopping)
        if (pthread_cond_timedwait(&w->state_cond, &pool_mu, &until) == ETIMEDOUT) break;
    if (w && w->state == SLOT_UP && w->device) {
        cc = cJSON_GetObjectItem(w->device, "compute_capability");
        if (cJSON_IsString(cc)) {
            int major = 0, minor = 0;
            if (sscanf(cc->valuestring, "%d.%d", &major, &minor) >= 1) result = major * 10 + minor;
        } else if (cJSON_IsNumber(cc)) {
            double v = cc->valuedouble;
            result = v >= 10 && v == (int)v ? (int)v : (int)(v * 10 + 0.5); /* 9.0 or 90 */
        }
    }
    pthread_mutex_unlock(&pool_mu);
    return result;
}

static int pool_position_locked(const worker_slot *w, const pool_job *j);

/* A run refused before it became a job: its end hook, on the caller's thread (no lock). */
static void pool_end_unqueued(const run_request *r, pool_run_end_fn on_end)
{
    if (on_end) on_end(r, POOL_RUN_REFUSED, NULL, -1);
}

/* Unlink j from w's queue. Under pool_mu; j must be in it. */
static void slot_unlink_locked(worker_slot *w, pool_job *j)
{
    pool_job **link;

    for (link = &w->head; *link != j; link = &(*link)->next) {
    }
    *link = j->next;
    if (w->tail == j) {
        pool_job *last = w->head;
        while (last && last->next) last = last->next;
        w->tail = last;
    }
    j->next = NULL;
    if (j->kind == JOB_RUN) w->queued--;
}

/* The synchronous caller's wait for j's end (pool_mu held, and held again on return).
 * With gone, its client is asked every POOL_CLIENT_POLL_MS whether it left: while j waits
 * in the queue, j is cancelled (stored "cancelled", client_gone) and its slot freed at once;
 * while it runs, it goes on detached and its record will say client_gone. Returns 1 when
 * the end was handed over (j->http_status, j->response; the caller frees j), 0 when j was
 * detached (its end frees it; *response is set here). */
static int pool_wait_sync_locked(worker_slot *w, pool_job *j, pool_client_gone_fn gone, const void *client,
                                 cJSON **response, int *status)
{
    char message[200];

    while (!j->finished) {
        struct timespec until;
        int left;

        if (!gone) {
            pthread_cond_wait(&j->cond, &pool_mu);
            continue;
        }
        until = pool_deadline(POOL_CLIENT_POLL_MS);
        pthread_cond_timedwait(&j->cond, &pool_mu, &until);
        if (j->finished || j->ending) continue;
        pthread_mutex_unlock(&pool_mu); /* the poll is a syscall: not under the lock */
        left = gone(client);
        pthread_mutex_lock(&pool_mu);
        if (!left || j->finished || j->ending) continue;

        __atomic_store_n(&j->client_gone, 1, __ATOMIC_RELEASE);
        if (pool_position_locked(w, j) > 0) { /* still waiting: it never runs */
            slot_unlink_locked(w, j);
            j->ending = 1;
            pthread_mutex_unlock(&pool_mu);
            snprintf(message, sizeof message, "run %lld was cancelled while queued: its client closed the connection",
                     j->id);
            job_record_cancelled(j, "client_gone", message);
            log_info("run %lld cancelled while queued on %s: its client left", j->id, w->name);
            pthread_mutex_lock(&pool_mu);
            j->http_status = 409;
            j->response = pool_error_body("client_gone", message, NULL);
            cJSON_Delete(j->record);
            j->record = NULL;
            j->finished = 1;
            continue;
        }
        /* Running: let it finish and be stored; nobody waits for it any more. */
        j->detached = 1;
        log_info("run %lld: its client left while it ran on %s; it finishes unattended", j->id, w->name);
        snprintf(message, sizeof message, "run %lld goes on without its client (GET /v1/runs/%lld)", j->id, j->id);
        *status = 409;
        *response = pool_error_body("client_gone", message, NULL);
        return 0;
    }
    *status = j->http_status;
    *response = j->response;
    return 1;
}

/* Queue r (pool_run). detach: answer 202 once it is queued. on_end: its end hook or NULL.
 * gone/client: the synchronous caller's client (pool_run_watched), NULL when none. */
static int pool_submit(const run_request *r, cJSON **response, int detach, pool_run_end_fn on_end,
                       pool_client_gone_fn gone, const void *client)
{
    worker_slot *w;
    pool_job *j;
    cJSON *record, *device;
    char created[40], message[700], *text;
    long long macs = run_request_macs(r);
    int status = 500;

    *response = NULL;
    pthread_mutex_lock(&pool_mu);
    /* A forward on the cpu costs seconds per 10^10 MACs: a run past the limit would hold the
     * only cpu worker (verifies included) for minutes. Refused before it queues. */
    if (!strcmp(r->device, "cpu") && pool_settings.cpu_max_macs > 0 && macs > pool_settings.cpu_max_macs) {
        long long limit = pool_settings.cpu_max_macs;
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        snprintf(message, sizeof message,
                 "this run costs about %lld multiply-accumulates per forward (batch*heads*seq_q*seq_kv*head_dim), "
                 "over the cpu device's limit cpu_max_macs=%lld; run it on a GPU or make it smaller",
                 macs, limit);
        *response = pool_error_body("too_costly", message, NULL);
        return 422;
    }
    if (!pool_started || pool_stopping || pool_draining) {
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        *response = pool_error_body("shutting_down", "the server is stopping; it takes no new runs", NULL);
        return 503;
    }
    w = pool_find_slot(r->device);
    if (!w || w->state == SLOT_DOWN) {
        if (!w)
            snprintf(message, sizeof message, "device %s is not served here (see GET /v1/device)",
                     r->device[0] ? r->device : "(none)");
        else
            snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        *response = pool_error_body("no_device", message, "device");
        return 503;
    }
    if (w->queued >= pool_settings.queue_depth) {
        snprintf(message, sizeof message, "the queue of device %s is full (queue_depth=%d jobs waiting); retry later",
                 w->name, pool_settings.queue_depth);
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        *response = pool_error_body("queue_full", message, NULL);
        return 429;
    }
    w->queued++; /* reserved now, so concurrent requests cannot overfill the queue */
    device = w->device ? cJSON_Duplicate(w->device, 1) : cJSON_CreateNull();
    pthread_mutex_unlock(&pool_mu);

    j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(device);
        pthread_mutex_lock(&pool_mu);
        w->queued--;
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        *response = pool_error_body("out_of_memory", "out of memory", NULL);
        return 500;
    }
    j->kind = JOB_RUN;
    j->req = *r;
    j->fd = -1;
    j->generation = -1;
    pthread_cond_init(&j->cond, NULL);

    clock_text_now_iso(created, sizeof created);
    record = cJSON_CreateObject();
    cJSON_AddNumberToObject(record, "id", 0); /* set once the store gives the id */
    cJSON_AddStringToObject(record, "status", "queued");
    cJSON_AddStringToObject(record, "created", created);
    cJSON_AddNullToObject(record, "finished");
    cJSON_AddStringToObject(record, "backend", r->backend);
    cJSON_AddItemToObject(record, "build", build_info_json()); /* which binary made the numbers */
    cJSON_AddItemToObject(record, "params", run_request_to_json(r));
    cJSON_AddItemToObject(record, "device", device);
    text = cJSON_PrintUnformatted(record);
    j->id = text ? store_insert_run(created, r->backend, w->name, "queued", text) : -1;
    cJSON_free(text);
    if (j->id > 0) {
        cJSON_SetNumberValue(cJSON_GetObjectItem(record, "id"), (double)j->id);
        text = cJSON_PrintUnformatted(record);
        if (!text || store_update_run(j->id, "queued", text) != 0) {
            store_delete_run(j->id);
            j->id = -1;
        }
        cJSON_free(text);
    }
    if (j->id <= 0) {
        cJSON_Delete(record);
        pthread_cond_destroy(&j->cond);
        free(j);
        pthread_mutex_lock(&pool_mu);
        w->queued--;
        pthread_mutex_unlock(&pool_mu);
        pool_end_unqueued(r, on_end);
        *response = pool_error_body("store_error", "the run could not be stored", NULL);
        return 500;
    }
    j->record = record;
    j->on_end = on_end; /* from here every end of j calls it (job_end_hook) */

    pthread_mutex_lock(&pool_mu);
    if (pool_stopping || pool_draining) { /* the server began to stop while we stored */
        w->queued--;
        job_shutdown_locked(j); /* not detached yet: answered 503, row deleted */
    } else if (w->state == SLOT_DOWN) { /* it went down while we stored */
        w->queued--;
        snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        job_refuse_locked(j, 503, "no_device", message, "device");
    } else {
        if (w->tail)
            w->tail->next = j;
        else
            w->head = j;
        w->tail = j;
        pthread_cond_signal(&w->work_cond);
        if (detach) { /* from here the dispatcher (or a cancel) owns j: never touch it after unlock */
            long long id = j->id;
            int position = pool_position_locked(w, j);
            j->detached = 1;
            pthread_mutex_unlock(&pool_mu);
            *response = cJSON_CreateObject();
            cJSON_AddNumberToObject(*response, "id", (double)id);
            cJSON_AddStringToObject(*response, "status", "queued");
            cJSON_AddNumberToObject(*response, "queue_position", position);
            return 202;
        }
    }
    if (!pool_wait_sync_locked(w, j, gone, client, response, &status)) {
        pthread_mutex_unlock(&pool_mu); /* detached: the dispatcher frees j */
        return status;
    }
    pthread_mutex_unlock(&pool_mu);
    pthread_cond_destroy(&j->cond);
    free(j);
    return status;
}

/* ---------------------------------------------------------------------- async jobs -- */

int pool_run_sync(const run_request *r, cJSON **response) { return pool_submit(r, response, 0, NULL, NULL, NULL); }

int pool_run_async(const run_request *r, cJSON **response) { return pool_submit(r, response, 1, NULL, NULL, NULL); }

int pool_run(const run_request *r, pool_run_end_fn on_end, cJSON **response)
{
    return pool_submit(r, response, r->async_run ? 1 : 0, on_end, NULL, NULL);
}

int pool_run_watched(const run_request *r, pool_run_end_fn on_end, pool_client_gone_fn gone, const void *client,
                     cJSON **response)
{
    return pool_submit(r, response, r->async_run ? 1 : 0, on_end, r->async_run ? NULL : gone, client);
}

/* 1-based place of j among the runs waiting in w's queue (verify jobs do not count). */
static int pool_position_locked(const worker_slot *w, const pool_job *j)
{
    const pool_job *q;
    int n = 0;

    for (q = w->head; q; q = q->next) {
        if (q->kind != JOB_RUN) continue;
        n++;
        if (q == j) return n;
    }
    return -1;
}

/* The waiting run with this id, and its slot; NULL when none. Under pool_mu. */
static pool_job *pool_find_queued_locked(long long id, worker_slot **slot)
{
    int i;

    for (i = 0; i < pool_nslots; i++) {
        pool_job *q;
        for (q = pool_slots[i].head; q; q = q->next)
            if (q->kind == JOB_RUN && q->id == id) {
                *slot = &pool_slots[i];
                return q;
            }
    }
    return NULL;
}

int pool_queue_position(long long id)
{
    worker_slot *w = NULL;
    pool_job *j;
    int position = -1;

    pthread_mutex_lock(&pool_mu);
    j = pool_find_queued_locked(id, &w);
    if (j) position = pool_position_locked(w, j);
    pthread_mutex_unlock(&pool_mu);
    return position;
}

int pool_queue_depth(const char *device)
{
    worker_slot *w;
    int n = 0;

    pthread_mutex_lock(&pool_mu);
    w = pool_find_slot(device);
    if (w) n = w->queued;
    pthread_mutex_unlock(&pool_mu);
    return n;
}

/* 1 when run request q reads resident tensor id as q, k or v. */
static int pool_reads_tensor(const run_request *q, const char *id)
{
    return !strcmp(q->q_tensor, id) || !strcmp(q->k_tensor, id) || !strcmp(q->v_tensor, id);
}

int pool_runs_reading_tensor(const char *tensor_id, long long *ids, int max)
{
    int i, n = 0;

    if (!tensor_id || !tensor_id[0]) return 0;
    pthread_mutex_lock(&pool_mu);
    for (i = 0; i < pool_nslots; i++) {
        const worker_slot *w = &pool_slots[i];
        const pool_job *q;
        if (w->current_run > 0 && pool_reads_tensor(&w->current_req, tensor_id)) {
            if (n < max) ids[n] = w->current_run;
            n++;
        }
        for (q = w->head; q; q = q->next)
            if (q->kind == JOB_RUN && pool_reads_tensor(&q->req, tensor_id)) {
                if (n < max) ids[n] = q->id;
                n++;
            }
    }
    pthread_mutex_unlock(&pool_mu);
    return n;
}

int pool_cancel(long long id)
{
    worker_slot *w = NULL;
    pool_job *j;
    char message[160];

    pthread_mutex_lock(&pool_mu);
    j = pool_find_queued_locked(id, &w);
    if (!j) {
        pthread_mutex_unlock(&pool_mu);
        return -1;
    }
    /* Unlink it: from now on it is ours alone (neither the dispatcher nor a refusal sees it,
     * and its waiter, if any, waits for our end). */
    slot_unlink_locked(w, j);
    j->ending = 1;
    pthread_mutex_unlock(&pool_mu);

    snprintf(message, sizeof message, "run %lld was cancelled (DELETE /v1/runs/%lld) while it was queued", id, id);
    job_record_cancelled(j, "cancelled", message); /* what it held (resident tensors) is released */
    log_info("run %lld cancelled while queued on %s", id, w->name);

    pthread_mutex_lock(&pool_mu);
    if (j->detached) {
        job_finish_locked(j, 200, j->record); /* frees both */
    } else { /* a synchronous caller waits for it: tell it why */
        cJSON_Delete(j->record);
        j->record = NULL;
        job_finish_locked(j, 409, pool_error_body("cancelled", message, NULL));
    }
    pthread_mutex_unlock(&pool_mu);
    return 0;
}

/* ---------------------------------------------------------------- resident tensors -- */

/* One tensor_* exchange, on the slot's dispatcher like any job. The answer (tensor_result,
 * or the worker's error/failed message) goes to the waiter untouched; a lost worker is a
 * 500 with the reason. */
static void slot_run_tensor(worker_slot *w, pool_job *j)
{
    cJSON *reply = NULL;
    char how[160], text[600];
    int reply_fd = -1, status = 200;
    exchange_outcome out;

    pthread_mutex_lock(&pool_mu);
    j->generation = w->restarts;
    pthread_mutex_unlock(&pool_mu);
    out = slot_exchange(w, j->id, j->msg, j->fd, &reply, &reply_fd, how, sizeof how);
    if (out != EXCHANGE_REPLY) {
        pool_lost_message(w, out, how, text, sizeof text);
        log_warn("worker %s: %s", w->name, text);
        reply = pool_error_body("worker_crashed", text, "");
        status = 500;
    } else {
        const cJSON *type = cJSON_GetObjectItem(reply, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "failed") == 0 &&
            cJSON_IsTrue(cJSON_GetObjectItem(reply, "fatal")))
            slot_lose_worker(w, 0);
    }
    pthread_mutex_lock(&pool_mu);
    j->reply_fd = reply_fd;
    job_finish_locked(j, status, reply);
    pthread_mutex_unlock(&pool_mu);
}

static long long pool_tensor_job_ids; /* negative job ids: apart from the store's run ids */

int pool_tensor_op(const char *device, cJSON *msg, int fd, cJSON **reply, int *reply_fd, int *generation)
{
    worker_slot *w;
    pool_job j;
    char message[700];

    *reply = NULL;
    *reply_fd = -1;
    *generation = -1;
    memset(&j, 0, sizeof j);
    j.kind = JOB_TENSOR;
    j.msg = msg;
    j.fd = fd;
    j.reply_fd = -1;
    pthread_cond_init(&j.cond, NULL);

    pthread_mutex_lock(&pool_mu);
    j.id = -(++pool_tensor_job_ids);
    w = (pool_started && !pool_stopping) ? pool_find_slot(device) : NULL;
    if (!pool_started || pool_stopping) {
        job_refuse_locked(&j, 503, "shutting_down", "the server is stopping", NULL);
    } else if (!w || w->state == SLOT_DOWN) {
        if (!w)
            snprintf(message, sizeof message, "device %s is not served here (see GET /v1/device)", device);
        else
            snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        job_refuse_locked(&j, 503, "no_device", message, "device");
    } else {
        if (cJSON_GetObjectItem(msg, "job"))
            cJSON_ReplaceItemInObject(msg, "job", cJSON_CreateNumber((double)j.id));
        else
            cJSON_AddNumberToObject(msg, "job", (double)j.id);
        if (w->tail)
            w->tail->next = &j;
        else
            w->head = &j;
        w->tail = &j;
        pthread_cond_signal(&w->work_cond);
    }
    while (!j.finished) pthread_cond_wait(&j.cond, &pool_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_cond_destroy(&j.cond);
    *reply = j.response;
    *reply_fd = j.reply_fd;
    *generation = j.generation;
    return j.http_status;
}

int pool_device_generation(const char *device)
{
    worker_slot *w;
    int g = -1;

    pthread_mutex_lock(&pool_mu);
    w = pool_find_slot(device);
    if (w && w->state != SLOT_DOWN) g = w->restarts;
    pthread_mutex_unlock(&pool_mu);
    return g;
}

cJSON *pool_device_json(const char *device)
{
    worker_slot *w;
    cJSON *d = NULL;

    pthread_mutex_lock(&pool_mu);
    w = pool_find_slot(device);
    if (w && w->device) d = cJSON_Duplicate(w->device, 1);
    pthread_mutex_unlock(&pool_mu);
    return d;
}

cJSON *pool_device_variants(const char *device)
{
    worker_slot *w;
    cJSON *d = NULL;

    pthread_mutex_lock(&pool_mu);
    w = pool_find_slot(device);
    if (w && cJSON_IsArray(w->variants)) d = cJSON_Duplicate(w->variants, 1);
    pthread_mutex_unlock(&pool_mu);
    return d;
}
