/* test_store_pending.c — the records the SQLite file refused (store_pending.h): kept in memory,
 * final ones in data_dir/attnd.pending with its reserve allocated, read back by the next open,
 * landed oldest first up to the first refusal, the journal emptied once nothing waits; a torn
 * entry ends the read, and entries of an older epoch behind a reset are never read back; a
 * record with no room in the journal waits in memory; a failed write without records is
 * cleared by a probe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "server/front/store/store_pending.h"

static long long refuse_id = -1; /* land refuses this run (a full disk) */
static int landed[32], probed;

static int land(long long id, const char *status, double median_us, const char *record, char *err, size_t err_len,
                int *no_space)
{
    (void)status, (void)median_us, (void)record;
    if (id == refuse_id) {
        snprintf(err, err_len, "cannot write attnd.db: database or disk is full");
        *no_space = 1;
        return -1;
    }
    if (id >= 0 && id < 32) landed[id]++;
    return 0;
}

static int probe(char *err, size_t err_len, int *no_space)
{
    (void)err, (void)err_len, (void)no_space;
    probed++;
    return 0;
}

static int reopen(const char *dir)
{
    char err[256] = "";

    store_pending_close();
    if (store_pending_open(dir, err, sizeof err) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/attnd-test-store-pending-XXXXXX", path[300], cmd[400], *rec, status[16], err[256] = "";
    char *big;
    store_pending_state st;
    struct stat sb;
    FILE *f;

    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/attnd.pending", dir);
    CHECK(store_pending_open(dir, err, sizeof err) == 0, "open: %s", err);
    CHECK(stat(path, &sb) == 0 && sb.st_size == STORE_PENDING_RESERVE_BYTES &&
              (long long)sb.st_blocks * 512 >= STORE_PENDING_RESERVE_BYTES,
          "the reserve is allocated, not sparse: %lld bytes, %lld blocks", (long long)sb.st_size, (long long)sb.st_blocks);
    store_pending_get_state(&st);
    CHECK(!st.failing && st.waiting == 0 && st.reserve_bytes == STORE_PENDING_RESERVE_BYTES, "a fresh store is fine");

    /* A running state waits in memory; the final one replaces it, in the journal too. */
    CHECK(store_pending_keep(5, "running", -1, "{\"id\":5,\"status\":\"running\"}", 0) == 0, "running: memory only");
    CHECK(!store_pending_holds_final(5), "not final");
    CHECK(store_pending_keep(5, "done", 12.5, "{\"id\":5,\"status\":\"done\"}", 1) == 1, "done: journaled");
    CHECK(store_pending_keep(6, "failed", -1, "{\"id\":6,\"status\":\"failed\"}", 1) == 1, "failed: journaled");
    CHECK(store_pending_status(5, status, sizeof status) == 1 && !strcmp(status, "done"), "status: %s", status);
    CHECK(store_pending_holds_final(5) && store_pending_holds_final(6) && !store_pending_holds_final(7), "finals");
    store_pending_get_state(&st);
    CHECK(st.failing && st.waiting == 2 && st.waiting_memory == 0, "two wait: %lld", st.waiting);

    /* A restart reads them back. */
    CHECK(reopen(dir) == 0, "reopen");
    rec = store_pending_record(5);
    CHECK(rec && !strcmp(rec, "{\"id\":5,\"status\":\"done\"}"), "read back: %s", rec ? rec : "(null)");
    free(rec);
    CHECK(store_pending_holds_final(6), "6 read back");

    /* The file refuses run 6: 5 lands, 6 waits, and the failure is a lack of space. */
    refuse_id = 6;
    CHECK(store_pending_retry(land, probe) == -1, "still failing");
    CHECK(landed[5] == 1 && landed[6] == 0, "5 landed");
    CHECK(store_pending_record(5) == NULL, "5 no longer waits");
    store_pending_get_state(&st);
    CHECK(st.failing && st.no_space && st.waiting == 1 && strstr(st.error, "full") && st.write_failures == 1,
          "failing for lack of space: %s", st.error);
    refuse_id = -1;
    CHECK(store_pending_retry(land, probe) == 0, "both landed");
    CHECK(landed[6] == 1 && probed == 0, "6 landed, no probe needed");
    CHECK(reopen(dir) == 0, "reopen");
    store_pending_get_state(&st);
    CHECK(!st.failing && st.waiting == 0, "the emptied journal reads back nothing: %lld", st.waiting);

    /* A torn second entry ends the read: the first is kept. */
    CHECK(store_pending_keep(7, "done", -1, "{\"id\":7}", 1) == 1 && store_pending_keep(8, "done", -1, "{\"id\":8}", 1) == 1,
          "7, 8");
    store_pending_close();
    f = fopen(path, "r+b");
    CHECK(f && fseek(f, 56 + 8 + 56 + 3, SEEK_SET) == 0 && fputc('X', f) != EOF, "tear entry 8");
    if (f) fclose(f);
    CHECK(store_pending_open(dir, err, sizeof err) == 0, "open: %s", err);
    CHECK(store_pending_holds_final(7) && !store_pending_holds_final(8), "7 read back, torn 8 not");
    CHECK(store_pending_retry(land, probe) == 0 && landed[7] == 1, "7 landed");

    /* After a reset, an old entry behind the new one is of another epoch: not read back. */
    CHECK(store_pending_keep(9, "done", -1, "{\"id\":9}", 1) == 1 && store_pending_keep(10, "done", -1, "{\"id\":10}", 1) == 1,
          "9, 10");
    CHECK(store_pending_retry(land, probe) == 0 && landed[9] == 1 && landed[10] == 1, "9, 10 landed: journal emptied");
    CHECK(store_pending_keep(11, "done", -1, "{\"id\":1}", 1) == 1, "11 takes 9's place");
    CHECK(reopen(dir) == 0, "reopen");
    CHECK(store_pending_holds_final(11) && !store_pending_holds_final(10), "11 read back, stale 10 not");
    CHECK(store_pending_retry(land, probe) == 0, "11 landed");

    /* A record bigger than the journal waits in memory only. */
    big = malloc(STORE_PENDING_RESERVE_BYTES + 2);
    CHECK(big != NULL, "malloc");
    if (big) {
        memset(big, 'x', STORE_PENDING_RESERVE_BYTES + 1);
        big[STORE_PENDING_RESERVE_BYTES + 1] = '\0';
        CHECK(store_pending_keep(12, "done", -1, big, 1) == 0, "too big: memory only");
        store_pending_get_state(&st);
        CHECK(st.waiting == 1 && st.waiting_memory == 1, "one in memory");
        CHECK(store_pending_retry(land, probe) == 0 && landed[12] == 1, "landed from memory");
        free(big);
    }

    /* A failed write with nothing waiting: the retry probes, and the probe clears it. */
    store_pending_note_write(0, "cannot write attnd.db: disk I/O error", 0);
    store_pending_get_state(&st);
    CHECK(st.failing && !st.no_space && strstr(st.error, "I/O"), "failing: %s", st.error);
    CHECK(store_pending_retry(land, probe) == 0 && probed == 1, "probed and fine");

    store_pending_close();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return CHECK_DONE();
}
