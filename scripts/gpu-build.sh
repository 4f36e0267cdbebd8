#!/usr/bin/env bash
# scripts/gpu-build.sh — build here (no GPU needed) everything a lent-GPU call runs, so the call
# spends its minutes running, not compiling: build/test/attnd for sm_90a with its libraries
# beside it (build/test/lib) and the fused-kernel harness build/test/fused_check. Then, with the
# device tool: carry ["build/test/attnd", "build/test/lib", "build/test/fused_check"] and run
# scripts/gpu-session.sh (everything) or scripts/gpu-quick.sh (a subset of tests/gpu).
#
# make rebuilds whatever was compiled with other flags (the Makefile's $(BUILD)/.flags), so
# objects left from a plain sm_90 build, which lack the wgmma kernel, do not survive.
set -euo pipefail
cd "$(dirname "$0")/.."
GENCODE=${GENCODE:-"-gencode arch=compute_90a,code=sm_90a"}
make -j"$(nproc)" BUILD=build/test GENCODE="$GENCODE" build/test/attnd
sh scripts/bundle-libs.sh build/test
GENCODE="$GENCODE" OUTBIN=build/test/fused_check BUILD_ONLY=1 bash tests/gpu/fused_check.sh
echo "built: build/test/attnd, build/test/lib/, build/test/fused_check"
