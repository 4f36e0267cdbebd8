/* store.c — the front's one door to the history (store.h): this machine's SQLite file
 * alone, or that file as the outbox of the fleet's PostgreSQL.
 *
 * Writes always go to the local file (with an outbox row when in a fleet) and then kick the
 * outbox thread: a run never waits for, nor fails because of, the database. A run's write
 * that the file refuses (a full disk) is kept (store_pending.h: a final record in a journal
 * with room reserved for it) and retried by the same thread; meanwhile new runs are refused
 * and /readyz says why. Reads of one run look at what waits first (its freshest state), then
 * here (this node's runs), then in the database (the other nodes'). The history list reads
 * the database after sending this node's waiting writes, so a client sees its own run in the
 * list as soon as it has its answer.
 */
#include "server/front/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/front/store/store_local.h"
#include "server/front/store/store_local_outbox.h"
#include "server/front/store/store_outbox.h"
#include "server/front/store/store_pending.h"
#include "server/front/store/store_pg.h"
#include "server/front/store/store_sqlite.h"

/* How long a data_dir that has no instance number yet waits for the database at start. */
#define STORE_REGISTER_WAIT_S 15
/* Instance n's run and tensor ids are n · 2^32 + 1, + 2, …: unique across the fleet without
 * asking the database for each, and below 2^53 (exact in JSON numbers) up to 2^21 instances. */
#define STORE_ID_BITS 32

static int store_fleet;          /* the history is in PostgreSQL */
static char node_name[128];
static long long instance_number;
static char started_at[40];

const char *store_node(void) { return node_name; }
long long store_instance(void) { return instance_number; }

/* A random (version 4) UUID in its 36-character text form. 0, or -1. */
static int store_new_uuid(char out[37])
{
    unsigned char b[16];

    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return 0;
}

static void store_set_node(const char *configured)
{
    if (configured && configured[0]) {
        snprintf(node_name, sizeof node_name, "%s", configured);
    } else if (gethostname(node_name, sizeof node_name) != 0 || !node_name[0]) {
        snprintf(node_name, sizeof node_name, "localhost");
    }
    node_name[sizeof node_name - 1] = '\0';
    clock_text_now_iso(started_at, sizeof started_at);
}

/* After the file is open: read back the final records an earlier process left waiting, land
 * what the file takes now, mark the other unfinished runs interrupted (never one whose final
 * record waits), and start the thread that retries what still waits (and, to_fleet, sends
 * the outbox). 0, or -1 with err filled (the file closed again). */
static int store_open_rest(const char *data_dir, int to_fleet, char *err, size_t err_len)
{
    if (store_pending_open(data_dir, err, err_len) != 0) goto fail;
    store_outbox_land_pending();
    if (store_local_mark_interrupted(store_pending_holds_final) != 0 || store_local_mark_studies_interrupted() != 0) {
        snprintf(err, err_len, "%s: %s", store_sqlite_path(), store_sqlite_last_error());
        goto fail_pending;
    }
    if (store_outbox_start(to_fleet) != 0) {
        snprintf(err, err_len, "cannot start the outbox thread");
        goto fail_pending;
    }
    return 0;
fail_pending:
    store_pending_close();
fail:
    store_local_close();
    return -1;
}

int store_open(const char *data_dir, char *err, size_t err_len)
{
    store_fleet = 0;
    instance_number = 0;
    store_set_node(NULL);
    if (store_local_open(data_dir, 0, err, err_len) != 0) return -1;
    return store_open_rest(data_dir, 0, err, err_len);
}

/* This data_dir's instance number: the one it was given before, or a new one from the
 * database (waiting for it up to STORE_REGISTER_WAIT_S). Also renews the node's name there. */
static long long store_instance_of(const char *uuid, char *err, size_t err_len)
{
    char text[32];
    long long known = 0, n = -1;
    int waited_ms = 0;

    if (store_local_state_get("instance", text, sizeof text) == 1) known = strtoll(text, NULL, 10);
    for (;;) {
        n = store_pg_register_instance(uuid, node_name);
        if (n > 0 || known > 0 || waited_ms >= STORE_REGISTER_WAIT_S * 1000) break;
        if (waited_ms == 0) log_warn("store: waiting for the fleet database to number this node: %s", store_pg_last_error());
        usleep(500 * 1000);
        waited_ms += 500;
    }
    if (n > 0 && known > 0 && n != known)
        log_warn("store: the fleet database numbers this data_dir %lld, it was %lld (a new database?)", n, known);
    if (n > 0) {
        snprintf(text, sizeof text, "%lld", n);
        /* Written only when it changes: a restart on a full disk needs no write here. */
        if (n != known && store_local_state_set("instance", text) != 0) return -1;
        return n;
    }
    if (known > 0) {
        log_warn("store: the fleet database is away (%s); runs wait in the outbox", store_pg_last_error());
        return known;
    }
    snprintf(err, err_len, "the fleet database did not answer within %d s, and this data_dir has never met it (its node "
             "number comes from there once): %s", STORE_REGISTER_WAIT_S, store_pg_last_error());
    return -1;
}

int store_open_settings(const settings *s, char *err, size_t err_len)
{
    char uuid[40], pg_err[256];

    store_set_node(s->node);
    store_fleet = settings_store_is_postgresql(s);
    instance_number = 0;
    if (store_local_open(s->data_dir, store_fleet, err, err_len) != 0) return -1;
    if (!store_fleet) return store_open_rest(s->data_dir, 0, err, err_len);

    if (store_local_state_get("instance_uuid", uuid, sizeof uuid) != 1) {
        if (store_new_uuid(uuid) != 0 || store_local_state_set("instance_uuid", uuid) != 0) {
            snprintf(err, err_len, "cannot record this data_dir's instance uuid");
            goto fail;
        }
    }
    /* A failed open keeps the connection words: every later call tries again. */
    if (store_pg_open(strcmp(s->store, "postgresql") && strcmp(s->store, "postgres") ? s->store : "", pg_err,
                      sizeof pg_err) != 0)
        log_warn("store: %s", pg_err);
    instance_number = store_instance_of(uuid, err, err_len);
    if (instance_number <= 0) goto fail;
    if (store_local_set_id_base(instance_number << STORE_ID_BITS) != 0) {
        snprintf(err, err_len, "cannot move this data_dir's ids to instance %lld's range", instance_number);
        goto fail;
    }
    if (store_open_rest(s->data_dir, 1, err, err_len) != 0) {
        store_pg_close();
        store_fleet = 0;
        return -1;
    }
    log_info("store: fleet node %s, instance %lld, %lld write(s) waiting in the outbox", node_name, instance_number,
             store_local_outbox_depth());
    return 0;
fail:
    store_pg_close();
    store_local_close();
    store_fleet = 0;
    return -1;
}

void store_close(void)
{
    store_outbox_stop(); /* one last try at what waits */
    if (store_fleet) store_pg_close();
    store_pending_close();
    store_local_close();
}

/* ------------------------------------------------------------------------ runs -- */

/* A write of the local file ended (rc 0: it took it): note it for /readyz and the refusal
 * of new runs, and wake the thread when there is something to carry or retry. Returns rc. */
static int store_wrote(int rc)
{
    char reason[400];
    int no_space;

    if (rc == 0) {
        store_pending_note_write(1, NULL, 0);
        if (store_fleet || store_pending_failing()) store_outbox_kick();
        return rc;
    }
    no_space = store_sqlite_failure(reason, sizeof reason);
    store_pending_note_write(0, reason, no_space);
    store_outbox_kick(); /* the retries begin */
    return rc;
}

static int store_status_is_final(const char *status)
{
    return status && (!strcmp(status, "done") || !strcmp(status, "failed") || !strcmp(status, "cancelled"));
}

long long store_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           double median_us, const char *record_json)
{
    char uuid[40];
    long long id;

    if (store_new_uuid(uuid) != 0) return -1;
    id = store_local_insert_run(created, backend, device, status, median_us, record_json, uuid, node_name);
    store_wrote(id > 0 ? 0 : -1);
    return id;
}

int store_update_run(long long id, const char *status, double median_us, const char *record_json)
{
    int rc = store_local_update_run(id, status, median_us, record_json);

    if (rc == 1) return -1; /* no such run */
    if (store_wrote(rc) == 0) {
        store_pending_forget(id); /* an older state that waited is superseded */
        return 0;
    }
    /* Refused: the run goes on, and so must what its client was told. Its latest state waits
     * in memory (GET answers it) and, when final, in the journal (a restart finds it). */
    return store_pending_keep(id, status, median_us, record_json, store_status_is_final(status)) < 0 ? -1 : 0;
}

int store_delete_run(long long id)
{
    int rc = store_local_delete_run(id);

    if (rc == 1) return -1; /* no such run */
    if (store_wrote(rc) == 0) store_pending_forget(id);
    return rc;
}

char *store_get_run(long long id)
{
    char *record = store_pending_record(id); /* a state the file has not taken yet is the freshest */

    if (!record) record = store_local_get_run(id);
    if (!record && store_fleet && store_pg_get_run(id, &record) != 1) record = NULL;
    return record;
}

int store_get_run_status(long long id, char *out, size_t len)
{
    char *status = NULL;
    int rc;

    if (store_pending_status(id, out, len)) return 1;
    rc = store_local_get_run_status(id, out, len);

    if (rc != 0 || !store_fleet) return rc;
    rc = store_pg_get_run_status(id, &status);
    if (rc == 1) snprintf(out, len, "%s", status);
    free(status);
    return rc < 0 ? 0 : rc;
}

char *store_query_runs(const store_run_query *q, long long *first, long long *last)
{
    if (!store_fleet) return store_local_query_runs(q, first, last);
    store_outbox_flush(); /* this node's own writes first; when the database is away the read fails too */
    return store_pg_query_runs(q, first, last);
}

char *store_group_runs(const store_run_query *q, int *more)
{
    if (!store_fleet) return store_local_group_runs(q, more);
    store_outbox_flush();
    return store_pg_group_runs(q, more);
}

int store_node_known(const char *node)
{
    if (!strcmp(node, node_name)) return 1; /* this node, before its first run or heartbeat */
    return store_fleet ? store_pg_node_known(node) : store_local_node_known(node);
}

char *store_list_runs(long long after, int limit, const char *backend, const char *status)
{
    store_run_query q = {.after = after, .limit = limit};

    q.value[STORE_FIELD_BACKEND] = backend && *backend ? backend : NULL;
    q.value[STORE_FIELD_STATUS] = status && *status ? status : NULL;
    return store_query_runs(&q, NULL, NULL);
}

long long store_count_runs(void) { return store_local_count_runs(); }

/* ------------------------------------------------------------------------ studies -- */

long long store_insert_study(const char *created, const char *status, const char *record_json)
{
    char uuid[40];
    long long id;

    if (store_new_uuid(uuid) != 0) return -1;
    id = store_local_insert_study(created, status, record_json, uuid, node_name);
    store_wrote(id > 0 ? 0 : -1);
    return id;
}

int store_update_study(long long id, const char *status, const char *record_json)
{
    int rc = store_local_update_study(id, status, record_json);

    if (rc == 1) return -1; /* no such study */
    return store_wrote(rc);
}

char *store_get_study(long long id)
{
    char *record = store_local_get_study(id);

    if (!record && store_fleet && store_pg_get_study(id, &record) != 1) record = NULL;
    return record;
}

char *store_list_studies(const store_study_query *q, long long *last, int *count)
{
    if (!store_fleet) return store_local_list_studies(q, last, count);
    store_outbox_flush(); /* this node's own studies first */
    return store_pg_list_studies(q, last, count);
}

int store_put_trace(long long run_id, const char *json)
{
    return store_wrote(store_local_put_trace(run_id, json));
}

char *store_get_trace(long long run_id)
{
    char *json = store_local_get_trace(run_id);
    if (!json && store_fleet && store_pg_get_trace(run_id, &json) != 1) json = NULL;
    return json;
}

/* ------------------------------------------------------------------------ tensors -- */

long long store_tensor_issue(const char *device)
{
    long long id = store_local_tensor_issue(device);
    store_wrote(id > 0 ? 0 : -1);
    return id;
}
int store_tensor_known(long long id) { return store_local_tensor_known(id); }
int store_tensor_forget(long long id) { return store_local_tensor_forget(id); }

int store_tensor_elsewhere(long long id, char *node, size_t len)
{
    long long owner = id >> STORE_ID_BITS;

    if (!store_fleet || owner <= 0 || owner == instance_number) return 0;
    if (store_pg_instance_node(owner, node, len) != 1) snprintf(node, len, "instance %lld", owner);
    return 1;
}

/* ------------------------------------------------------------------------ nodes -- */

int store_heartbeat(const char *devices_json)
{
    char version[160];

    snprintf(version, sizeof version, "%s (%s)", build_info_version(), build_info_commit());
    if (store_fleet) {
        int rc = store_pg_heartbeat(instance_number, node_name, version, devices_json, started_at);
        if (rc == 0 && !store_available()) store_outbox_kick(); /* the database is back: do not wait for the retry */
        return rc;
    }
    return store_wrote(store_local_heartbeat(0, node_name, version, devices_json, started_at));
}

char *store_nodes_json(void) { return store_fleet ? store_pg_nodes_json() : store_local_nodes_json(); }

void store_get_health(store_health *h)
{
    store_pending_state p;

    memset(h, 0, sizeof *h);
    store_pending_get_state(&p);
    h->backend = store_fleet ? "postgresql" : "sqlite";
    h->writable = !p.failing;
    h->no_space = p.no_space;
    h->pending_records = p.waiting;
    h->pending_in_memory = p.waiting_memory;
    h->write_failures = p.write_failures;
    h->reserve_bytes = p.reserve_bytes;
    snprintf(h->file, sizeof h->file, "%s", store_sqlite_path());
    snprintf(h->journal, sizeof h->journal, "%s", p.journal);
    snprintf(h->write_error, sizeof h->write_error, "%s", p.error);
    h->database_up = store_fleet ? 1 : h->writable; /* with SQLite the file is the database */
    if (store_fleet) {
        store_outbox_state st;
        store_outbox_get_state(&st);
        h->database_up = st.database_up;
        h->outbox_depth = st.depth;
        h->outbox_sent = st.sent;
        h->outbox_failures = st.failures;
        snprintf(h->last_error, sizeof h->last_error, "%s", st.last_error);
    }
}

int store_available(void) { return !store_fleet || store_outbox_database_up(); }

int store_refusal(char *code, size_t code_len, char *message, size_t message_len)
{
    store_pending_state p;

    store_pending_get_state(&p);
    if (!p.failing) return 0;
    snprintf(code, code_len, "%s", p.no_space ? "store_full" : "store_failing");
    snprintf(message, message_len, "the run history cannot keep a new run's result now: %s; %s", p.error,
             p.no_space ? "runs are accepted again once data_dir has space" : "retry later");
    return p.no_space ? 507 : 503;
}
