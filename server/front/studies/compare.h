/* compare.h — GET /v1/compare (docs/api.md, Compare): whether one set of runs is faster or
 * slower than another, by how much, with a Welch interval (study_stats.h), and what differs
 * between them besides the variant (build, GPU, clocks, driver, library, problem).
 *
 * A side is a run id ("17"), several runs of one configuration ("17,18,19"), the runs of one
 * variant of a study ("study:3:flash"), or a whole study ("study:3", against another whole
 * study: one row per variant the two share). The records are read from the store.
 */
#ifndef COMPARE_H
#define COMPARE_H

#include <cjson/cJSON.h>

#include "common/api_error.h"

#define COMPARE_MAX_RUNS 100           /* runs named on one side */
#define COMPARE_DEFAULT_CONFIDENCE 0.95
#define COMPARE_DEFAULT_NOISE_FLOOR 0.01

/* The answer of GET /v1/compare for its query (an object of strings): the comparison
 * (caller deletes), or NULL with e: 400 (missing, malformed or unknown parameters, a whole
 * study against runs), 404 (no such run or study; field names the side), 409 not_done (a run
 * that is not done; a study variant without a done run), 503/500 when the store cannot be
 * read. */
cJSON *compare_answer(const cJSON *query, api_error *e);

#endif
