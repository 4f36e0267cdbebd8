/* history_csv.h — a page of run records as CSV (GET /v1/runs?format=csv): the columns that
 * docs/api.md lists ("CSV export"), one row per run, for spreadsheets and pandas. */
#ifndef ROUTES_HISTORY_CSV_H
#define ROUTES_HISTORY_CSV_H

#include <stddef.h>

/* records: a JSON array text of run records (store_query_runs). The CSV text, malloc'd, a
 * header line first and CRLF line ends (RFC 4180), its length in *len; NULL when out of
 * memory or records is not an array. A field a record lacks (or null) is an empty cell. */
char *history_csv(const char *records, size_t *len);

#endif
