#!/usr/bin/env bash
# Build and run the fused-kernel harness (tests/gpu/fused_check.cu) on a machine with a GPU.
# Usage: tests/gpu/fused_check.sh [--quick]   (--quick: correctness only, no timing)
# GENCODE overrides the target (default sm_90a, the H200, with the wgmma kernel: FLASH_HAVE_SM90A
# tells the host code it is there, as the Makefile does).
set -euo pipefail
cd "$(dirname "$0")/../.."
GENCODE=${GENCODE:-"-gencode arch=compute_90a,code=sm_90a"}
case "$GENCODE" in *sm_90a*) HAVE_SM90A=-DFLASH_HAVE_SM90A ;; *) HAVE_SM90A= ;; esac
NVCC=${NVCC:-nvcc}
mkdir -p build
"$NVCC" -std=c++17 -O3 $GENCODE $HAVE_SM90A -I. -o build/fused_check tests/gpu/fused_check.cu \
    kernels/efficient.cu kernels/flash.cu kernels/exec_context.c kernels/attn.c -lcublas
exec build/fused_check "$@"
