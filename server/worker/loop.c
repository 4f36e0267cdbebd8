/* loop.c — the worker process (loop.h): owns one device, answers the front's messages
 * one at a time over the socket passed as --ipc-fd.
 *
 * Exit statuses the front reads: 0 the socket closed (the front is done with us), 1 the
 * device could not be opened (after a hello carrying the error), 2 the socket broke,
 * 3 the device is unusable after a fatal (sticky) error, already reported as "failed".
 * Test faults (run parameter `fault`, only accepted with enable_fault_injection) make the
 * worker crash, hang or take a sticky error, so the front's recovery paths can be tested.
 */
#include "server/worker/loop.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/cpu/host_threads.h"
#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/flashinfer_loader.h"
#include "common/api_error.h"
#include "server/worker/cpu_job.h"
#include "server/worker/gpu_job.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "common/proto.h"
#include "common/run_request.h"
#include "server/worker/tensors/tensors.h"
#include "server/worker/variants_report.h"

enum { WORKER_EXIT_OK = 0, WORKER_EXIT_OPEN = 1, WORKER_EXIT_IPC = 2, WORKER_EXIT_FATAL = 3 };

typedef struct worker_state {
    const settings *s;
    int sock;
    gpu_worker *gpu; /* NULL on the cpu device */
} worker_state;

/* Send msg (and fd when ≥ 0), then delete msg. A broken socket means the front is gone:
 * nothing to answer to, so the worker ends. */
static void worker_send(worker_state *w, cJSON *msg, int fd)
{
    int rc = ipc_send_json(w->sock, msg, fd);
    cJSON_Delete(msg);
    if (rc != IPC_OK) {
        log_error("cannot send to the front: %s; exiting", strerror(errno));
        if (w->gpu) gpu_worker_close(w->gpu);
        exit(WORKER_EXIT_IPC);
    }
}

static cJSON *worker_msg(proto_type type, double job)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", proto_type_name(type));
    cJSON_AddNumberToObject(m, "job", job);
    return m;
}

/* {"type":"error",…}: the request cannot run here; nothing ran. */
static void worker_send_error(worker_state *w, double job, const api_error *e)
{
    cJSON *m = worker_msg(PROTO_ERROR, job);
    cJSON *err = cJSON_AddObjectToObject(m, "error");
    cJSON_AddNumberToObject(err, "status", e->status);
    cJSON_AddStringToObject(err, "code", e->code);
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "field", e->field);
    worker_send(w, m, -1);
}

/* {"type":"failed",…}: it ran and broke. After a fatal one the worker exits. */
static void worker_send_failed(worker_state *w, double job, const char *message, int fatal)
{
    cJSON *m = worker_msg(PROTO_FAILED, job);
    cJSON_AddStringToObject(m, "message", message);
    cJSON_AddBoolToObject(m, "fatal", fatal);
    worker_send(w, m, -1);
    if (fatal) {
        log_error("fatal error, exiting: %s", message);
        exit(WORKER_EXIT_FATAL); /* the CUDA context is broken; no cleanup can be trusted */
    }
}

/* A refusal (< 500) or a failure (≥ 500), as the api_error of the run says. */
static void worker_send_outcome(worker_state *w, double job, const api_error *e, int fatal)
{
    if (e->status > 0 && e->status < 500 && !fatal)
        worker_send_error(w, job, e);
    else
        worker_send_failed(w, job, e->message[0] ? e->message : "the job failed", fatal);
}

/* The test faults. Only returns for an unknown fault name. */
static void worker_fault(worker_state *w, double job, const char *fault)
{
    if (strcmp(fault, "crash") == 0) {
        log_warn("fault injection: crashing with SIGSEGV");
        signal(SIGSEGV, SIG_DFL); /* a handler installed by a library must not catch it */
        raise(SIGSEGV);
        abort();
    }
    if (strcmp(fault, "hang") == 0) {
        log_warn("fault injection: hanging");
        for (;;) pause();
    }
    if (strcmp(fault, "sticky") == 0) {
        char err[400] = "injected sticky fault";
        log_warn("fault injection: sticky error");
        if (w->gpu && gpu_worker_fault_sticky(w->gpu, err, sizeof err) == 0)
            snprintf(err, sizeof err, "injected sticky fault did not break the context");
        worker_send_failed(w, job, err, 1);
    }
}

/* A run: begun (ph) when its message was in, parsed, then the device's phases. */
static void worker_handle_run(worker_state *w, double job, const cJSON *request, phases *ph)
{
    run_request r;
    api_error e;
    cJSON *result, *m;
    int out_fd = -1, fatal = 0;

    memset(&e, 0, sizeof e);
    if (run_request_from_json(&r, request, &e) != 0 || worker_tensors_lengths(&r, &e) != 0) {
        worker_send_error(w, job, &e);
        return;
    }
    if (r.fault[0]) {
        worker_fault(w, job, r.fault);
        api_fail(&e, 400, "unknown_fault", "fault", "unknown fault %s (crash, hang or sticky)", r.fault);
        worker_send_error(w, job, &e);
        return;
    }
    log_info("job %.0f: %s start", job, r.backend);
    phases_mark(ph, "request");
    if (w->gpu)
        result = gpu_worker_run(w->gpu, &r, ph, &e, &out_fd, &fatal);
    else
        result = cpu_worker_run(&r, w->s->cpu_threads, ph, &e);
    if (!result) {
        if (out_fd >= 0) close(out_fd);
        log_info("job %.0f: %s ended: %d %s", job, r.backend, e.status, e.message);
        worker_send_outcome(w, job, &e, fatal);
        return;
    }
    if (fatal) { /* a result out of a broken context is not to be trusted */
        cJSON_Delete(result);
        if (out_fd >= 0) close(out_fd);
        worker_send_failed(w, job, "the device took a fatal error during the job", 1);
        return;
    }
    log_info("job %.0f: %s done", job, r.backend);
    m = worker_msg(PROTO_RESULT, job);
    cJSON_AddItemToObject(m, "result", result);
    worker_send(w, m, out_fd);
    if (out_fd >= 0) close(out_fd);
}

static void worker_handle_verify(worker_state *w, double job, const cJSON *msg, int fd)
{
    const cJSON *bytes = cJSON_GetObjectItem(msg, "bytes");
    run_request r;
    api_error e;
    cJSON *verify, *m;

    memset(&e, 0, sizeof e);
    if (w->gpu) {
        api_fail(&e, 400, "bad_message", "", "verify runs on the cpu device only");
        worker_send_error(w, job, &e);
        return;
    }
    if (fd < 0 || !cJSON_IsNumber(bytes) || bytes->valuedouble < 0) {
        api_fail(&e, 400, "bad_message", "", "verify needs an output descriptor and its byte count");
        worker_send_error(w, job, &e);
        return;
    }
    if (run_request_from_json(&r, cJSON_GetObjectItem(msg, "request"), &e) != 0) {
        worker_send_error(w, job, &e);
        return;
    }
    if (run_request_lengths_pending(&r)) { /* the tensor is on the run's worker, not this one */
        api_fail(&e, 422, "unsupported", "seqlens_kv", "verify of a run whose lengths are a resident tensor");
        worker_send_error(w, job, &e);
        return;
    }
    if (r.block_table_tensor[0]) { /* likewise: a GPU run's table is on its GPU's worker */
        api_fail(&e, 422, "unsupported", "block_table", "verify of a run whose block table is a resident tensor");
        worker_send_error(w, job, &e);
        return;
    }
    verify = cpu_worker_verify(&r, fd, (size_t)bytes->valuedouble, w->s->cpu_threads, &e);
    if (!verify) {
        worker_send_outcome(w, job, &e, 0);
        return;
    }
    m = worker_msg(PROTO_VERIFY_RESULT, job);
    cJSON_AddItemToObject(m, "verify", verify);
    worker_send(w, m, -1);
}

/* tensor_put / _stage / _unstage / _get / _delete (common/proto.h, server/worker/tensors/tensors.h). */
static void worker_handle_tensor(worker_state *w, double job, proto_type type, const cJSON *msg, int fd)
{
    api_error e;
    cJSON *res, *m, *item;
    int out_fd = -1;

    memset(&e, 0, sizeof e);
    res = worker_tensors_handle(type, msg, fd, &out_fd, &e);
    if (!res) {
        worker_send_outcome(w, job, &e, 0);
        return;
    }
    m = worker_msg(PROTO_TENSOR_RESULT, job);
    while ((item = res->child) != NULL) cJSON_AddItemToObject(m, item->string, cJSON_DetachItemViaPointer(res, item));
    cJSON_Delete(res);
    worker_send(w, m, out_fd);
    if (out_fd >= 0) close(out_fd);
}

int worker_main(const settings *s, const char *device, int ipc_fd)
{
    worker_state w = {.s = s, .sock = ipc_fd, .gpu = NULL};
    pid_t parent = getppid();
    cJSON *hello;

    log_init(device, s->log_level);
    host_threads_set_limit(s->cpu_threads); /* the reference, fingerprints and download fills alike */
    /* Before anything can load cuDNN or the FlashInfer module: the hello reports the libraries
     * these settings open. */
    if (cudnn_set_library(s->cudnn_library) != 0)
        log_warn("cudnn_library '%s' not applied: cuDNN was already loaded", s->cudnn_library);
    if (flashinfer_set_library(s->flashinfer_library) != 0)
        log_warn("flashinfer_library '%s' not applied: the module was already loaded", s->flashinfer_library);
    /* Die with the front. If it died before prctl took effect we were reparented, and its
     * end of the socket is closed (the front may itself be pid 1 in a container, so
     * getppid() == 1 alone proves nothing). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) log_warn("prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
    {
        struct pollfd p = {.fd = ipc_fd, .events = POLLIN | POLLRDHUP, .revents = 0};
        if (getppid() != parent || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLNVAL)))) {
            log_error("the front is gone; exiting");
            return WORKER_EXIT_IPC;
        }
    }

    hello = cJSON_CreateObject();
    cJSON_AddStringToObject(hello, "type", proto_type_name(PROTO_HELLO));
    if (strcmp(device, "cpu") == 0) {
        cJSON_AddItemToObject(hello, "device", cpu_device_json());
    } else {
        char err[512] = "";
        long long ordinal = -1;

        if (strncmp(device, "cuda:", 5) != 0 || parse_int_in(device + 5, 0, 1023, &ordinal) != 0) {
            snprintf(err, sizeof err, "unknown device %s (cpu or cuda:N)", device);
        } else {
            w.gpu = gpu_worker_open((int)ordinal, s, err, sizeof err);
        }
        if (!w.gpu) {
            log_error("cannot open %s: %s", device, err);
            cJSON_AddStringToObject(hello, "error", err[0] ? err : "cannot open the device");
            ipc_send_json(w.sock, hello, -1); /* best effort: we exit either way */
            cJSON_Delete(hello);
            return WORKER_EXIT_OPEN;
        }
        cJSON_AddItemToObject(hello, "device", gpu_worker_device_json(w.gpu));
    }
    /* null when out of memory; the cpu device (cc 0) runs no GPU variant's implementations */
    cJSON_AddItemToObject(hello, "variants", worker_variants_json(w.gpu ? gpu_worker_cc(w.gpu) : 0));
    worker_tensors_init(w.gpu != NULL);
    worker_send(&w, hello, -1);
    log_info("up");

    for (;;) {
        cJSON *msg = NULL;
        const cJSON *type, *job;
        double job_id;
        proto_type kind;
        int fd = -1;
        int rc = ipc_recv_json(w.sock, &msg, &fd, -1);
        phases ph;

        phases_begin(&ph); /* the message is in (and parsed) */
        if (rc == IPC_EOF) break;
        if (rc != IPC_OK) {
            log_error("ipc receive failed: %s; exiting", strerror(errno));
            if (w.gpu) gpu_worker_close(w.gpu);
            return WORKER_EXIT_IPC;
        }
        type = cJSON_GetObjectItem(msg, "type");
        job = cJSON_GetObjectItem(msg, "job");
        job_id = cJSON_IsNumber(job) ? job->valuedouble : 0;
        kind = proto_type_parse(cJSON_GetStringValue(type));
        switch (kind) {
        case PROTO_RUN: worker_handle_run(&w, job_id, cJSON_GetObjectItem(msg, "request"), &ph); break;
        case PROTO_VERIFY: worker_handle_verify(&w, job_id, msg, fd); break;
        case PROTO_TENSOR_PUT:
        case PROTO_TENSOR_GET:
        case PROTO_TENSOR_STAGE:
        case PROTO_TENSOR_UNSTAGE:
        case PROTO_TENSOR_DELETE: worker_handle_tensor(&w, job_id, kind, msg, fd); break;
        default: {
            api_error e;
            api_fail(&e, 400, "bad_message", "", "unknown message type %s",
                     cJSON_IsString(type) ? type->valuestring : "(none)");
            worker_send_error(&w, job_id, &e);
        }
        }
        if (fd >= 0) close(fd);
        cJSON_Delete(msg);
    }
    log_info("front closed the socket; exiting");
    if (w.gpu) gpu_worker_close(w.gpu);
    return WORKER_EXIT_OK;
}

int worker_probe_main(void)
{
    char err[512] = "";
    int n = gpu_device_count(err, sizeof err);
    cJSON *out = cJSON_CreateObject();
    char *text;

    cJSON_AddNumberToObject(out, "gpus", n > 0 ? n : 0);
    if (n <= 0) cJSON_AddStringToObject(out, "error", err[0] ? err : "no CUDA device");
    text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    if (text) {
        printf("%s\n", text);
        cJSON_free(text);
    }
    fflush(stdout);
    return 0;
}
