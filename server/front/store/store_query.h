/* store_query.h — a history query (GET /v1/runs): what it filters and groups by, and its
 * SQL for SQLite and for PostgreSQL. One builder for both stores, so that they answer the
 * same question the same way, and only the filters a query gives are named in it: a query
 * that says "batch = ?" lets the database walk the (batch, position) index, where "? IS NULL
 * OR batch = ?" would make it scan every row. The rest of the front meets the query types
 * through store.h, which runs them (store_query_runs, store_group_runs); the SQL is for the
 * store's files.
 */
#ifndef STORE_QUERY_H
#define STORE_QUERY_H

/* What GET /v1/runs filters and groups by besides status, cursors and time: each field a
 * column of the runs table in both stores. The database fills the columns from the record
 * it is given (store_sqlite.c: generated columns; store_pg_schema.c: a trigger), so no write
 * path names them and they never disagree with the record. */
typedef enum store_field {
    STORE_FIELD_BACKEND,
    STORE_FIELD_STATUS,
    STORE_FIELD_DEVICE,
    STORE_FIELD_NODE,
    STORE_FIELD_BATCH,
    STORE_FIELD_HEADS,
    STORE_FIELD_KV_HEADS,   /* params.kv_heads, else params.heads */
    STORE_FIELD_SEQ_Q,
    STORE_FIELD_SEQ_KV,
    STORE_FIELD_HEAD_DIM,
    STORE_FIELD_HEAD_DIM_V, /* params.head_dim_v, else params.head_dim */
    STORE_FIELD_WINDOW,     /* params.window; none when the run had no window */
    STORE_FIELD_PAGE_SIZE,  /* params.page_size, else 0: a contiguous K/V cache */
    STORE_FIELD_NUM_PAGES,  /* params.num_pages; none when the cache was contiguous */
    STORE_FIELD_RAGGED,     /* 1: params has seqlens_q or seqlens_kv (a ragged batch), else 0 */
    STORE_FIELD_DTYPE,
    STORE_FIELD_MASK,
    STORE_FIELD_IMPL,       /* impl_used (what ran), else params.impl (what was asked) */
    STORE_FIELD_GPU,        /* device.name: the GPU's name (the CPU's on the cpu device) */
    STORE_FIELD_COMMIT,     /* build.commit */
    STORE_FIELD_COUNT
} store_field;

typedef struct store_field_info {
    const char *name;   /* the query parameter, and the key of a group in an aggregate */
    const char *column; /* its column in runs */
    int integer;        /* 1: an integer column (its value a decimal text), 0: text */
    int boolean;        /* 1: an integer column of 0 and 1 that the API shows as false and true */
} store_field_info;

/* Indexed by store_field. */
extern const store_field_info store_fields[STORE_FIELD_COUNT];

#define STORE_QUERY_MAX_LIMIT 1000

/* One history query. Every given filter must hold (AND). Positions are the cursor's units
 * (below). Strings are the caller's and already checked (the store binds them as values). */
typedef struct store_run_query {
    long long after;              /* only positions > after (0: from the start) */
    long long before;             /* only positions < before (0: no bound) */
    int limit;                    /* at most this many runs (or groups), 1..STORE_QUERY_MAX_LIMIT */
    int newest_first;             /* 1: highest position first; 0: oldest first */
    const char *since;            /* created >= since (YYYY-MM-DDTHH:MM:SS.mmmZ); NULL: any */
    const char *tag;              /* runs whose params.tags holds it; NULL: any */
    const char *value[STORE_FIELD_COUNT]; /* field == value (integers as decimal text); NULL: any */
    store_field group_by[STORE_FIELD_COUNT]; /* store_group_runs: the group's fields, in order */
    int n_group_by;
} store_run_query;

/* A page of GET /v1/studies: newest first, before a cursor (0: from the newest), at most
 * limit (1..STORE_STUDY_MAX_LIMIT), with the given status and tag (NULL: any). A cursor is
 * the study's id with SQLite, its fleet position with PostgreSQL. */
#define STORE_STUDY_MAX_LIMIT 100
typedef struct store_study_query {
    long long before;
    int limit;
    const char *status;
    const char *tag;
} store_study_query;

/* ---------------------------------------------------------------- its SQL -- */

typedef enum store_sql_dialect { STORE_SQL_SQLITE, STORE_SQL_POSTGRESQL } store_sql_dialect;

#define STORE_SQL_MAX_PARAMS 32

/* A statement and its parameters, numbered 1..n in text (?N in SQLite, $N in PostgreSQL).
 * value[] points into the query it was built from, or into numbers[] here: use it while
 * both are alive, and do not copy the struct. */
typedef struct store_sql {
    char text[4096];
    int n;
    const char *value[STORE_SQL_MAX_PARAMS];
    int integer[STORE_SQL_MAX_PARAMS]; /* 1: an integer in decimal text (SQLite binds it as one) */
    char numbers[4][24];               /* the cursors and the limit, as text */
} store_sql;

/* The page of q: rows (record text, position), in q's order, at most q->limit. 0, or -1
 * when q is out of bounds (a group or too many parameters). */
int store_sql_list(const store_run_query *q, store_sql_dialect d, store_sql *out);

/* The aggregate of q: rows (the q->n_group_by group values, count, median of medians, min,
 * max) ordered by the group values, nulls last, at most q->limit + 1 (one more than asked:
 * the caller says whether there were more). 0, or -1 when q has no group or is out of bounds. */
int store_sql_groups(const store_run_query *q, store_sql_dialect d, store_sql *out);

#endif
