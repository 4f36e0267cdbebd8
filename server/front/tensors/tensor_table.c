/* tensor_table.c — the front's table of resident tensors, the bytes promised on each device
 * (the budget of uploads and runs), the pins of runs, deletes, and worker restarts
 * (tensor_table.h, docs/tensors.md).
 *
 * Runs hold what they read: tensors_prepare_run pins each resident input (readers++) and
 * reserves the kept output's id as a pending entry; tensors_finish_run undoes both whichever
 * way the run ended. A pinned tensor cannot be deleted (409): refusing is predictable for
 * scripts, where a DELETE waiting behind a long queue is not.
 */
#include "server/front/tensors/tensor_table.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "server/front/metrics.h"
#include "server/front/pool/pool.h"
#include "server/front/store/store.h"
#include "server/front/tensors/tensors.h"

static pthread_mutex_t tensors_mu = PTHREAD_MUTEX_INITIALIZER;
static tensor_entry *tensors_table;
static int tensors_count;
static size_t tensors_cap;
static int tensors_slots_held; /* entries promised to uploads under way (tensor_table_take_slots_locked) */
static long long tensors_next_id = 1;
static int tensors_max = 4096; /* entries the table may hold (tensor_table_set_max_entries) */

/* Bytes promised to uploads and runs in flight, per device (budget checks count them). */
typedef struct tensor_reservation {
    char device[16];
    double bytes;
} tensor_reservation;
static tensor_reservation tensors_reserved[64];

void tensor_table_set_max_entries(int max)
{
    if (max > 0) tensors_max = max;
}

void tensor_table_lock(void) { pthread_mutex_lock(&tensors_mu); }

void tensor_table_unlock(void) { pthread_mutex_unlock(&tensors_mu); }

/* ---------------------------------------------------------------- the table ------------- */

static int tensors_index_locked(const char *id)
{
    int i;
    for (i = 0; i < tensors_count; i++)
        if (strcmp(tensors_table[i].id, id) == 0) return i;
    return -1;
}

tensor_entry *tensor_table_find_locked(const char *id)
{
    int i = tensors_index_locked(id);
    return i >= 0 ? &tensors_table[i] : NULL;
}

/* Ids are "t" and a number the store issues: never reused, across restarts too (an id of
 * an earlier process answers 410), and not to be confused with run ids. Should the store
 * fail, a counter above every id seen keeps this process's ids unique. */
void tensor_table_new_id_locked(char *out, size_t len, const char *device)
{
    long long n = store_tensor_issue(device);
    if (n > 0 && n >= tensors_next_id) tensors_next_id = n + 1;
    if (n <= 0) n = tensors_next_id++;
    snprintf(out, len, "t%lld", n);
}

int tensor_table_add_locked(const tensor_entry *t)
{
    if (grow_array(&tensors_table, &tensors_cap, (size_t)tensors_count + 1, sizeof *tensors_table, 64) != 0) return -1;
    tensors_table[tensors_count++] = *t;
    return 0;
}

void tensor_table_remove_locked(tensor_entry *t)
{
    size_t i = (size_t)(t - tensors_table);
    free(t->values);
    memmove(t, t + 1, ((size_t)tensors_count - i - 1) * sizeof *t);
    tensors_count--;
}

int tensor_table_take_slots_locked(int need, int held, const char *what, api_error *e)
{
    int max = tensors_max, taken = tensors_count + tensors_slots_held, n = need - held;

    if (n <= 0) return 0;
    if (n > max - taken)
        return api_fail(e, 507, "insufficient_storage", "",
                        "the tensor table is full: %s %d entr%s, and %d of max_tensors=%d %s free (gone tensors and "
                        "uploads under way count); delete some (DELETE /v1/tensors/ID)",
                        what, need, need == 1 ? "y" : "ies", max - taken + held, max,
                        max - taken + held == 1 ? "is" : "are");
    if (grow_array(&tensors_table, &tensors_cap, (size_t)(taken + n), sizeof *tensors_table, 64) != 0)
        return api_fail(e, 500, "internal", "", "out of memory for the tensor table");
    tensors_slots_held += n;
    return 0;
}

void tensor_table_return_slots_locked(int n) { tensors_slots_held -= n; }

int tensor_table_pin_locked(const char *id)
{
    tensor_entry *t = tensor_table_find_locked(id);

    if (!t || t->deleting || t->pending) return -1;
    t->readers++;
    return 0;
}

void tensor_table_unpin_locked(const char *id)
{
    tensor_entry *t = tensor_table_find_locked(id);

    if (t && t->readers > 0) t->readers--;
}

/* ---------------------------------------------------------------- bytes on devices ------ */

double tensor_table_resident_locked(const char *device, int generation)
{
    double used = 0.0;
    int i;
    for (i = 0; i < tensors_count; i++) /* a pending output is inside its run's reservation */
        if (!strcmp(tensors_table[i].device, device) && tensors_table[i].generation == generation &&
            !tensors_table[i].pending)
            used += (double)tensors_table[i].bytes;
    return used;
}

double tensor_table_reserved_locked(const char *device)
{
    int i;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++)
        if (!strcmp(tensors_reserved[i].device, device)) return tensors_reserved[i].bytes;
    return 0.0;
}

/* Bytes held on device by live tensors plus reservations. */
static double tensors_used_locked(const char *device, int generation)
{
    return tensor_table_resident_locked(device, generation) + tensor_table_reserved_locked(device);
}

/* Never out of rows with the devices one machine has: 64. */
int tensor_table_reserve_add_locked(const char *device, double bytes)
{
    int i, slot = -1;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++) {
        if (!strcmp(tensors_reserved[i].device, device)) {
            slot = i;
            break;
        }
        if (slot < 0 && !tensors_reserved[i].device[0]) slot = i;
    }
    if (slot < 0) return -1;
    snprintf(tensors_reserved[slot].device, sizeof tensors_reserved[slot].device, "%s", device);
    tensors_reserved[slot].bytes += bytes;
    return 0;
}

void tensor_table_publish_locked(const char *device, int generation)
{
    metrics_set_tensor_bytes(device, tensor_table_resident_locked(device, generation));
}

int tensor_table_reserve(const char *device, double bytes, long long budget, const char *what, api_error *e)
{
    int gen = pool_device_generation(device), rc = 0;
    double used;

    pthread_mutex_lock(&tensors_mu);
    used = tensors_used_locked(device, gen);
    if (budget > 0 && used + bytes > (double)budget)
        rc = api_fail(e, 507, "insufficient_storage", "",
                      "%s needs %.0f bytes on %s; %.0f of memory_budget_bytes=%lld are free", what, bytes, device,
                      (double)budget - used > 0 ? (double)budget - used : 0.0, budget);
    else if (tensor_table_reserve_add_locked(device, bytes) != 0)
        rc = api_fail(e, 500, "internal", "", "no room to account for device %s's reservations", device);
    pthread_mutex_unlock(&tensors_mu);
    return rc;
}

void tensor_table_unreserve_locked(const char *device, double bytes)
{
    int i;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++)
        if (!strcmp(tensors_reserved[i].device, device)) {
            tensors_reserved[i].bytes -= bytes;
            if (tensors_reserved[i].bytes < 0.5) tensors_reserved[i].bytes = 0.0;
            break;
        }
}

/* ---------------------------------------------------------------- lookups, deletes ------ */

cJSON *tensor_entry_json(const tensor_entry *t, int gone)
{
    cJSON *o = cJSON_CreateObject(), *shape;
    int i;

    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", t->id);
    cJSON_AddStringToObject(o, "name", t->name);
    shape = cJSON_AddArrayToObject(o, "shape");
    for (i = 0; shape && i < t->ndim; i++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[i]));
    cJSON_AddStringToObject(o, "dtype", attn_dtype_name(t->dtype));
    cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
    cJSON_AddStringToObject(o, "device", t->device);
    cJSON_AddStringToObject(o, "node", store_node()); /* tensors never leave the node that holds them */
    cJSON_AddStringToObject(o, "fingerprint", t->fingerprint);
    cJSON_AddStringToObject(o, "created", t->created);
    cJSON_AddStringToObject(o, "state", gone ? "gone" : "resident");
    return o;
}

int tensor_table_lookup(const char *id, const char *field, tensor_entry *out, api_error *e)
{
    char node[128];
    int i, gen;

    if (id[0] != 't' || !isdigit((unsigned char)id[1]) || strspn(id + 1, "0123456789") != strlen(id + 1) || strlen(id) > 20)
        return api_fail(e, 404, "not_found", field, "there is no tensor %.40s (tensor ids look like t4)", id);
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0) *out = tensors_table[i];
    pthread_mutex_unlock(&tensors_mu);
    if (i < 0 && store_tensor_elsewhere(strtoll(id + 1, NULL, 10), node, sizeof node) == 1)
        return api_fail(e, 409, "tensor_on_other_node", field,
                        "tensor %s lives on node %s, not on %s: resident tensors stay on the node they were uploaded "
                        "to; send this request to %s (or upload the tensor here)", id, node, store_node(), node);
    if (i < 0 && store_tensor_known(strtoll(id + 1, NULL, 10)) == 1)
        return api_fail(e, 410, "gone", field,
                        "tensor %s is gone: it was resident in an earlier run of the server, and resident tensors "
                        "do not survive a restart (upload it again)", id);
    if (i < 0) return api_fail(e, 404, "not_found", field, "there is no tensor %.40s", id);
    if (out->pending)
        return api_fail(e, 404, "not_found", field,
                        "there is no tensor %s yet: it will be the kept output of a run that has not finished "
                        "(it appears in the run's output.tensor once the run is done)", id);
    gen = pool_device_generation(out->device);
    if (gen != out->generation)
        return api_fail(e, 410, "gone", field,
                        "tensor %s is gone: the worker of %s restarted since it was uploaded (upload it again)", id,
                        out->device);
    return 0;
}

int tensor_table_begin_delete(const char *id, api_error *e)
{
    long long runs[8];
    char list[200];
    size_t used = 0;
    int i, readers = 0, claimed = 0, n, k;

    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0 && !tensors_table[i].deleting) {
        readers = tensors_table[i].readers;
        claimed = !readers;
        if (claimed) tensors_table[i].deleting = 1;
    }
    pthread_mutex_unlock(&tensors_mu);
    if (claimed) return 0;
    if (!readers) /* it left the table since the lookup, or another DELETE has it */
        return api_fail(e, 404, "not_found", "id", "there is no tensor %.40s (another request deleted it)", id);
    /* Name the runs (best effort: the pins decide; a run may end between the two looks). */
    n = pool_runs_reading_tensor(id, runs, (int)(sizeof runs / sizeof runs[0]));
    list[0] = '\0';
    for (k = 0; k < n && k < (int)(sizeof runs / sizeof runs[0]) && used < sizeof list; k++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", k ? ", " : "", runs[k]);
    if (n > k && used < sizeof list) snprintf(list + used, sizeof list - used, ", …");
    if (n == 0) /* the pins say a run holds it, but it is ending right now */
        return api_fail(e, 409, "in_use", "id", "tensor %s is read by a run that is ending; retry the DELETE", id);
    return api_fail(e, 409, "in_use", "id",
                    "tensor %s is read by %d run%s queued or running (%s %s); delete it once they end, or cancel "
                    "the queued ones (DELETE /v1/runs/ID)",
                    id, n, n == 1 ? "" : "s", n == 1 ? "run" : "runs", list);
}

void tensor_table_end_delete(const char *id)
{
    int i;
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0) tensors_table[i].deleting = 0;
    pthread_mutex_unlock(&tensors_mu);
}

void tensor_table_settle_gone(const char *id, api_error *e)
{
    int i, deleted;

    if (e->status != 410 || strcmp(e->code, "gone") != 0) return;
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    deleted = i < 0 || tensors_table[i].deleting;
    pthread_mutex_unlock(&tensors_mu);
    if (deleted)
        api_fail(e, 404, "not_found", "id", "there is no tensor %s: it was deleted while this request waited for its worker",
                 id);
}

void tensor_table_forget(const char *id, const char *device, int generation)
{
    tensor_entry *t;

    pthread_mutex_lock(&tensors_mu);
    t = tensor_table_find_locked(id);
    if (t) tensor_table_remove_locked(t);
    if (generation >= 0) tensor_table_publish_locked(device, generation);
    pthread_mutex_unlock(&tensors_mu);
    store_tensor_forget(strtoll(id + 1, NULL, 10));
}

int64_t tensor_table_values(const char *id, int32_t *out, int64_t max)
{
    tensor_entry *t;
    int64_t n = -1;

    pthread_mutex_lock(&tensors_mu);
    t = tensor_table_find_locked(id);
    if (t && t->values && t->ndim == 1 && t->shape[0] <= max) {
        n = t->shape[0];
        memcpy(out, t->values, (size_t)n * sizeof *out);
    }
    pthread_mutex_unlock(&tensors_mu);
    return n;
}

tensor_entry *tensor_table_snapshot(int *n)
{
    tensor_entry *copy = NULL;

    pthread_mutex_lock(&tensors_mu);
    *n = tensors_count;
    if (*n) copy = malloc((size_t)*n * sizeof *copy);
    if (copy) memcpy(copy, tensors_table, (size_t)*n * sizeof *copy);
    else *n = 0;
    pthread_mutex_unlock(&tensors_mu);
    return copy;
}

/* ---------------------------------------------------------------- restarts -------------- */

void tensors_worker_restarted(const char *device, int generation)
{
    pthread_mutex_lock(&tensors_mu);
    tensor_table_publish_locked(device, generation);
    pthread_mutex_unlock(&tensors_mu);
}
