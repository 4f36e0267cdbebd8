#!/usr/bin/env bash
# Build and run the fused-kernel harness (tests/gpu/fused_check.cu) on a machine with a GPU.
# Usage: tests/gpu/fused_check.sh [--quick] [--timing-only] [--small] [--only name,prefix*,...] [--repeats N]
#        [--shape B,H,S|Sq:Skv,D,MASK[,Hkv[,W]]]
#        [--window-ms N] [--cudnn DIR]
# (--quick: correctness only; --timing-only: only the timed shapes, verified; --only: the variants
# so named, or starting so when the name ends in *; --repeats: each timing N times, median and
# range; --window-ms N: each timing a sustained N ms window, not a burst of 20; --cudnn DIR:
# check and time attnd's cudnn variant too, with DIR's libcudnn.so.9).
# BUILD is the build folder (default build): make builds $BUILD/fused_check from the worker's
# kernel objects there. BUILD_ONLY=1: build, do not run (scripts/gpu-build.sh builds it here,
# without a GPU). GENCODE, when set, is the build's target (else the Makefile's: the fat build).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
make --no-print-directory -j"$(nproc)" BUILD="$B" ${GENCODE:+GENCODE="$GENCODE"} "$B/fused_check"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
exec "$B/fused_check" "$@"
