/* pool_tensors.c — resident-tensor messages through the pool (pool_tensor_op, pool.h): a
 * tensor job waits in its device's queue like a run (after the jobs already there) and is
 * exchanged by the slot's dispatcher (pool_dispatch.c). No record: the tensor table
 * (front/tensor_*.c) keeps what a tensor job did.
 */
#include "server/front/pool/pool.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "server/front/pool/queue.h"

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
    clock_cond_init(&j.cond);

    pthread_mutex_lock(&queue_mu);
    j.id = -(++pool_tensor_job_ids);
    w = (queue_started && !queue_stopping) ? queue_find_slot_locked(device) : NULL;
    if (!queue_started || queue_stopping) {
        queue_refuse_locked(&j, 503, "shutting_down", "the server is stopping", NULL);
    } else if (!w || w->state == SLOT_DOWN) {
        if (!w)
            snprintf(message, sizeof message, "device %s is not served here (see GET /v1/device)", device);
        else
            snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        queue_refuse_locked(&j, 503, "no_device", message, "device");
    } else {
        if (cJSON_GetObjectItem(msg, "job"))
            cJSON_ReplaceItemInObject(msg, "job", cJSON_CreateNumber((double)j.id));
        else
            cJSON_AddNumberToObject(msg, "job", (double)j.id);
        queue_push_locked(w, &j);
    }
    while (!j.finished) pthread_cond_wait(&j.cond, &queue_mu);
    pthread_mutex_unlock(&queue_mu);
    pthread_cond_destroy(&j.cond);
    *reply = j.response;
    *reply_fd = j.reply_fd;
    *generation = j.generation;
    return j.http_status;
}
