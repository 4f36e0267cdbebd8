#!/usr/bin/env bash
# scripts/gpu-session.sh — one lent-GPU call that checks everything GPU-side:
#   1. the fused-kernel harness (tests/gpu/fused_check.cu: correctness on odd shapes and
#      timing of every flash/efficient configuration), prebuilt as build/test/fused_check
#      when present (else built here by tests/gpu/fused_check.sh);
#   2. tests/gpu/run.sh: attnd on the GPU, tests/gpu, and bench/ (attnd vs PyTorch).
# Needs build/test/attnd (or ATTND_BIN) with build/test/lib beside it. Writes 8 files at
# most under $OUT (the lent machine returns no more).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnd-gpu-out}; mkdir -p "$OUT"
export ATTND_BIN=${ATTND_BIN:-$PWD/build/test/attnd} OUT
if [ -x build/test/fused_check ]; then
    timeout -k 5 ${FUSED_TIMEOUT_S:-240} build/test/fused_check > "$OUT/fused.log" 2>&1
else
    timeout -k 5 300 bash tests/gpu/fused_check.sh > "$OUT/fused.log" 2>&1
fi
echo "fused_check rc=$?"
grep -E "FAIL|TFLOP|^\|" "$OUT/fused.log" | tail -n 40
bash tests/gpu/run.sh > "$OUT/run.log" 2>&1
tail -n 50 "$OUT/run.log"
