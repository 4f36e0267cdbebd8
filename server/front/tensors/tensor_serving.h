/* tensor_serving.h — resident tensors in a serving run: a ragged batch or a paged cache
 * (docs/serving.md, docs/tensors.md). For tensor_runs.c; the rest of the front uses tensors.h.
 */
#ifndef TENSOR_SERVING_H
#define TENSOR_SERVING_H

#include "common/api_error.h"
#include "common/run_request.h"

/* Whether r is a serving run (page_size, seqlens_q or seqlens_kv, block_table): its resident
 * tensors are read by tensors_apply_serving, not by the dense rules. */
int tensors_run_is_serving(const run_request *r);

/* tensors_apply_run for a serving run: look up q, k, v, block_table and the lengths' tensors
 * (404, 410; 422 dtype_mismatch, device_mismatch), fill in the lengths from the front's copy,
 * take heads, kv_heads, head_dim, head_dim_v, num_pages and the dense sides' batch and
 * lengths from the tensors (422 shape_mismatch where a given parameter disagrees), run the
 * serving checks again (400), then check every shape against the resolved problem (422
 * shape_mismatch naming the field). The block table's values are the worker's to check. */
int tensors_apply_serving(run_request *r, api_error *e);

#endif
