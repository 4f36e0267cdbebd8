#!/usr/bin/env bash
# Build and run the fused-kernel harness (tests/gpu/fused_check.cu) on a machine with a GPU.
# Usage: tests/gpu/fused_check.sh [--quick]   (--quick: correctness only, no timing)
# ARCH overrides the target (default sm_90, the H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH=${ARCH:-sm_90}
NVCC=${NVCC:-nvcc}
mkdir -p build
"$NVCC" -std=c++17 -O3 -arch="$ARCH" -I. -o build/fused_check tests/gpu/fused_check.cu \
    kernels/efficient.cu kernels/flash.cu kernels/exec_context.c kernels/attn.c -lcublas
exec build/fused_check "$@"
