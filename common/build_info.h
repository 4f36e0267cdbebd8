/* build_info.h — what built this binary: version, git commit and whether the tree had
 * uncommitted changes, compilers, CUDA toolkit, GPU architectures, build time. The Makefile
 * writes the values into $(BUILD)/build_info_values.h; nothing here is typed by hand. */
#ifndef BUILD_INFO_H
#define BUILD_INFO_H

#include <cjson/cJSON.h>

/* "0.1.0" */
const char *build_info_version(void);

/* The git commit (12 hex digits), "unknown" when built outside a git tree. */
const char *build_info_commit(void);

/* One line for `attnd --version`: "attnd 0.1.0 (commit 1a2b3c4d5e6f, dirty) built … with …". */
void build_info_line(char *out, size_t len);

/* The "build" object of /v1/device and of every run record: version, commit, dirty,
 * compiler, nvcc, cuda_toolkit, gencode (the architectures compiled), built (UTC). Caller
 * deletes; NULL when out of memory. */
cJSON *build_info_json(void);

#endif
