# attnd — build, run, test.  `make V=1` shows the full commands.
#
#   make            the fat binary build/attnd (sm_80 sm_86 sm_89 sm_90a + compute_90 PTX)
#   make run        install what a fresh Debian/Ubuntu machine lacks (when root), build, serve
#   make test       unit tests + API tests on the cpu device (one architecture: fast to build)
#   make test-gpu   tests/gpu on a machine with a GPU (needs build/attnd)
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

CPPFLAGS  = -D_GNU_SOURCE -I$(CUDA)/include -I. -MMD -MP
CFLAGS    = -std=c11 -O2 -g -Wall -Wextra -Wno-unused-parameter -pthread
NVFLAGS   = -std=c++17 -O3 -g -lineinfo $(GENCODE) $(HAVE_SM90A) -Xcompiler -Wall,-Wno-unused-parameter \
            --expt-relaxed-constexpr -Xptxas -warn-spills
LDFLAGS   = -L$(CUDA)/lib64 -pthread -Wl,-rpath,'$$ORIGIN/lib' -Wl,-rpath,$(CUDA)/lib64
LDLIBS    = -lcudart_static -lcublas -lcupti -lmicrohttpd -lcjson -lsqlite3 -ldl -lrt -lm

KERNEL_C  = kernels/attn.c kernels/variants.c kernels/inputs_cpu.c kernels/fingerprint.c \
            kernels/reference.c kernels/exec_context.c kernels/cudnn_loader.c kernels/cudnn_sdpa.c
KERNEL_CU = kernels/inputs.cu kernels/naive.cu kernels/math.cu kernels/efficient.cu kernels/flash.cu
SERVER_C  = server/settings.c server/log.c server/api_error.c server/run_request.c \
            server/http.c server/http_guard.c server/routes.c server/ipc.c server/pool.c server/store.c \
            server/worker.c server/measure.c server/measure_stats.c server/profile.c \
            server/clocks.c server/roofline.c server/clock_text.c server/host_memory.c server/output_stats_host.c server/gpu_worker.c server/cpu_worker.c \
            server/auth.c server/tls.c
SERVER_C += server/metrics.c server/routes_runs.c server/static_files.c server/build_info.c
SERVER_C += server/npy.c server/safetensors.c server/tensors.c server/worker_tensors.c
SERVER_CU = server/output_stats.cu
MAIN_C    = server/main.c

LIB_OBJS  = $(patsubst %.c,$(BUILD)/%.o,$(KERNEL_C) $(SERVER_C)) \
            $(patsubst %.cu,$(BUILD)/%.o,$(KERNEL_CU) $(SERVER_CU))
MAIN_OBJ  = $(BUILD)/server/main.o
UNIT_SRCS = $(wildcard tests/unit/test_*.c)
UNIT_BINS = $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

ifeq ($(V),1)
Q =
else
Q = @
endif

.PHONY: FORCE all run test test-unit test-api test-fuzz test-gpu bench deps deps-build bundle clean

all: $(BUILD)/attnd

$(BUILD)/attnd: $(LIB_OBJS) $(MAIN_OBJ)
	@echo "  LINK  $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# What built the binary (server/build_info.c, `attnd --version`, the "build" object): the values
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
$(BUILD)/server/build_info.o: $(BUILD)/build_info_values.h
$(BUILD)/server/build_info.o: CPPFLAGS += -I$(BUILD)

# Every object depends on the flags it was built with: $(BUILD)/.flags is rewritten only when
# they change (another GENCODE, say), and then everything rebuilds. Without it an object built
# for sm_90 would silently stay, without the wgmma kernel, after a switch to sm_90a.
BUILD_FLAGS := $(CC) $(CPPFLAGS) $(CFLAGS) | $(NVCC) $(NVFLAGS)
$(BUILD)/.flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(BUILD_FLAGS)' | cmp -s - $@ || echo '$(BUILD_FLAGS)' > $@
FORCE:

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) $(CPPFLAGS) $(NVFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CXX) -x c -std=c11 $(CPPFLAGS) -O1 -g -Wall -Wextra -Wno-unused-parameter -pthread -c $< -o $@.o
	$(Q)$(CXX) -o $@ $@.o $(LIB_OBJS) $(LDFLAGS) $(LDLIBS)

# Install the system packages a fresh Debian/Ubuntu machine lacks (only when root).
deps:
	$(Q)sh scripts/install-deps.sh test

deps-build:
	$(Q)sh scripts/install-deps.sh build

run: deps-build
	$(Q)$(MAKE) --no-print-directory all
	$(BUILD)/attnd --config config/attnd.json

# Tests compile one architecture into build/test: everything they run is on the cpu device.
test: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build/test GENCODE="$(GENCODE_TEST)" build/test/attnd test-unit test-api test-fuzz

# libFuzzer on the upload parsers (npy, safetensors), FUZZ_SECONDS each; skipped with a
# message when clang cannot build fuzzers.
FUZZ_SECONDS ?= 20
test-fuzz:
	$(Q)sh tests/fuzz/run.sh $(BUILD)/fuzz $(FUZZ_SECONDS)

test-unit: $(UNIT_BINS)
	$(Q)sh tests/unit/run.sh $(UNIT_BINS)

test-api: $(BUILD)/attnd
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) $(PYTHON) -m pytest -q tests/api tests/docker

# On a GPU machine: builds nothing when build/attnd is already there (the lent GPU machine
# has no libmicrohttpd headers; bundle here, carry build/).
test-gpu:
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) bash tests/gpu/run.sh

bench:
	$(Q)ATTND_BIN=$(abspath $(BUILD)/attnd) bash bench/run.sh

# Copy the shared libraries a GPU machine lacks beside the binary (rpath $ORIGIN/lib).
bundle: $(BUILD)/attnd
	$(Q)sh scripts/bundle-libs.sh $(BUILD)

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
