# attnd — build, run, test.  `make V=1` shows the full commands.
#
#   make            build/attnd (the front) and build/attnd-worker (fat: sm_80 sm_86 sm_89 sm_90a
#                   + compute_90 PTX)
#   make run        install what a fresh Debian/Ubuntu machine lacks (when root), build (FlashInfer's
#                   module too, unless FLASHINFER=0), serve
#   make flashinfer $(BUILD)/lib/libattnd_flashinfer.so, the `flashinfer` variant: FlashInfer's
#                   wheel fetched with pip, its headers compiled (slow; optional, make test skips it)
#   make test       unit tests + API tests on the cpu device (one architecture: fast to build)
#   make test-gpu   tests/gpu on a machine with a GPU (needs build/attnd)
#   make build/fused_check   the fused-kernel harness (tests/gpu/fused_check.sh runs it)
#   make bench      attnd vs PyTorch on the same GPU (bench/run.sh)

CUDA     ?= /usr/local/cuda
NVCC     ?= $(CUDA)/bin/nvcc
CC       ?= gcc
CXX      ?= g++
BUILD    ?= build
PYTHON   ?= python3

# sm_90a, not sm_90: the H100/H200 code may use wgmma (kernels/wgmma.cuh); an sm_90a cubin runs
# on compute capability 9.0 only, which is every Hopper part. compute_90 PTX stays for newer GPUs.
GENCODE_FAT  = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 \
               -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90a,code=sm_90a \
               -gencode arch=compute_90,code=compute_90
GENCODE_TEST = -gencode arch=compute_90a,code=sm_90a
GENCODE     ?= $(GENCODE_FAT)
# the host side must know whether the wgmma kernel was really compiled (kernels/flash.cu)
HAVE_SM90A  := $(if $(findstring sm_90a,$(GENCODE)),-DFLASH_HAVE_SM90A,)

# The flags, in one place. Two executables (docs/architecture.md): the front, $(BUILD)/attnd,
# from common/ and server/front/, compiled without the CUDA headers (CPPFLAGS_NO_CUDA) and linked
# without CUDA; and the worker it starts, $(BUILD)/attnd-worker, from common/, server/worker/ and
# kernels/ with CUDA, cuBLAS and CUPTI. Unit tests are compiled and linked like the code they test.
# libpq (the PostgreSQL store, server/front/store/store_pg.c): its header lives in a folder of its own.
PG_INCLUDE      ?= $(or $(shell pg_config --includedir 2>/dev/null),/usr/include/postgresql)
WARNINGS         = -Wall,-Wextra,-Wno-unused-parameter
CPPFLAGS_NO_CUDA = -D_GNU_SOURCE -I. -I$(PG_INCLUDE) -MMD -MP
CPPFLAGS         = $(CPPFLAGS_NO_CUDA) -I$(CUDA)/include
CFLAGS           = -std=c11 -O2 -g $(subst $(comma), ,$(WARNINGS)) -pthread
NVFLAGS          = -std=c++17 -O3 -g -lineinfo $(GENCODE) $(HAVE_SM90A) -Xcompiler $(WARNINGS) \
                   --expt-relaxed-constexpr -Xptxas -warn-spills
LDFLAGS_FRONT    = -pthread -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/lib'
LDFLAGS_WORKER   = -L$(CUDA)/lib64 -pthread -Wl,-rpath,'$$ORIGIN/lib' -Wl,-rpath,$(CUDA)/lib64
LDLIBS_COMMON    = -lcjson -lm
LDLIBS_FRONT     = -lmicrohttpd -lsqlite3 -lpq $(LDLIBS_COMMON)
LDLIBS_WORKER    = -lcudart_static -lcublas -lcupti -ldl -lrt $(LDLIBS_COMMON)
comma := ,

COMMON_C  = $(wildcard common/*.c)
FRONT_C   = $(filter-out server/front/main.c,$(wildcard server/front/*.c server/front/*/*.c))
WORKER_C  = $(filter-out server/worker/main.c,$(wildcard server/worker/*.c server/worker/tensors/*.c server/worker/memory/*.c))
WORKER_CU = $(wildcard server/worker/*.cu)
KERNEL_C  = $(wildcard kernels/*.c kernels/cpu/*.c kernels/cudnn/*.c)
KERNEL_CU = $(wildcard kernels/*.cu kernels/cudnn/*.cu)

COMMON_OBJS = $(patsubst %.c,$(BUILD)/%.o,$(COMMON_C))
FRONT_OBJS  = $(patsubst %.c,$(BUILD)/%.o,$(FRONT_C))
WORKER_OBJS = $(patsubst %.c,$(BUILD)/%.o,$(WORKER_C) $(KERNEL_C)) $(patsubst %.cu,$(BUILD)/%.o,$(WORKER_CU) $(KERNEL_CU))

# Unit tests mirror the tree (tests/unit/<folder>/test_*.c) and link the archive of the folder
# they test, so each pulls in only the objects it uses: a front test links no CUDA.
UNIT_FOLDERS = common front worker kernels
UNIT_SRCS    = $(foreach f,$(UNIT_FOLDERS),$(wildcard tests/unit/$(f)/test_*.c))
UNIT_BINS    = $(patsubst %.c,$(BUILD)/%,$(UNIT_SRCS))
LIB_COMMON   = $(BUILD)/libattnd_common.a
LIB_FRONT    = $(BUILD)/libattnd_front.a
LIB_WORKER   = $(BUILD)/libattnd_worker.a

ifeq ($(V),1)
Q =
else
Q = @
endif

.PHONY: FORCE all run test test-layout test-unit test-api test-api-pg test-fuzz test-gpu bench deps deps-build bundle clean

all: $(BUILD)/attnd $(BUILD)/attnd-worker

$(BUILD)/attnd: $(BUILD)/server/front/main.o $(LIB_FRONT) $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_FRONT) $(LDLIBS_FRONT)

$(BUILD)/attnd-worker: $(BUILD)/server/worker/main.o $(LIB_WORKER) $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_WORKER) $(LDLIBS_WORKER)

$(LIB_COMMON): $(COMMON_OBJS)
$(LIB_FRONT): $(FRONT_OBJS)
$(LIB_WORKER): $(WORKER_OBJS)
$(BUILD)/%.a:
	@echo "  AR    $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# What built the binary (common/build_info.c, `attnd --version`, the "build" object): the values
# go into $(BUILD)/build_info_values.h, rewritten (with the time) only when one of them changes,
# so an unchanged tree rebuilds nothing. A build without .git (a Docker context) may pass
# ATTND_COMMIT; ATTND_DIRTY is 1 when tracked files differ from the commit.
ATTND_VERSION := 0.1.0
ATTND_COMMIT  ?= $(or $(shell git rev-parse --short=12 HEAD 2>/dev/null),unknown)
ATTND_DIRTY   ?= $(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),1,0)
NVCC_VERSION  := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\1 \2/p')
comma := ,
BUILD_ARCHS   := $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(GENCODE))))
BUILD_INFO_KEY = $(ATTND_VERSION) $(ATTND_COMMIT) $(ATTND_DIRTY) $(NVCC_VERSION) $(BUILD_ARCHS)
$(BUILD)/build_info_values.h: FORCE
	@mkdir -p $(BUILD)
	@echo '$(BUILD_INFO_KEY)' | cmp -s - $@.key 2>/dev/null && [ -f $@ ] || { \
	  echo '$(BUILD_INFO_KEY)' > $@.key; \
	  { echo '#define BUILD_INFO_VERSION "$(ATTND_VERSION)"'; \
	    echo '#define BUILD_INFO_COMMIT "$(ATTND_COMMIT)"'; \
	    echo '#define BUILD_INFO_DIRTY $(ATTND_DIRTY)'; \
	    echo '#define BUILD_INFO_CUDA "$(word 1,$(NVCC_VERSION))"'; \
	    echo '#define BUILD_INFO_NVCC "$(word 2,$(NVCC_VERSION))"'; \
	    echo '#define BUILD_INFO_GENCODE "$(BUILD_ARCHS)"'; \
	    echo "#define BUILD_INFO_TIME \"$$(date -u +%Y-%m-%dT%H:%M:%SZ)\""; } > $@; }
# The fp64 reference (every cpu run and every verify): -O3 vectorizes its two inner loops
# (1.3-1.4x), each lane still summing in the order the scalar code does; -ffp-contract=off
# keeps a multiply and its add two roundings, never one FMA, so the bits stay the same.
$(BUILD)/kernels/cpu/reference.o: CFLAGS += -O3 -ffp-contract=off
$(BUILD)/common/build_info.o: $(BUILD)/build_info_values.h
$(BUILD)/common/build_info.o: CPPFLAGS_NO_CUDA += -I$(BUILD)

# Every object depends on the flags it was built with: $(BUILD)/.flags is rewritten only when
# they change (another GENCODE, say), and then everything rebuilds. Without it an object built
# for sm_90 would silently stay, without the wgmma kernel, after a switch to sm_90a.
BUILD_FLAGS := $(CC) $(CPPFLAGS) $(CFLAGS) | $(NVCC) $(NVFLAGS) | $(LDLIBS_FRONT) | $(LDLIBS_WORKER)
$(BUILD)/.flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(BUILD_FLAGS)' | cmp -s - $@ || echo '$(BUILD_FLAGS)' > $@
FORCE:

# common/ and server/front/ never see the CUDA headers: a CUDA include there fails the build.
$(BUILD)/common/%.o $(BUILD)/server/front/%.o $(BUILD)/tests/unit/common/%.o $(BUILD)/tests/unit/front/%.o: \
  CPPFLAGS = $(CPPFLAGS_NO_CUDA)

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) $(CPPFLAGS) $(NVFLAGS) -c $< -o $@

unit_bins = $(patsubst %.c,$(BUILD)/%,$(wildcard tests/unit/$(1)/test_*.c))
$(call unit_bins,common): $(BUILD)/%: $(BUILD)/%.o $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ -pthread $(LDLIBS_COMMON)

$(call unit_bins,front): $(BUILD)/%: $(BUILD)/%.o $(LIB_FRONT) $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_FRONT) $(LDLIBS_FRONT)

$(call unit_bins,worker) $(call unit_bins,kernels): $(BUILD)/%: $(BUILD)/%.o $(LIB_WORKER) $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_WORKER) $(LDLIBS_WORKER)

# The fused-kernel harness (tests/gpu/fused_check.cu, run on a GPU by tests/gpu/fused_check.sh):
# linked with the worker's own kernel objects, so what it checks and times is what attnd runs,
# compiled once. Its tables of variants leave the workspace member out where there is none.
$(BUILD)/fused_check: $(BUILD)/tests/gpu/fused_check.o $(LIB_WORKER) $(LIB_COMMON)
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_WORKER) $(LDLIBS_WORKER)
$(BUILD)/tests/gpu/fused_check.o: NVFLAGS += -DFUSED_CHECK_CUDNN -Xcompiler -Wno-missing-field-initializers

# The read ceiling a decode is held to (bench/read_ceiling.cu): the CUDA runtime only.
$(BUILD)/read_ceiling: $(BUILD)/bench/read_ceiling.o
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_WORKER) -lcudart_static -ldl -lrt -pthread

# What one profiled forward's CUPTI steps cost (bench/cupti_cost.cu): the runtime and CUPTI.
$(BUILD)/cupti_cost: $(BUILD)/bench/cupti_cost.o
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_WORKER) -lcudart_static -lcupti -ldl -lrt -pthread

# What each NVML query the worker makes costs (bench/nvml_cost.c): NVML is dlopened, as the worker does.
$(BUILD)/nvml_cost: bench/nvml_cost.c
	@echo "  CC    $@"
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -o $@ $< -ldl

# FlashInfer, the `flashinfer` variant (kernels/flashinfer/README.md): the worker dlopens
# $(BUILD)/lib/libattnd_flashinfer.so when it is there, and lists the variant unavailable
# with the reason when it is not; nothing else needs it. `make flashinfer` downloads the
# pinned flashinfer-python wheel into $(BUILD)/flashinfer (pip download, once), unpacks its
# headers there (scripts/fetch-flashinfer.py) and compiles attnd's wrapper files against
# them, each once per head dim. For the architectures of GENCODE that FlashInfer's two
# prefill paths target: sm_90a (its FA3-style Hopper path) and sm_80 (FA2, whose cubin runs
# on every 8.x GPU); FLASHINFER_GENCODE overrides. About 3 CPU-minutes per architecture
# (measured: sm_90a 2m54s, sm_80 1m27s of nvcc; 2.7 and 3.2 MB modules).
FLASHINFER_VERSION ?= 0.7.4
FLASHINFER_DIR      = $(BUILD)/flashinfer
FLASHINFER_LIB      = $(BUILD)/lib/libattnd_flashinfer.so
FLASHINFER_GENCODE ?= $(if $(findstring sm_90a,$(GENCODE)),-gencode arch=compute_90a$(comma)code=sm_90a) \
                      $(if $(filter sm_8%,$(BUILD_ARCHS)),-gencode arch=compute_80$(comma)code=sm_80)
FI_ARCHS     = $(strip $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(FLASHINFER_GENCODE)))))
FI_HAVE_SM90 = $(if $(filter sm_90a,$(FI_ARCHS)),1,0)
FI_HAVE_SM80 = $(if $(filter sm_80,$(FI_ARCHS)),1,0)
FI_WHEEL     = $(FLASHINFER_DIR)/wheel/flashinfer/data
FI_VERSION   = $(FLASHINFER_DIR)/version
# As FlashInfer's JIT compiles these templates (flashinfer/jit/core.py, cpp_ext.py): C++17,
# -O3, its dtype switches, the CCCL it ships ahead of the toolkit's, CUTLASS as system headers.
FI_NVFLAGS   = -std=c++17 --expt-relaxed-constexpr -O3 -DNDEBUG -Xcompiler -fPIC,-fvisibility=hidden \
               -static-global-template-stub=false -Xfatbin=-compress-all -diag-suppress 20012 \
               -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16 -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED \
               -I. -I$(FI_WHEEL)/cccl/cub -I$(FI_WHEEL)/cccl/libcudacxx/include -I$(FI_WHEEL)/cccl/thrust \
               -isystem $(FI_WHEEL)/include -isystem $(FI_WHEEL)/cutlass/include \
               -isystem $(FI_WHEEL)/cutlass/tools/util/include -MMD -MP
# The module keeps the CUDA runtime it links to itself (static, its symbols hidden).
LDLIBS_FLASHINFER = -lcudart_static -ldl -lrt -lpthread
FI_HEAD_DIMS  = 64 128 256
FI_OBJ        = $(FLASHINFER_DIR)/obj
FI_OBJS       = $(FI_OBJ)/flashinfer_module.o $(patsubst %,$(FI_OBJ)/decode_d%.o,$(FI_HEAD_DIMS)) \
                $(patsubst %,$(FI_OBJ)/decode_tc_d%.o,$(FI_HEAD_DIMS)) \
                $(if $(filter 1,$(FI_HAVE_SM90)),$(patsubst %,$(FI_OBJ)/prefill_sm90_d%.o,$(FI_HEAD_DIMS))) \
                $(if $(filter 1,$(FI_HAVE_SM90)),$(patsubst %,$(FI_OBJ)/ragged_sm90_d%.o,$(FI_HEAD_DIMS))) \
                $(if $(filter 1,$(FI_HAVE_SM90)),$(patsubst %,$(FI_OBJ)/paged_sm90_d%.o,$(FI_HEAD_DIMS))) \
                $(if $(filter 1,$(FI_HAVE_SM80)),$(patsubst %,$(FI_OBJ)/prefill_sm80_d%.o,$(FI_HEAD_DIMS))) \
                $(if $(filter 1,$(FI_HAVE_SM80)),$(patsubst %,$(FI_OBJ)/ragged_sm80_d%.o,$(FI_HEAD_DIMS)))
FI_FLAGS_KEY  = $(FLASHINFER_VERSION) | $(NVCC) $(FI_NVFLAGS) | $(FLASHINFER_GENCODE)

.PHONY: flashinfer
flashinfer: $(FLASHINFER_LIB)

$(FI_VERSION): scripts/fetch-flashinfer.py
	$(Q)$(PYTHON) scripts/fetch-flashinfer.py $(FLASHINFER_VERSION) $(FLASHINFER_DIR)

$(FLASHINFER_DIR)/.flags: FORCE
	@mkdir -p $(FLASHINFER_DIR)
	@echo '$(FI_FLAGS_KEY)' | cmp -s - $@ || echo '$(FI_FLAGS_KEY)' > $@

# Static pattern rules (only these objects): a plain %.o pattern whose source exists for any
# stem would let make's built-in `%: %.o` try to "remake" the included .d files through it.
FI_DEPS = $(FI_VERSION) $(FLASHINFER_DIR)/.flags
$(FI_OBJ)/flashinfer_module.o: kernels/flashinfer/flashinfer_module.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (FlashInfer $(FI_ARCHS))"
	$(Q)test -n "$(FI_ARCHS)" || { echo "flashinfer: FLASHINFER_GENCODE has neither sm_90a nor sm_80" >&2; exit 1; }
	$(Q)$(NVCC) $(FI_NVFLAGS) $(FLASHINFER_GENCODE) -DATTND_FI_ARCHS='"$(FI_ARCHS)"' \
	    -DATTND_FI_HAVE_SM90=$(FI_HAVE_SM90) -DATTND_FI_HAVE_SM80=$(FI_HAVE_SM80) \
	    -DATTND_FI_VERSION="\"$$(cut -d' ' -f1 $(FI_VERSION))\"" -DATTND_FI_COMMIT="\"$$(cut -d' ' -f2 $(FI_VERSION))\"" \
	    -c $< -o $@
$(patsubst %,$(FI_OBJ)/decode_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/decode_d%.o: kernels/flashinfer/flashinfer_decode.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) $(FLASHINFER_GENCODE) -DATTND_FI_HEAD_DIM=$* -c $< -o $@
# The tensor-core decode is FA2's batch prefill (FlashInfer's decode wrapper picks fa2 on every
# architecture): like the decode, for all of FLASHINFER_GENCODE.
$(patsubst %,$(FI_OBJ)/decode_tc_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/decode_tc_d%.o: kernels/flashinfer/flashinfer_decode_tc.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) $(FLASHINFER_GENCODE) -DATTND_FI_HEAD_DIM=$* -c $< -o $@
$(patsubst %,$(FI_OBJ)/prefill_sm90_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/prefill_sm90_d%.o: kernels/flashinfer/flashinfer_prefill_sm90.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) -gencode arch=compute_90a,code=sm_90a -DATTND_FI_HEAD_DIM=$* -c $< -o $@
$(patsubst %,$(FI_OBJ)/prefill_sm80_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/prefill_sm80_d%.o: kernels/flashinfer/flashinfer_prefill_sm80.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) -gencode arch=compute_80,code=sm_80 -DATTND_FI_HEAD_DIM=$* -c $< -o $@
$(patsubst %,$(FI_OBJ)/ragged_sm90_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/ragged_sm90_d%.o: kernels/flashinfer/flashinfer_ragged_sm90.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) -gencode arch=compute_90a,code=sm_90a -DATTND_FI_HEAD_DIM=$* -c $< -o $@
$(patsubst %,$(FI_OBJ)/paged_sm90_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/paged_sm90_d%.o: kernels/flashinfer/flashinfer_paged_sm90.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) -gencode arch=compute_90a,code=sm_90a -DATTND_FI_HEAD_DIM=$* -c $< -o $@
$(patsubst %,$(FI_OBJ)/ragged_sm80_d%.o,$(FI_HEAD_DIMS)): $(FI_OBJ)/ragged_sm80_d%.o: kernels/flashinfer/flashinfer_ragged_sm80.cu $(FI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $< (head_dim $*)"
	$(Q)$(NVCC) $(FI_NVFLAGS) -gencode arch=compute_80,code=sm_80 -DATTND_FI_HEAD_DIM=$* -c $< -o $@

$(FLASHINFER_LIB): $(FI_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	$(Q)$(NVCC) -shared $(FLASHINFER_GENCODE) -o $@ $^ -Xlinker --exclude-libs,ALL $(LDLIBS_FLASHINFER)

# Install the system packages a fresh Debian/Ubuntu machine lacks (only when root).
deps:
	$(Q)sh scripts/install-deps.sh test

deps-build:
	$(Q)sh scripts/install-deps.sh build

# The tree's rules (docs/architecture.md): who includes and calls whom, folder by folder and
# room by room, no circles of includes or calls, no CUDA in the front (its objects' .d files),
# and no CUDA library in `ldd attnd`.
test-layout: $(BUILD)/attnd $(BUILD)/attnd-worker
	$(Q)$(PYTHON) -m pytest -q tests/layout
	$(Q)$(PYTHON) tests/layout/check_layout.py --build $(BUILD)

# FlashInfer's module is built too (FLASHINFER=0: not); when that fails (no network for pip,
# say) attnd still serves, and the variant says why it is unavailable.
FLASHINFER ?= 1
run: deps-build
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(if $(filter 1,$(FLASHINFER)),$(MAKE) --no-print-directory flashinfer || \
	    echo "make run: libattnd_flashinfer.so not built (above); the flashinfer variant stays unavailable" >&2)
	$(BUILD)/attnd --config config/attnd.json

# Tests compile one architecture into build/test: everything they run is on the cpu device.
# The unit and API tests run beside a PostgreSQL of their own (tests/pg/pg_server.py: fresh
# for each `make test`, a unix socket in build/test/pg, stopped however they end), named to
# them by ATTND_TEST_PG. With ATTND_TEST_PG set, `make test-unit` alone works too.
TEST_MAKE = $(MAKE) --no-print-directory BUILD=build/test GENCODE="$(GENCODE_TEST)"
test: deps
	$(Q)$(TEST_MAKE) build/test/attnd build/test/attnd-worker test-layout
	$(Q)$(PYTHON) tests/pg/pg_server.py run build/test/pg -- $(TEST_MAKE) test-unit test-api test-api-pg
	$(Q)$(TEST_MAKE) test-fuzz

# libFuzzer on the parsers of untrusted bytes (npy, safetensors, request JSON),
# FUZZ_SECONDS each; skipped with a message when clang cannot build fuzzers.
FUZZ_SECONDS ?= 13
test-fuzz:
	$(Q)sh tests/fuzz/run.sh $(BUILD)/fuzz $(FUZZ_SECONDS)

# The pool's tests start the real worker (ATTND_WORKER_BIN).
test-unit: $(UNIT_BINS) $(BUILD)/attnd-worker
	$(Q)ATTND_WORKER_BIN=$(abspath $(BUILD)/attnd-worker) sh tests/unit/run.sh $(UNIT_BINS)

test-api: $(BUILD)/attnd $(BUILD)/attnd-worker
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) $(PYTHON) -m pytest -q tests/api tests/docker

# The history, studies, async, persistence and fault tests again, each server keeping its history
# in PostgreSQL (tests/api/conftest.py: ATTND_TEST_STORE), the random parameters, whose records
# must come back from it as they were answered, and the concurrent mix, whose runs counter must
# match its history; needs ATTND_TEST_PG (make test sets it).
PG_API_TESTS = tests/api/test_history.py tests/api/test_history_query.py tests/api/test_async.py \
               tests/api/test_persistence.py tests/api/test_faults.py tests/api/test_batch.py \
               tests/api/test_store_full.py tests/api/test_studies.py tests/api/test_run_params_fuzz.py \
               tests/api/test_concurrent_mix.py
test-api-pg: $(BUILD)/attnd $(BUILD)/attnd-worker
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) ATTND_TEST_STORE=postgresql $(PYTHON) -m pytest -q -m "not sqlite_only" \
	    $(PG_API_TESTS)

# On a GPU machine: builds nothing when build/attnd is already there (the lent GPU machine
# has no libmicrohttpd headers; bundle here, carry build/).
test-gpu:
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) bash tests/gpu/run.sh

bench:
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) bash bench/run.sh

# Copy the shared libraries a GPU machine lacks beside the binary (rpath $ORIGIN/lib).
bundle: $(BUILD)/attnd $(BUILD)/attnd-worker
	$(Q)sh scripts/bundle-libs.sh $(BUILD)

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
