/* tensor_table.h — the front's table of resident tensors and the bytes promised on each
 * device: for the tensor_*.c files of the front and the /v1/tensors routes (the rest of the
 * front uses tensors.h).
 *
 * One mutex guards the table and the reservations. It is never held across a pool call
 * (the pool may call tensors_finish_run with its own lock held: the order is pool, then
 * tensors, never the other way). Functions named _locked expect it held; the others take it.
 */
#ifndef TENSOR_TABLE_H
#define TENSOR_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/attn.h"

#define TENSOR_MAX_DIMS 8
#define TENSOR_NAME_MAX 128

typedef struct tensor_entry {
    char id[32];
    char name[TENSOR_NAME_MAX];
    char device[16];
    int generation; /* the worker generation that holds it (pool_device_generation) */
    attn_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t bytes;
    char fingerprint[20];
    char created[32];
    int readers;  /* runs queued or running that read it (tensor_table_pin_locked): DELETE answers 409 */
    int deleting; /* a DELETE is under way: new runs may not pin it */
    int pending;  /* a kept output whose run has not ended: not listed, lookups answer 404 */
    /* An int32 tensor of one dimension and at most RUN_MAX_SEQS entries (a batch's lengths):
     * the front's copy of its values, read at upload and freed with the entry; else NULL. Read
     * it through tensor_table_values: a copy of the entry may outlive it. */
    int32_t *values;
} tensor_entry;

/* Entries the table may hold, gone ones and pending outputs included (max_tensors; 4096 until
 * set). Before the server answers. */
void tensor_table_set_max_entries(int max);

void tensor_table_lock(void);
void tensor_table_unlock(void);

/* ---- entries, under the lock ---- */

/* The entry of id; NULL when none. Valid until the lock is let go or the table changes. */
tensor_entry *tensor_table_find_locked(const char *id);
/* A new tensor id ("t" and a number the store issues, never reused) for device. */
void tensor_table_new_id_locked(char *out, size_t len, const char *device);
/* Add a copy of t. 0, or -1 out of memory (never for an entry promised by take_slots). */
int tensor_table_add_locked(const tensor_entry *t);
void tensor_table_remove_locked(tensor_entry *t);
/* Promise entries for need tensors, of which held are promised already: 507 when the table
 * would pass max_tensors. Room is made now, so adding them later cannot fail. what: who
 * needs them, for the message. 0, or -1 with e. */
int tensor_table_take_slots_locked(int need, int held, const char *what, api_error *e);
/* Give back n promised entries (added, or no longer needed). */
void tensor_table_return_slots_locked(int n);
/* Pin id for a run that reads it (DELETE answers 409 until unpinned). 0, or -1 when it is
 * not in the table, is being deleted, or is a pending output. */
int tensor_table_pin_locked(const char *id);
/* Drop one pin of id; nothing when it left the table meanwhile. */
void tensor_table_unpin_locked(const char *id);

/* ---- bytes on devices, under the lock ---- */

/* Bytes held on device by the live tensors of its worker generation. */
double tensor_table_resident_locked(const char *device, int generation);
/* Bytes reserved on device by uploads and runs under way. */
double tensor_table_reserved_locked(const char *device);
/* Add bytes to device's reservation. 0, or -1 when no row is left for another device. */
int tensor_table_reserve_add_locked(const char *device, double bytes);
void tensor_table_unreserve_locked(const char *device, double bytes);
/* Set the resident-bytes gauge of device (metrics.h) to what its worker of generation holds.
 * Called wherever that changes: uploads, deletes, kept outputs, restarts. */
void tensor_table_publish_locked(const char *device, int generation);

/* ---- taking the lock ---- */

/* Reserve bytes on device under budget (> 0; 0: no budget). 0, or -1 with e (507 and how
 * much is free). what: who needs them, for the message. */
int tensor_table_reserve(const char *device, double bytes, long long budget, const char *what, api_error *e);
/* Look id up: 0 with *out a copy; else -1 with e (404 unknown or pending, 410 its worker
 * restarted or it belonged to an earlier server). field: the request field it came from. */
int tensor_table_lookup(const char *id, const char *field, tensor_entry *out, api_error *e);
/* The values the front keeps of id (tensor_entry.values), at most max into out: how many,
 * or -1 when it keeps none. */
int64_t tensor_table_values(const char *id, int32_t *out, int64_t max);
/* A copy of every entry (caller frees), *n of them; NULL with *n = 0 when empty. */
tensor_entry *tensor_table_snapshot(int *n);
/* Mark id as being deleted, unless runs read it. 0; or -1 with e: 409 `in_use` naming the
 * runs that read it, 404 when another DELETE has it. */
int tensor_table_begin_delete(const char *id, api_error *e);
/* A DELETE that did not go through: id may be pinned and deleted again. */
void tensor_table_end_delete(const char *id);
/* The worker answered 410 gone for id, which the request had found in the table: when a
 * DELETE of id reached the worker first (id left the table, or is leaving it), *e becomes
 * the 404 the request would have met after that DELETE; else *e stays (its worker restarted). */
void tensor_table_settle_gone(const char *id, api_error *e);
/* id leaves the table and the store's ids; device's gauge is published for generation
 * when it is >= 0. */
void tensor_table_forget(const char *id, const char *device, int generation);

/* An entry as the API shows it: state "gone" when gone, else "resident". NULL out of memory. */
cJSON *tensor_entry_json(const tensor_entry *t, int gone);

#endif
