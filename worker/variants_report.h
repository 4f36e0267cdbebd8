/* variants_report.h — what this worker can run, for its hello: each variant, whether the
 * library it opens at run time loads here (cuDNN), and which one it loaded. The front answers
 * /v1/variants from these reports and never opens a CUDA library itself.
 */
#ifndef VARIANTS_REPORT_H
#define VARIANTS_REPORT_H

#include <cjson/cJSON.h>

/* [{"name", "ready": bool, "why": string|null, "library": {"name","requested","version",
 * "path"}|null}, …] in the order of the variants table. Caller deletes; NULL: out of memory. */
cJSON *worker_variants_json(void);

#endif
