#!/usr/bin/env bash
# Build and run the fused-kernel harness (tests/gpu/fused_check.cu) on a machine with a GPU.
# Usage: tests/gpu/fused_check.sh [--quick] [--timing-only] [--only name,prefix*,...] [--repeats N] [--shape B,H,S,D,causal|none]
#        [--window-ms N] [--cudnn DIR]
# (--quick: correctness only; --timing-only: only the timed shapes, verified; --only: the variants
# so named, or starting so when the name ends in *; --repeats: each timing N times, median and
# range; --window-ms N: each timing a sustained N ms window, not a burst of 20; --cudnn DIR:
# check and time attnd's cudnn variant too, with DIR's libcudnn.so.9).
# OUTBIN overrides the binary's path (default build/fused_check). BUILD_ONLY=1: compile, do not
# run (scripts/gpu-build.sh builds it here, without a GPU).
# GENCODE overrides the target (default sm_90a, the H200, with the wgmma kernel: FLASH_HAVE_SM90A
# tells the host code it is there, as the Makefile does).
set -euo pipefail
cd "$(dirname "$0")/../.."
GENCODE=${GENCODE:-"-gencode arch=compute_90a,code=sm_90a"}
case "$GENCODE" in *sm_90a*) HAVE_SM90A=-DFLASH_HAVE_SM90A ;; *) HAVE_SM90A= ;; esac
NVCC=${NVCC:-nvcc}
mkdir -p build
"$NVCC" -std=c++17 -O3 $GENCODE $HAVE_SM90A -DFUSED_CHECK_CUDNN -D_GNU_SOURCE -I. -o "${OUTBIN:-build/fused_check}" \
    tests/gpu/fused_check.cu kernels/efficient.cu kernels/flash.cu kernels/exec_context.c common/attn.c common/variant_info.c \
    kernels/cudnn_loader.c kernels/cudnn_sdpa.c -lcublas -ldl
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
exec "${OUTBIN:-build/fused_check}" "$@"
