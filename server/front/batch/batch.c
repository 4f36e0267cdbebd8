/* batch.c — `attnd batch PLAN.json [--out FILE] [settings flags]` (batch.h, docs/plan.md).
 *
 * The server without its listener: the same settings, the same pool of workers (pool.h) and
 * the same store, so a batch run is measured, verified and recorded exactly as POST /v1/runs
 * would do it, and shows up in GET /v1/runs of a server started later on the same store.
 * The runs go one after another through pool_run_sync; each final record is one line of
 * JSON Lines output, written and flushed before the next run starts, so whatever stops the
 * batch leaves complete lines behind.
 *
 * Signals: SIGTERM and SIGINT are blocked before any thread starts (the pool's threads
 * inherit the mask) and taken by one thread with sigwait, which only raises a flag: the run
 * in progress finishes and is written, then the batch stops with 128 + the signal, as a
 * shell reports a process killed by it. A second signal exits at once.
 */
#include "server/front/batch/batch.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/front/install_path.h"
#include "common/settings.h"
#include "common/variant_info.h"
#include "server/front/batch/batch_plan.h"
#include "server/front/batch/batch_summary.h"
#include "server/front/pool/node_heartbeat.h"
#include "server/front/pool/pool.h"
#include "server/front/pool/run_device.h"
#include "server/front/store/store.h"
#include "server/front/studies/study.h"

/* How one run of the plan ended, for the exit status and the progress line. */
typedef enum batch_outcome {
    BATCH_RUN_DONE,
    BATCH_RUN_VERIFY_FAILED, /* done, but its output is not the reference's */
    BATCH_RUN_FAILED,        /* it ran and broke: stored "failed" */
    BATCH_RUN_REFUSED        /* it never ran (unsupported, no device, …): not stored */
} batch_outcome;

typedef struct batch_args {
    const char *plan_path;
    const char *out_path;  /* NULL: stdout */
    char **settings_argv;  /* argv[0] and the settings flags; lives until exit (the workers' argv) */
    int settings_argc;
} batch_args;

/* The first SIGTERM/SIGINT taken (0: none yet); written by the signal thread only. */
static int batch_stop_signal;

static void batch_usage(FILE *out)
{
    fprintf(out,
            "usage: attnd batch PLAN.json [--out FILE] [settings flags]\n"
            "\n"
            "Runs every run of PLAN.json (docs/plan.md) on this machine's devices, one after another,\n"
            "with the server's workers and store, and writes each final run record as one JSON line\n"
            "to stdout (or FILE). Progress goes to stderr. The settings flags are attnd's (attnd --help),\n"
            "e.g. --devices 0 --data-dir DIR --store postgresql://...\n"
            "\n"
            "Exit status: 0 every run done and verified; 1 a run failed, was refused or failed verify\n"
            "(the others still ran); 2 bad flags or a bad plan (nothing ran); 130/143 stopped by\n"
            "SIGINT/SIGTERM after the run in progress.\n");
}

/* Split argv (argv[1] == "batch") into the plan, --out and the settings flags. 0; 1 for
 * --help (printed); -1 with err. */
static int batch_parse_args(int argc, char **argv, batch_args *a, char *err, size_t err_len)
{
    int i;

    memset(a, 0, sizeof *a);
    a->settings_argv = calloc((size_t)argc + 1, sizeof *a->settings_argv);
    if (!a->settings_argv) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    a->settings_argv[a->settings_argc++] = argv[0];
    for (i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            batch_usage(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) {
                snprintf(err, err_len, "--out needs a file name");
                return -1;
            }
            a->out_path = argv[++i];
        } else if (!strncmp(argv[i], "--out=", 6)) {
            a->out_path = argv[i] + 6;
        } else if (i == 2 && argv[i][0] != '-') {
            /* Only right after "batch": a settings flag's value (--data-dir DIR) is never
             * taken for the plan. */
            a->plan_path = argv[i];
        } else {
            a->settings_argv[a->settings_argc++] = argv[i];
        }
    }
    if (!a->plan_path) {
        snprintf(err, err_len, "no plan: usage: attnd batch PLAN.json [--out FILE] [settings flags]");
        return -1;
    }
    if (a->out_path && !a->out_path[0]) {
        snprintf(err, err_len, "--out needs a file name");
        return -1;
    }
    return 0;
}


/* Take SIGTERM/SIGINT (blocked in every thread): the first one asks the batch to stop after
 * the run in progress, a second one ends the process now. */
static void *batch_signal_thread(void *arg)
{
    const sigset_t *stop_signals = arg;
    int sig;

    for (;;) {
        if (sigwait(stop_signals, &sig) != 0) continue;
        if (__atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE)) {
            log_warn("second %s: exiting now; the lines written so far are complete", strsignal(sig));
            _exit(128 + sig);
        }
        __atomic_store_n(&batch_stop_signal, sig, __ATOMIC_RELEASE);
        log_warn("%s: stopping after the run in progress (signal again to exit at once)", strsignal(sig));
    }
    return NULL;
}

/* Block the stop signals in this thread (and so in every thread started after) and start
 * the thread that takes them. 0, or -1 with err. */
static int batch_take_signals(char *err, size_t err_len)
{
    static sigset_t stop_signals; /* the signal thread reads it until exit */
    pthread_t tid;
    int rc;

    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    rc = pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (rc == 0) rc = pthread_create(&tid, NULL, batch_signal_thread, &stop_signals);
    if (rc == 0) rc = pthread_detach(tid);
    if (rc != 0) {
        snprintf(err, err_len, "cannot take SIGTERM/SIGINT: %s", strerror(rc));
        return -1;
    }
    /* An output pipe closed by its reader must not kill the batch: writes fail with EPIPE. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        snprintf(err, err_len, "signal(SIGPIPE): %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* The line of a run refused before it ran: its parameters and the error the server would
 * have answered, with that answer's HTTP status. Takes error_body ({"error":…}). */
static cJSON *batch_refusal_line(const run_request *r, int http_status, cJSON *error_body)
{
    cJSON *line = cJSON_CreateObject();
    cJSON *error = cJSON_DetachItemFromObjectCaseSensitive(error_body, "error");

    cJSON_Delete(error_body);
    if (!line) {
        cJSON_Delete(error);
        return NULL;
    }
    cJSON_AddStringToObject(line, "status", "refused");
    cJSON_AddNumberToObject(line, "http_status", http_status);
    cJSON_AddItemToObject(line, "params", run_request_to_json(r));
    cJSON_AddItemToObject(line, "error", error ? error : cJSON_CreateObject());
    return line;
}

/* Run r as POST /v1/runs would: check the problem, choose and check the device, run it
 * through the pool. *line: the final record, or a refusal line (caller deletes). */
static batch_outcome batch_run_one(const settings *s, run_request *r, cJSON **line)
{
    const variant_info *v = variant_info_find(r->backend); /* the plan's parse found it */
    const cJSON *verify_pass;
    cJSON *response = NULL;
    api_error e;
    int status;

    if (!v) api_fail(&e, 500, "internal", "backend", "backend %s vanished from the variants table", r->backend);
    if (!v || run_request_check(r, 0, &e) != 0 || run_device_resolve(r, v, &e) != 0) {
        *line = batch_refusal_line(r, e.status, api_error_json(&e)) /* the body POST /v1/runs answers */;
        return BATCH_RUN_REFUSED;
    }
    r->verify_cpu_max_macs = s->verify_cpu_max_macs;
    status = pool_run_sync(r, &response);
    if (status != 200 && status != 500) {
        *line = batch_refusal_line(r, status, response);
        return BATCH_RUN_REFUSED;
    }
    *line = response;
    if (status == 500) return BATCH_RUN_FAILED;
    verify_pass = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(response, "verify"), "pass");
    return cJSON_IsFalse(verify_pass) ? BATCH_RUN_VERIFY_FAILED : BATCH_RUN_DONE;
}

/* Write line and a newline, flushed: a whole line or, on a write error, -1. */
static int batch_write_line(FILE *out, const cJSON *line)
{
    char *text = line ? cJSON_PrintUnformatted(line) : NULL;
    int rc = -1;

    if (text && fprintf(out, "%s\n", text) >= 0 && fflush(out) == 0) rc = 0;
    free(text);
    return rc;
}

/* "1:02:03" or "2:03". */
static void batch_format_duration(double seconds, char *out, size_t len)
{
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;

    if (s >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, len, "%ld:%02ld", s / 60, s % 60);
}

/* What happened to a run, for its progress line: "run 17 done 1.23 ms median". */
static void batch_describe(batch_outcome outcome, const cJSON *line, char *out, size_t len)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "id");
    const cJSON *median = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(line, "timing"),
                                                           "median_us");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(line, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
    const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
    const char *code_text = cJSON_IsString(code) ? code->valuestring : "?";
    const char *message_text = cJSON_IsString(message) ? message->valuestring : "";
    long long run_id = cJSON_IsNumber(id) ? (long long)id->valuedouble : 0;
    double median_ms = cJSON_IsNumber(median) ? median->valuedouble / 1000.0 : -1.0;

    switch (outcome) {
    case BATCH_RUN_DONE:
        snprintf(out, len, "run %lld done %.3g ms median", run_id, median_ms);
        break;
    case BATCH_RUN_VERIFY_FAILED:
        snprintf(out, len, "run %lld done %.3g ms median, VERIFY FAILED", run_id, median_ms);
        break;
    case BATCH_RUN_FAILED:
        snprintf(out, len, "run %lld FAILED: %s: %.200s", run_id, code_text, message_text);
        break;
    case BATCH_RUN_REFUSED:
        snprintf(out, len, "REFUSED: %s: %.200s", code_text, message_text);
        break;
    }
}

/* What the runs of a batch add up to as they go: for the progress lines, the summary and the
 * exit status. */
typedef struct batch_state {
    const settings *s;
    const batch_plan *plan;
    FILE *out;
    batch_summary *summary;
    double started_s;
    int total, done, failures;
} batch_state;

/* A run ended (or was refused): its line, its progress line, the summary. */
static void batch_account(batch_state *st, const run_request *r, batch_outcome outcome, const cJSON *line,
                          const char *where)
{
    const cJSON *median = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(line, "timing"),
                                                           "median_us");
    char label[300], what[400], eta[32];
    double per_run_s;

    if (outcome != BATCH_RUN_DONE) st->failures++;
    if (batch_write_line(st->out, line) != 0) {
        log_error("cannot write the line of run %d of %d: %s", st->done + 1, st->total, strerror(errno));
        st->failures++;
    }
    st->done++;
    batch_plan_label(r, label, sizeof label);
    batch_summary_add(st->summary, label,
                      outcome == BATCH_RUN_DONE || outcome == BATCH_RUN_VERIFY_FAILED ? cJSON_GetNumberValue(median) : -1);
    batch_describe(outcome, line, what, sizeof what);
    per_run_s = (clock_monotonic_s() - st->started_s) / st->done;
    batch_format_duration(per_run_s * (st->total - st->done), eta, sizeof eta);
    fprintf(stderr, "[%d/%d] %s%s: %s; eta %s\n", st->done, st->total, label, where, what, eta);
}

/* ---------------------------------------------------------------------- studies -- */

/* A run of a study ended: its line as any run's; a stop signal ends the study after it. */
static void batch_study_run_ended(study *s, int k, const cJSON *record, void *arg)
{
    batch_state *st = arg;
    const study_run *run = &s->runs[k];
    const run_request *r = &s->requests[run->variant];
    char where[96];
    batch_outcome outcome;
    cJSON *line;

    snprintf(where, sizeof where, " (study %lld %s round %d)", s->id, s->variants[run->variant], run->round);
    if (record) {
        const cJSON *pass = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(record, "verify"), "pass");
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(record, "status");
        line = cJSON_Duplicate(record, 1);
        outcome = !cJSON_IsString(status) || strcmp(status->valuestring, "done") ? BATCH_RUN_FAILED
                  : cJSON_IsFalse(pass)                                           ? BATCH_RUN_VERIFY_FAILED
                                                                                  : BATCH_RUN_DONE;
    } else { /* refused when its turn came */
        api_error e;
        api_fail(&e, 503, run->error_code, "", "%s", run->error_message);
        line = batch_refusal_line(r, e.status, api_error_json(&e));
        outcome = BATCH_RUN_REFUSED;
    }
    batch_account(st, r, outcome, line, where);
    cJSON_Delete(line);
    if (__atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE)) {
        study_lock();
        s->cancel_requested = 1;
        snprintf(s->cancel_code, sizeof s->cancel_code, "cancelled");
        study_unlock();
    }
}

/* Run the study at point `point` of pass `pass`: every variant checked as POST /v1/studies
 * checks it, the study stored and executed, its runs' lines as they end, then its own line
 * {"study": …} and its table on stderr. A variant refused before anything ran refuses the
 * study: that variant's refusal line, and none of its runs. */
static void batch_run_study(batch_state *st, int pass, int point)
{
    const batch_plan *plan = st->plan;
    const char *names[STUDY_MAX_VARIANTS];
    run_request *requests = calloc(STUDY_MAX_VARIANTS, sizeof *requests); /* large: not on the stack */
    study_hooks hooks = {batch_study_run_ended, NULL, st};
    study *s = calloc(1, sizeof *s);
    cJSON *json, *line;
    char *table;
    api_error e;
    int b;

    if (!requests || !s) {
        log_error("out of memory for a study of the plan");
        st->failures++;
        free(requests);
        free(s);
        return;
    }
    for (b = 0; b < plan->backends; b++) {
        const run_request *r = &plan->runs[(size_t)pass * plan->backends * plan->points + (size_t)b * plan->points + point];
        const variant_info *v = variant_info_find(r->backend);
        cJSON *refusal = NULL;
        int status;

        names[b] = plan->names[b];
        requests[b] = *r;
        requests[b].verify_cpu_max_macs = st->s->verify_cpu_max_macs;
        if (!v) api_fail(&e, 500, "internal", "backend", "backend %s vanished from the variants table", r->backend);
        if (!v || run_request_check(&requests[b], 0, &e) != 0 || run_device_resolve(&requests[b], v, &e) != 0) {
            line = batch_refusal_line(&requests[b], e.status, api_error_json(&e));
        } else if ((status = pool_run_admissible(&requests[b], &refusal)) != 0) {
            line = batch_refusal_line(&requests[b], status, refusal);
        } else {
            continue;
        }
        st->total -= plan->study_rounds * plan->backends - 1; /* one line instead of the study's runs */
        batch_account(st, &requests[b], BATCH_RUN_REFUSED, line, " (study refused)");
        cJSON_Delete(line);
        free(requests);
        free(s);
        return;
    }
    if (study_init(s, names, requests, plan->backends, plan->study_rounds, plan->study_baseline, &e) != 0 ||
        study_store_new(s) != 0) {
        log_error("a study of the plan could not be stored");
        st->failures++;
        study_free(s);
        free(requests);
        free(s);
        return;
    }
    free(requests);
    s->memory_budget_bytes = st->s->memory_budget_bytes;
    study_execute(s, &hooks);
    json = study_to_json(s);
    line = cJSON_CreateObject();
    if (json) cJSON_AddItemToObject(line, "study", json);
    if (batch_write_line(st->out, line) != 0) {
        log_error("cannot write the line of study %lld: %s", s->id, strerror(errno));
        st->failures++;
    }
    cJSON_Delete(line);
    if ((table = study_table_text(s)) != NULL) {
        fprintf(stderr, "study %lld (%s, %d rounds):\n%s", s->id, study_status_name(s->status), s->rounds, table);
        free(table);
    }
    if (s->status != STUDY_DONE) st->failures++;
    study_free(s);
    free(s);
}

/* Run the plan in order, a line and a progress line per run (and per study), then the
 * summary, until its end or a stop signal. Returns BATCH_EXIT_OK or BATCH_EXIT_RUN_FAILED
 * (a write error counts). */
static int batch_run_plan(const settings *s, const batch_plan *plan, FILE *out)
{
    batch_state st = {s, plan, out, batch_summary_new(), clock_monotonic_s(), 0, 0, 0};
    int i = 0, pass, point;

    st.total = plan->study ? plan->count * plan->study_rounds : plan->count;
    if (plan->study) {
        for (pass = 0; pass < plan->repeats; pass++)
            for (point = 0; point < plan->points && !__atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE); point++)
                batch_run_study(&st, pass, point);
    } else {
        for (i = 0; i < plan->count && !__atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE); i++) {
            run_request r = plan->runs[i];
            cJSON *line = NULL;
            batch_outcome outcome = batch_run_one(s, &r, &line);
            batch_account(&st, &r, outcome, line, "");
            cJSON_Delete(line);
        }
    }
    if (st.done < st.total && __atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE))
        fprintf(stderr, "attnd batch: stopped by %s after %d of %d runs\n",
                strsignal(__atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE)), st.done, st.total);
    batch_summary_print(st.summary, stderr);
    batch_summary_free(st.summary);
    return st.failures ? BATCH_EXIT_RUN_FAILED : BATCH_EXIT_OK;
}

int batch_main(int argc, char **argv)
{
    static settings s; /* the pool keeps a pointer to it until exit */
    batch_plan plan;
    batch_args a;
    FILE *out = stdout;
    char err[1024];
    int rc, sig;

    rc = batch_parse_args(argc, argv, &a, err, sizeof err);
    if (rc == 1) return BATCH_EXIT_OK;
    if (rc == 0) rc = settings_load(&s, a.settings_argc, a.settings_argv, err, sizeof err);
    if (rc == 1) return BATCH_EXIT_OK; /* --help of the settings */
    if (rc != 0) {
        fprintf(stderr, "attnd batch: %s\n", err);
        return BATCH_EXIT_USAGE;
    }
    variant_info_offer_pending(s.pending_features);
    /* The workers are started with the settings flags, not "batch PLAN.json --out FILE". */
    pool_set_worker_flags(a.settings_argc - 1, a.settings_argv + 1);
    log_init("front", s.log_level);

    if (install_path_load_presets(s.models_file, err, sizeof err) != 0) { /* a plan may name model=NAME */
        fprintf(stderr, "attnd batch: %s\n", err);
        return BATCH_EXIT_USAGE;
    }
    if (batch_plan_load(a.plan_path, s.enable_fault_injection, &plan, err, sizeof err) != 0) {
        fprintf(stderr, "attnd batch: %s\n", err);
        return BATCH_EXIT_USAGE;
    }
    if (a.out_path && !(out = fopen(a.out_path, "w"))) {
        fprintf(stderr, "attnd batch: cannot write %s: %s\n", a.out_path, strerror(errno));
        batch_plan_free(&plan);
        return BATCH_EXIT_USAGE;
    }
    if (plan.study)
        fprintf(stderr, "attnd batch: %d runs from %s: %d studies of %d variants x %d rounds\n",
                plan.count * plan.study_rounds, a.plan_path, plan.points * plan.repeats, plan.backends, plan.study_rounds);
    else
        fprintf(stderr, "attnd batch: %d runs from %s\n", plan.count, a.plan_path);

    if (batch_take_signals(err, sizeof err) != 0 || store_open_settings(&s, err, sizeof err) /* where the server keeps its records */ != 0) {
        log_error("%s", err);
        rc = BATCH_EXIT_RUN_FAILED;
    } else if (pool_start(&s, err, sizeof err) != 0) {
        log_error("workers: %s", err);
        store_close();
        rc = BATCH_EXIT_RUN_FAILED;
    } else {
        /* A batch is a node while it runs: GET /v1/nodes of the fleet shows it working. */
        if (node_heartbeat_start(s.heartbeat_s) != 0) log_warn("no heartbeat: the batch runs anyway");
        rc = batch_run_plan(&s, &plan, out);
        node_heartbeat_stop();
        pool_stop();
        store_close();
    }
    if (out != stdout && fclose(out) != 0) {
        log_error("cannot write %s: %s", a.out_path, strerror(errno));
        rc = BATCH_EXIT_RUN_FAILED;
    }
    batch_plan_free(&plan);
    sig = __atomic_load_n(&batch_stop_signal, __ATOMIC_ACQUIRE);
    return sig ? 128 + sig : rc;
}
