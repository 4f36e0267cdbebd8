/* main.c — the attnd executable: the front (HTTP, queues, store). It links no CUDA; the
 * pool starts attnd-worker (server/worker/main.c) beside it for the cpu device and each GPU.
 *
 * The front blocks SIGTERM and SIGINT before any thread starts, so every thread inherits
 * the blocked set and the main thread alone takes them, with sigwait, to shut down in
 * order: stop accepting connections, end the queued runs (their clients get 503
 * shutting_down at once), let the requests in flight be answered (MAIN_DRAIN_S, longer
 * while a run they wait for still runs; a second signal exits at once), stop HTTP, stop the
 * workers, close the store.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "server/front/http/auth.h"
#include "server/front/batch/batch.h"
#include "common/build_info.h"
#include "server/front/http/http.h"
#include "common/log.h"
#include "server/front/install_path.h"
#include "server/front/metrics.h"
#include "server/front/pool/node_heartbeat.h"
#include "server/front/pool/pool.h"
#include "common/settings.h"
#include "common/variant_info.h"
#include "server/front/store/store.h"
#include "server/front/routes/routes.h"
#include "server/front/studies/study.h"
#include "server/front/tensors/tensor_table.h"
#include "server/front/tensors/tensors.h"

/* How long a stopping front waits for requests in flight to be answered; while a run is
 * still running its client waits on, up to job_timeout_s plus MAIN_RUN_GRACE_S (the kill of
 * a job that overstays and the store of its end). */
#define MAIN_DRAIN_S 30
#define MAIN_RUN_GRACE_S 5


static int main_front(int argc, char **argv)
{
    static settings s; /* http and the pool keep pointers to it until exit */
    sigset_t stop_signals;
    char err[512];
    int rc, sig = 0;

    rc = settings_load(&s, argc, argv, err, sizeof err);
    if (rc == 1) return 0;
    if (rc != 0) {
        fprintf(stderr, "attnd: %s\n", err);
        return 2;
    }
    log_init("front", s.log_level);
    variant_info_offer_pending(s.pending_features);
    {
        char line[512];
        build_info_line(line, sizeof line);
        log_info("%s", line);
    }

    /* Before any thread exists (pool and http start threads): they inherit this mask. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    rc = pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (rc != 0) {
        log_error("pthread_sigmask: %s", strerror(rc));
        return 1;
    }
    /* A client that hangs up mid-answer must not kill the front: writes then fail with EPIPE. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        log_error("signal(SIGPIPE): %s", strerror(errno));
        return 1;
    }

    if (auth_load(&s, err, sizeof err) != 0) { /* a bad token file stops the start, like a bad setting */
        fprintf(stderr, "attnd: %s\n", err);
        return 2;
    }
    if (install_path_load_presets(s.models_file, err, sizeof err) != 0) {
        fprintf(stderr, "attnd: %s\n", err);
        return 2;
    }
    if (store_open_settings(&s, err, sizeof err) != 0) {
        log_error("store: %s", err);
        return 1;
    }
    tensor_table_set_max_entries(s.max_tensors);
    pool_on_worker_restart(tensors_worker_restarted); /* a lost worker's tensors are gone */
    pool_set_worker_flags(argc - 1, argv + 1);         /* workers load the same settings */
    if (pool_start(&s, err, sizeof err) != 0) {
        log_error("workers: %s", err);
        store_close();
        return 1;
    }
    if (node_heartbeat_start(s.heartbeat_s) != 0) {
        pool_stop();
        store_close();
        return 1;
    }
    if (studies_start() != 0) {
        node_heartbeat_stop();
        pool_stop();
        store_close();
        return 1;
    }
    http_set_request_observer(metrics_http_request); /* every answered request is counted */
    if (http_start(&s, &routes_table, err, sizeof err) != 0) {
        log_error("http: %s", err);
        studies_stop();
        node_heartbeat_stop();
        pool_stop();
        store_close();
        return 1;
    }
    log_info("serving (config %s, data_dir %s, devices %s)", s.config[0] ? s.config : "none", s.data_dir,
             s.devices);

    for (;;) {
        rc = sigwait(&stop_signals, &sig);
        if (rc == 0) break;
        if (rc != EINTR) {
            log_error("sigwait: %s; stopping", strerror(rc));
            break;
        }
    }
    /* Stop accepting; end the queued runs now, so that a synchronous client waiting for one
     * hears 503 at once and the drain below never waits for runs that have not started. The
     * running jobs go on: their clients get their answers. A second signal cuts it short. */
    http_quiesce();
    studies_quiesce(); /* the queued studies end; the running one stops after its run in progress */
    pool_quiesce();
    if (http_in_flight() > 0) {
        struct timespec tick = {0, 100 * 1000 * 1000};
        int waited_ms = 0, run_limit_ms = (s.job_timeout_s + MAIN_RUN_GRACE_S) * 1000;
        log_info("stopping on %s: waiting up to %d s for %d request(s) in flight (signal again to exit at once)",
                 sig ? strsignal(sig) : "error", MAIN_DRAIN_S, http_in_flight());
        while (http_in_flight() > 0 &&
               (waited_ms < MAIN_DRAIN_S * 1000 || (pool_runs_running() > 0 && waited_ms < run_limit_ms))) {
            if (sigtimedwait(&stop_signals, NULL, &tick) > 0) {
                /* The operator insists. The database stays consistent (SQLite, WAL): the
                 * next start marks the unfinished runs failed; workers die with us. */
                log_warn("second signal: exiting now, %d request(s) unanswered", http_in_flight());
                _exit(1);
            }
            waited_ms += 100;
        }
    } else {
        log_info("stopping on %s", sig ? strsignal(sig) : "error");
    }
    http_stop();
    studies_stop(); /* its run in progress has ended or ends within job_timeout_s */
    node_heartbeat_stop();
    pool_stop();
    store_close();
    log_info("stopped");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        char line[512];
        build_info_line(line, sizeof line);
        printf("%s\n", line);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "batch") == 0) return batch_main(argc, argv); /* a plan, no listener */
    return main_front(argc, argv);
}
