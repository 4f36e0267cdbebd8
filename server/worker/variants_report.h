/* variants_report.h — what this worker can run, for its hello: each variant, whether the
 * library it opens at run time loads here (cuDNN), which one it loaded, and which of its
 * implementations run on this device. The front answers /v1/variants from these reports and
 * never opens a CUDA library itself.
 */
#ifndef VARIANTS_REPORT_H
#define VARIANTS_REPORT_H

#include <cjson/cJSON.h>

#include "kernels/variants.h"

/* [{"name", "ready": bool, "why": string|null, "library": {"name","requested","version",
 * "path"}|null, "impls": [names]}, …] in the order of the variants table; "impls" lists the
 * implementations (variant_info.impls) this worker runs on its device of compute capability
 * cc (0: the cpu device). Caller deletes; NULL: out of memory. */
cJSON *worker_variants_json(int cc);

/* 1 when implementation impl of v (numbered as attn_problem.impl numbers it: 1 + its index in
 * v->info->impls) runs on a device of compute capability cc (0: the cpu device) in this binary. */
int worker_impl_runnable(const variant *v, int impl, int cc);

#endif
