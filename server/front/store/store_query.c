/* store_query.c — the SQL of history queries, for both stores (store_query.h), and the
 * fields they filter and group by (store.h's store_fields).
 *
 * A page is "SELECT record, position FROM runs WHERE <the filters given> ORDER BY position
 * LIMIT n": each filter is an equality on a column with a (column, position) index, so the
 * database walks that index from the cursor in the asked order and stops after n rows,
 * whatever the size of the history. A tag is a row of run_tags (tag, position): the page is
 * then driven from there. The aggregate ranks the runs of each group by their median with
 * window functions (both SQLite and PostgreSQL have them) and takes the middle one, or the
 * mean of the middle two.
 */
#include "server/front/store/store_query.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const store_field_info store_fields[STORE_FIELD_COUNT] = {
    [STORE_FIELD_BACKEND] = {"backend", "backend", 0, 0},
    [STORE_FIELD_STATUS] = {"status", "status", 0, 0},
    [STORE_FIELD_DEVICE] = {"device", "device", 0, 0},
    [STORE_FIELD_NODE] = {"node", "node", 0, 0},
    [STORE_FIELD_BATCH] = {"batch", "batch", 1, 0},
    [STORE_FIELD_HEADS] = {"heads", "heads", 1, 0},
    [STORE_FIELD_KV_HEADS] = {"kv_heads", "kv_heads", 1, 0},
    [STORE_FIELD_SEQ_Q] = {"seq_q", "seq_q", 1, 0},
    [STORE_FIELD_SEQ_KV] = {"seq_kv", "seq_kv", 1, 0},
    [STORE_FIELD_HEAD_DIM] = {"head_dim", "head_dim", 1, 0},
    [STORE_FIELD_HEAD_DIM_V] = {"head_dim_v", "head_dim_v", 1, 0},
    [STORE_FIELD_WINDOW] = {"window", "window_size", 1, 0}, /* WINDOW is an SQL keyword */
    [STORE_FIELD_PAGE_SIZE] = {"page_size", "page_size", 1, 0},
    [STORE_FIELD_NUM_PAGES] = {"num_pages", "num_pages", 1, 0},
    [STORE_FIELD_RAGGED] = {"ragged", "ragged", 1, 1},
    [STORE_FIELD_DTYPE] = {"dtype", "dtype", 0, 0},
    [STORE_FIELD_MASK] = {"mask", "mask", 0, 0},
    [STORE_FIELD_IMPL] = {"impl", "impl", 0, 0},
    [STORE_FIELD_GPU] = {"gpu", "device_name", 0, 0},
    [STORE_FIELD_COMMIT] = {"commit", "build_commit", 0, 0}, /* COMMIT too */
};

/* What differs between the two: the position column of runs and of run_tags, and how a
 * parameter is written (PostgreSQL gets every value as text, cast where the column alone
 * would not type it). */
typedef struct dialect {
    const char *position, *tag_position;
} dialect;

static const dialect dialects[] = {
    [STORE_SQL_SQLITE] = {"id", "run_id"},
    [STORE_SQL_POSTGRESQL] = {"seq", "seq"},
};

/* Appends to out->text; the first overflow sticks in *failed. */
static void put(store_sql *out, int *failed, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(store_sql *out, int *failed, const char *fmt, ...)
{
    size_t len = strlen(out->text);
    va_list ap;
    int n;

    if (*failed) return;
    va_start(ap, fmt);
    n = vsnprintf(out->text + len, sizeof out->text - len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof out->text - len) *failed = 1;
}

/* Add a parameter and append its placeholder: ?N, or $N::bigint / $N::text. */
static void param(store_sql *out, store_sql_dialect d, int *failed, const char *value, int integer)
{
    if (out->n >= STORE_SQL_MAX_PARAMS) {
        *failed = 1;
        return;
    }
    out->value[out->n] = value;
    out->integer[out->n] = integer;
    out->n++;
    if (d == STORE_SQL_SQLITE)
        put(out, failed, "?%d", out->n);
    else
        put(out, failed, "$%d::%s", out->n, integer ? "bigint" : "text");
}

/* A number kept in out (numbers[slot]) as a parameter. */
static void number_param(store_sql *out, store_sql_dialect d, int *failed, int slot, long long x)
{
    snprintf(out->numbers[slot], sizeof out->numbers[slot], "%lld", x);
    param(out, d, failed, out->numbers[slot], 1);
}

/* "FROM runs r [JOIN run_tags t …] WHERE …": the runs q selects. pos is the position column
 * the order and the cursors use (t's when a tag drives the query). */
static void from_where(const store_run_query *q, store_sql_dialect d, store_sql *out, int *failed, char *pos,
                       size_t pos_len)
{
    const dialect *dl = &dialects[d];
    int i;

    put(out, failed, " FROM runs r");
    if (q->tag) {
        put(out, failed, " JOIN run_tags t ON t.%s = r.%s AND t.tag = ", dl->tag_position, dl->position);
        param(out, d, failed, q->tag, 0);
        snprintf(pos, pos_len, "t.%s", dl->tag_position);
    } else {
        snprintf(pos, pos_len, "r.%s", dl->position);
    }
    put(out, failed, " WHERE %s > ", pos);
    number_param(out, d, failed, 0, q->after);
    if (q->before > 0) {
        put(out, failed, " AND %s < ", pos);
        number_param(out, d, failed, 1, q->before);
    }
    if (q->since) {
        put(out, failed, " AND r.created >= ");
        param(out, d, failed, q->since, 0);
    }
    for (i = 0; i < STORE_FIELD_COUNT; i++) {
        if (!q->value[i]) continue;
        put(out, failed, " AND r.%s = ", store_fields[i].column);
        param(out, d, failed, q->value[i], store_fields[i].integer);
    }
}

static int limit_of(const store_run_query *q)
{
    return q->limit < 1 ? 1 : q->limit > STORE_QUERY_MAX_LIMIT ? STORE_QUERY_MAX_LIMIT : q->limit;
}

int store_sql_list(const store_run_query *q, store_sql_dialect d, store_sql *out)
{
    char pos[32];
    int failed = 0;

    memset(out, 0, sizeof *out);
    put(out, &failed, "SELECT r.record, r.%s", dialects[d].position);
    from_where(q, d, out, &failed, pos, sizeof pos);
    put(out, &failed, " ORDER BY %s%s LIMIT ", pos, q->newest_first ? " DESC" : "");
    number_param(out, d, &failed, 2, limit_of(q));
    return failed ? -1 : 0;
}

/* The group columns as a list: "r.backend AS g0, r.seq_q AS g1" (as_select), "r.backend,
 * r.seq_q" (partition) or "g0 NULLS LAST, g1 NULLS LAST" (order) or "g0, g1". */
enum group_list { GROUP_SELECT, GROUP_PARTITION, GROUP_NAMES, GROUP_ORDER };
static void group_list(const store_run_query *q, store_sql *out, int *failed, enum group_list how)
{
    int i;

    for (i = 0; i < q->n_group_by; i++) {
        const char *column = store_fields[q->group_by[i]].column, *sep = i ? ", " : "";
        switch (how) {
        case GROUP_SELECT: put(out, failed, "%sr.%s AS g%d", sep, column, i); break;
        case GROUP_PARTITION: put(out, failed, "%sr.%s", sep, column); break;
        case GROUP_NAMES: put(out, failed, "%sg%d", sep, i); break;
        case GROUP_ORDER: put(out, failed, "%sg%d NULLS LAST", sep, i); break;
        }
    }
}

int store_sql_groups(const store_run_query *q, store_sql_dialect d, store_sql *out)
{
    char pos[32];
    int failed = 0, i;

    memset(out, 0, sizeof *out);
    if (q->n_group_by < 1 || q->n_group_by > STORE_FIELD_COUNT) return -1;
    for (i = 0; i < q->n_group_by; i++)
        if ((unsigned)q->group_by[i] >= STORE_FIELD_COUNT) return -1;
    put(out, &failed, "WITH m AS (SELECT ");
    group_list(q, out, &failed, GROUP_SELECT);
    put(out, &failed, ", r.median_us AS v, row_number() OVER (PARTITION BY ");
    group_list(q, out, &failed, GROUP_PARTITION);
    put(out, &failed, " ORDER BY r.median_us) AS k, count(*) OVER (PARTITION BY ");
    group_list(q, out, &failed, GROUP_PARTITION);
    put(out, &failed, ") AS n");
    from_where(q, d, out, &failed, pos, sizeof pos);
    put(out, &failed, " AND r.median_us IS NOT NULL) SELECT ");
    group_list(q, out, &failed, GROUP_NAMES);
    /* The median: the middle rank of an odd count, the mean of the middle two of an even one. */
    put(out, &failed, ", count(*), avg(v) FILTER (WHERE k = (n + 1) / 2 OR k = (n + 2) / 2), min(v), max(v)"
                      " FROM m GROUP BY ");
    group_list(q, out, &failed, GROUP_NAMES);
    put(out, &failed, " ORDER BY ");
    group_list(q, out, &failed, GROUP_ORDER);
    put(out, &failed, " LIMIT ");
    number_param(out, d, &failed, 2, limit_of(q) + 1);
    return failed ? -1 : 0;
}
