/* store_pg_schema.h — the tables of the PostgreSQL fleet store and the named statements that
 * use them. Only server/front/store/store_pg.c includes it: it keeps the connection, this file says what
 * the database looks like. */
#ifndef STORE_PG_SCHEMA_H
#define STORE_PG_SCHEMA_H

#include <stddef.h>

#include <libpq-fe.h>

/* Bring the database on conn to the newest schema, in one transaction under an advisory
 * lock, so attnd processes starting together on one database migrate it once. *version gets
 * the schema version now stored. 0, or -1 with err filled (the transaction rolled back). */
int store_pg_schema_migrate(PGconn *conn, int *version, char *err, size_t err_len);

/* The fixed statements, prepared on every new connection under these names. */
typedef enum store_pg_statement {
    PG_RUN_UPDATE,    /* $1 uuid $2 status $3 record $4 version $5 median_us: newer versions only */
    PG_RUN_INSERT,    /* $1 id $2 uuid $3 node $4 created $5 backend $6 device $7 status
                       * $8 version $9 median_us $10 record: takes the next fleet position */
    PG_RUN_DELETE,    /* $1 uuid: the run and its trace */
    PG_TRACE_PUT,     /* $1 run id $2 json */
    PG_RUN_GET,       /* $1 id */
    PG_RUN_STATUS,    /* $1 id */
    PG_TRACE_GET,     /* $1 run id */
    PG_RUN_COUNT,     /* no parameters */
    PG_INSTANCE_PUT,  /* $1 uuid $2 node: the instance number, new or existing */
    PG_INSTANCE_NODE, /* $1 instance */
    PG_HEARTBEAT,     /* $1 instance $2 node $3 version $4 devices $5 started */
    PG_NODES,         /* no parameters */
    PG_NODE_KNOWN,    /* $1 node: whether it wrote runs or a heartbeat */
    PG_STUDY_PUT,     /* $1 id $2 uuid $3 node $4 created $5 status $6 version $7 record: insert, or a newer version */
    PG_STUDY_GET,     /* $1 id */
    PG_STUDY_LIST,    /* $1 status $2 tag (NULL: any) $3 before (0: none) $4 limit */
    PG_STATEMENT_COUNT
} store_pg_statement;

/* The name a statement is prepared under (it shows in pg_stat_activity). */
const char *store_pg_statement_name(store_pg_statement s);

/* Prepare every fixed statement on conn. 0, or -1 with err filled. */
int store_pg_schema_prepare(PGconn *conn, char *err, size_t err_len);

#endif
