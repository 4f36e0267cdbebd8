/* store_pending.c — the records the SQLite file refused, in memory and in data_dir/attnd.pending
 * (store_pending.h).
 *
 * Why a journal with room allocated up front, and not only a retry from memory: the failure
 * this is for is a full disk, and a client that was answered "done" must read "done" after a
 * restart too. Allocating at open (posix_fallocate: real blocks on ext4, xfs and tmpfs) means a
 * disk that filled up since still has STORE_PENDING_RESERVE_BYTES for those records. The
 * journal is append-only between resets, so a torn append (a crash mid-write) fails its
 * checksum and ends the read; entries carry the journal's epoch, so entries of an earlier
 * epoch behind a reset are never read back. A record read back twice lands twice harmlessly:
 * landing only moves a run that is still queued or running (store_local_land_final).
 */
#include "server/front/store/store_pending.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/log.h"

#define PENDING_MAGIC 0x31525041u /* "APR1" */
#define PENDING_FILE "attnd.pending"

/* One journal entry: this header, then `length` bytes of record (no NUL). */
typedef struct pending_header {
    uint32_t magic;
    uint32_t length;
    uint64_t epoch;    /* the journal's generation: entries of an older one are not read back */
    int64_t id;
    double median_us;  /* < 0: none */
    char status[16];
    uint32_t checksum; /* FNV-1a of this header (with checksum 0) and the record */
    uint32_t unused;
} pending_header;

/* One run's record that waits, its latest state. */
typedef struct pending_entry {
    long long id;
    long long seq; /* when it was kept: retries go oldest first, and a newer state is told apart */
    char status[16];
    double median_us;
    char *record;  /* owned */
    int final;
    int journaled;
} pending_entry;

static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static pending_entry *entries;
static size_t n_entries, cap_entries;
static long long next_seq;

static int journal_fd = -1;
static char journal_path[1024];
static long long journal_end; /* where the next entry goes */
static uint64_t journal_epoch;
static int reserve_ok = 1;
static int reserve_no_space;
static char reserve_error[400];

static int last_write_ok = 1;
static int last_write_no_space;
static char last_write_error[400];
static long long write_failures;

/* ------------------------------------------------------------------------ journal -- */

static uint32_t pending_fnv1a(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static uint32_t pending_checksum(pending_header h, const char *record)
{
    h.checksum = 0;
    return pending_fnv1a(pending_fnv1a(2166136261u, &h, sizeof h), record, h.length);
}

/* A new epoch: the wall clock in ns and the pid, so no earlier journal of this file had it. */
static uint64_t pending_new_epoch(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 48);
}

static int pending_is_no_space(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

/* Allocate the journal's reserve (a no-op once it is there). Under pending_mu. */
static void pending_reserve_locked(void)
{
    int rc = posix_fallocate(journal_fd, 0, STORE_PENDING_RESERVE_BYTES);

    if (rc == 0) {
        if (!reserve_ok) log_info("store: %s has its %ld bytes of reserve again", journal_path, STORE_PENDING_RESERVE_BYTES);
        reserve_ok = 1;
        reserve_error[0] = '\0';
        return;
    }
    if (reserve_ok)
        log_error("store: cannot allocate %ld bytes of reserve in %s: %s; runs are refused until it can",
                  STORE_PENDING_RESERVE_BYTES, journal_path, strerror(rc));
    reserve_ok = 0;
    reserve_no_space = pending_is_no_space(rc);
    snprintf(reserve_error, sizeof reserve_error, "cannot allocate %ld bytes of reserve in %.300s: %s",
             STORE_PENDING_RESERVE_BYTES, journal_path, strerror(rc));
}

/* Append a final record to the journal and make it durable. 0, or -1 (no room, or the write
 * failed: logged). Under pending_mu. */
static int pending_append_locked(long long id, const char *status, double median_us, const char *record)
{
    size_t len = strlen(record);
    pending_header h;
    char *buf;
    int ok;

    if (journal_fd < 0) return -1;
    if (journal_end + (long long)(sizeof h + len) > STORE_PENDING_RESERVE_BYTES) {
        log_error("store: run %lld: no room left in %s (%lld of %ld bytes used); its %s record is kept in memory only",
                  id, journal_path, journal_end, STORE_PENDING_RESERVE_BYTES, status);
        return -1;
    }
    memset(&h, 0, sizeof h);
    h.magic = PENDING_MAGIC;
    h.length = (uint32_t)len;
    h.epoch = journal_epoch;
    h.id = id;
    h.median_us = median_us;
    snprintf(h.status, sizeof h.status, "%s", status);
    h.checksum = pending_checksum(h, record);
    buf = malloc(sizeof h + len);
    if (!buf) return -1;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, record, len);
    ok = pwrite(journal_fd, buf, sizeof h + len, journal_end) == (ssize_t)(sizeof h + len) && fdatasync(journal_fd) == 0;
    free(buf);
    if (!ok) {
        log_error("store: run %lld: cannot write its %s record to %s: %s; it is kept in memory only", id, status,
                  journal_path, strerror(errno));
        return -1;
    }
    journal_end += (long long)(sizeof h + len);
    return 0;
}

/* Empty the journal once none of its entries waits: a zero header at its start, a new epoch.
 * Then the final records kept in memory only (it was full) get their place in it. Under
 * pending_mu. */
static void pending_journal_reset_locked(void)
{
    pending_header zero;
    size_t i;

    for (i = 0; i < n_entries; i++)
        if (entries[i].journaled) return;
    if (journal_fd < 0) return;
    if (journal_end > 0) {
        memset(&zero, 0, sizeof zero);
        if (pwrite(journal_fd, &zero, sizeof zero, 0) != (ssize_t)sizeof zero || fdatasync(journal_fd) != 0) {
            log_warn("store: cannot empty %s: %s (its records already reached the file)", journal_path, strerror(errno));
            return;
        }
        journal_end = 0;
        journal_epoch = pending_new_epoch();
    }
    for (i = 0; i < n_entries; i++)
        if (entries[i].final && !entries[i].journaled)
            entries[i].journaled =
                pending_append_locked(entries[i].id, entries[i].status, entries[i].median_us, entries[i].record) == 0;
}

/* ------------------------------------------------------------------------ entries -- */

static long long pending_find_locked(long long id)
{
    size_t i;

    for (i = 0; i < n_entries; i++)
        if (entries[i].id == id) return (long long)i;
    return -1;
}

static void pending_remove_locked(size_t i)
{
    free(entries[i].record);
    memmove(&entries[i], &entries[i + 1], (n_entries - i - 1) * sizeof *entries);
    n_entries--;
}

/* Keep record (taken) as run id's latest state, at the end of the order. 0, or -1 when out of
 * memory (record freed). Under pending_mu. */
static int pending_put_locked(long long id, const char *status, double median_us, char *record, int final, int journaled)
{
    long long at = pending_find_locked(id);
    pending_entry e;

    if (at >= 0) pending_remove_locked((size_t)at); /* a journaled older state stays in the file: harmless */
    if (grow_array(&entries, &cap_entries, n_entries + 1, sizeof *entries, 8) != 0) {
        free(record);
        return -1;
    }
    memset(&e, 0, sizeof e);
    e.id = id;
    e.seq = ++next_seq;
    snprintf(e.status, sizeof e.status, "%s", status ? status : "");
    e.median_us = median_us;
    e.record = record;
    e.final = final;
    e.journaled = journaled;
    entries[n_entries++] = e;
    return 0;
}

/* Read back what an earlier process left in the journal: entries of the first one's epoch,
 * up to the first that is torn, of another epoch or not an entry at all. 0, or -1 (a read
 * error). Under pending_mu. */
static int pending_read_back_locked(void)
{
    long long off = 0;
    int first = 1;

    journal_epoch = pending_new_epoch();
    for (;;) {
        pending_header h;
        ssize_t got = pread(journal_fd, &h, sizeof h, off);
        char *record;

        if (got < 0) return -1;
        if (got != (ssize_t)sizeof h || h.magic != PENDING_MAGIC || (!first && h.epoch != journal_epoch) ||
            off + (long long)(sizeof h + h.length) > STORE_PENDING_RESERVE_BYTES)
            break;
        record = malloc((size_t)h.length + 1);
        if (!record) return -1;
        if (pread(journal_fd, record, h.length, off + (long long)sizeof h) != (ssize_t)h.length ||
            pending_checksum(h, record) != h.checksum) {
            free(record);
            break;
        }
        record[h.length] = '\0';
        h.status[sizeof h.status - 1] = '\0';
        if (first) journal_epoch = h.epoch;
        first = 0;
        if (pending_put_locked(h.id, h.status, h.median_us, record, 1, 1) != 0) return -1;
        off += (long long)(sizeof h + h.length);
    }
    journal_end = off;
    return 0;
}

/* ------------------------------------------------------------------------ the API -- */

int store_pending_open(const char *data_dir, char *err, size_t err_len)
{
    int rc = -1;

    pthread_mutex_lock(&pending_mu);
    if ((size_t)snprintf(journal_path, sizeof journal_path, "%s/%s", data_dir, PENDING_FILE) >= sizeof journal_path) {
        snprintf(err, err_len, "data_dir path too long: %s", data_dir);
        goto out;
    }
    journal_fd = open(journal_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (journal_fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", journal_path, strerror(errno));
        goto out;
    }
    if (pending_read_back_locked() != 0) {
        snprintf(err, err_len, "cannot read %s: %s", journal_path, strerror(errno));
        close(journal_fd);
        journal_fd = -1;
        goto out;
    }
    reserve_ok = 1;
    pending_reserve_locked();
    if (n_entries) log_warn("store: %zu final record(s) an earlier process could not store wait in %s", n_entries, journal_path);
    rc = 0;
out:
    pthread_mutex_unlock(&pending_mu);
    return rc;
}

void store_pending_close(void)
{
    size_t i, waiting = 0;

    pthread_mutex_lock(&pending_mu);
    for (i = 0; i < n_entries; i++) {
        if (entries[i].final && entries[i].journaled) waiting++;
        else if (entries[i].final)
            log_error("store: run %lld: its %s record never reached the file and had no room in %s: it is lost",
                      entries[i].id, entries[i].status, journal_path);
        free(entries[i].record);
    }
    if (waiting) log_warn("store: %zu final record(s) wait in %s for the next start", waiting, journal_path);
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    if (journal_fd >= 0) close(journal_fd);
    journal_fd = -1;
    reserve_ok = 1;
    last_write_ok = 1;
    last_write_error[0] = '\0';
    pthread_mutex_unlock(&pending_mu);
}

int store_pending_keep(long long id, const char *status, double median_us, const char *record, int final)
{
    char *copy = strdup(record ? record : "{}");
    int journaled = 0;

    if (!copy) return -1;
    pthread_mutex_lock(&pending_mu);
    if (final) journaled = pending_append_locked(id, status, median_us, copy) == 0;
    if (journaled) log_warn("store: run %lld: its %s record waits in %s until the file takes it", id, status, journal_path);
    if (pending_put_locked(id, status, median_us, copy, final, journaled) != 0) journaled = -1;
    pthread_mutex_unlock(&pending_mu);
    return journaled;
}

void store_pending_forget(long long id)
{
    long long at;

    pthread_mutex_lock(&pending_mu);
    at = pending_find_locked(id);
    if (at >= 0) {
        pending_remove_locked((size_t)at);
        pending_journal_reset_locked();
    }
    pthread_mutex_unlock(&pending_mu);
}

char *store_pending_record(long long id)
{
    char *record = NULL;
    long long at;

    pthread_mutex_lock(&pending_mu);
    at = pending_find_locked(id);
    if (at >= 0) record = strdup(entries[at].record);
    pthread_mutex_unlock(&pending_mu);
    return record;
}

int store_pending_status(long long id, char *out, size_t len)
{
    long long at;

    pthread_mutex_lock(&pending_mu);
    at = pending_find_locked(id);
    if (at >= 0) snprintf(out, len, "%s", entries[at].status);
    pthread_mutex_unlock(&pending_mu);
    return at >= 0;
}

int store_pending_holds_final(long long id)
{
    long long at;
    int final;

    pthread_mutex_lock(&pending_mu);
    at = pending_find_locked(id);
    final = at >= 0 && entries[at].final;
    pthread_mutex_unlock(&pending_mu);
    return final;
}

void store_pending_note_write(int ok, const char *error, int no_space)
{
    pthread_mutex_lock(&pending_mu);
    if (ok) {
        if (!last_write_ok) log_info("store: the file takes writes again");
        last_write_ok = 1;
        last_write_error[0] = '\0';
    } else {
        write_failures++;
        if (last_write_ok)
            log_error("store: %s; new runs are refused, and the records it refuses wait in %s", error ? error : "a write failed",
                      journal_path);
        last_write_ok = 0;
        last_write_no_space = no_space;
        snprintf(last_write_error, sizeof last_write_error, "%s", error ? error : "a write failed");
    }
    pthread_mutex_unlock(&pending_mu);
}

static int pending_failing_locked(void) { return !last_write_ok || n_entries > 0 || (journal_fd >= 0 && !reserve_ok); }

int store_pending_failing(void)
{
    int failing;

    pthread_mutex_lock(&pending_mu);
    failing = pending_failing_locked();
    pthread_mutex_unlock(&pending_mu);
    return failing;
}

int store_pending_retry(store_pending_land_fn land, store_pending_probe_fn probe)
{
    pending_entry *todo = NULL;
    size_t n = 0, i;
    char err[400];
    int ok = 1, no_space = 0, should_probe, failing;

    /* A copy to work on: landing is a write of the file, not to be done under pending_mu. */
    pthread_mutex_lock(&pending_mu);
    if (journal_fd >= 0 && !reserve_ok) pending_reserve_locked();
    if (n_entries && (todo = malloc(n_entries * sizeof *todo)) != NULL) {
        for (i = 0; i < n_entries; i++) {
            todo[n] = entries[i];
            todo[n].record = strdup(entries[i].record);
            if (todo[n].record) n++;
        }
    }
    pthread_mutex_unlock(&pending_mu);

    for (i = 0; i < n && ok; i++) {
        err[0] = '\0';
        no_space = 0;
        if (land(todo[i].id, todo[i].status, todo[i].median_us, todo[i].record, err, sizeof err, &no_space) != 0) {
            store_pending_note_write(0, err, no_space);
            ok = 0;
            break;
        }
        store_pending_note_write(1, NULL, 0);
        log_info("store: run %lld's %s record reached the file", todo[i].id, todo[i].status);
        pthread_mutex_lock(&pending_mu);
        {
            long long at = pending_find_locked(todo[i].id);
            if (at >= 0 && entries[at].seq == todo[i].seq) pending_remove_locked((size_t)at);
        }
        pthread_mutex_unlock(&pending_mu);
    }
    for (i = 0; i < n; i++) free(todo[i].record);
    free(todo);

    pthread_mutex_lock(&pending_mu);
    should_probe = !last_write_ok && n_entries == 0;
    pthread_mutex_unlock(&pending_mu);
    if (ok && should_probe) { /* a write failed and nothing waits: ask the file whether it takes writes now */
        err[0] = '\0';
        no_space = 0;
        if (probe(err, sizeof err, &no_space) == 0)
            store_pending_note_write(1, NULL, 0);
        else
            store_pending_note_write(0, err, no_space);
    }

    pthread_mutex_lock(&pending_mu);
    if (ok) pending_journal_reset_locked();
    failing = pending_failing_locked();
    pthread_mutex_unlock(&pending_mu);
    return failing ? -1 : 0;
}

void store_pending_get_state(store_pending_state *st)
{
    size_t i;

    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&pending_mu);
    st->failing = pending_failing_locked();
    st->waiting = (long long)n_entries;
    for (i = 0; i < n_entries; i++)
        if (!entries[i].journaled) st->waiting_memory++;
    st->write_failures = write_failures;
    st->reserve_bytes = journal_fd >= 0 && reserve_ok ? STORE_PENDING_RESERVE_BYTES : 0;
    snprintf(st->journal, sizeof st->journal, "%s", journal_path);
    if (!last_write_ok) {
        st->no_space = last_write_no_space;
        snprintf(st->error, sizeof st->error, "%s", last_write_error);
    } else if (journal_fd >= 0 && !reserve_ok) {
        st->no_space = reserve_no_space;
        snprintf(st->error, sizeof st->error, "%s", reserve_error);
    } else if (n_entries) {
        snprintf(st->error, sizeof st->error, "%zu record(s) wait to be written", n_entries);
    }
    pthread_mutex_unlock(&pending_mu);
}
