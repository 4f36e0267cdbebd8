#!/usr/bin/env bash
# scripts/gpu-session.sh — one lent-GPU call that checks everything GPU-side:
#   1. the fused-kernel harness (tests/gpu/fused_check.cu: correctness on odd shapes and
#      timing of every flash/efficient configuration), prebuilt as build/test/fused_check
#      when present (else built here by tests/gpu/fused_check.sh);
#   2. tests/gpu/run.sh: attnd on the GPU, tests/gpu, and bench/ (attnd vs PyTorch).
# Needs $GPU_BUILD (default build/test) with attnd, attnd-worker and lib/ (or ATTND_BIN). Writes 8 files at
# most under $OUT (the lent machine returns no more).
set -u
cd "$(dirname "$0")/.."
# jq for the README's example, carried from the build machine when this one lacks it
B=${GPU_BUILD:-build/test}
if ! command -v jq >/dev/null && [ -x "$B/jq/jq" ]; then
    export PATH="$PWD/$B/jq:$PATH" LD_LIBRARY_PATH="$PWD/$B/jq${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# the prediction written before this run, PREDICTION_FILE=FILE, goes into the bench report
# (bench/run.sh; bench/README.md, "Reports")
export PREDICTION_FILE=${PREDICTION_FILE:-}
OUT=${OUT:-/tmp/attnd-gpu-out}; mkdir -p "$OUT"
export ATTND_BIN=${ATTND_BIN:-$PWD/$B/attnd} OUT
if [ -x "$B/fused_check" ]; then
    timeout -k 5 ${FUSED_TIMEOUT_S:-240} "$B/fused_check" ${FUSED_ARGS:-} > "$OUT/fused.log" 2>&1
else
    timeout -k 5 300 bash tests/gpu/fused_check.sh > "$OUT/fused.log" 2>&1
fi
echo "fused_check rc=$?"
grep -E "FAIL|TFLOP|^\|" "$OUT/fused.log" | tail -n 40
echo "nvml energy counter: $(timeout -k 5 60 python3 bench/nvml_energy_probe.py 3 2>&1 | tail -n 1)"
bash tests/gpu/run.sh > "$OUT/run.log" 2>&1
# The README's first example, run as printed (port aside) against a fresh attnd on this GPU.
DATA=$(mktemp -d /tmp/attnd-readme.XXXXXX)
"$ATTND_BIN" --listen 127.0.0.1:18080 --data-dir "$DATA" --log-level warn >/dev/null 2>"$DATA/stderr" &
README_PID=$!
for _ in $(seq 1 300); do curl -sf --max-time 2 127.0.0.1:18080/readyz >/dev/null && break; sleep 0.2; done
readme_cmd=$(grep -m1 "^curl -s -X POST 'localhost:8080/run?backend=math' | jq" README.md | sed 's/localhost:8080/127.0.0.1:18080/')
echo "README example:"; bash -c "$readme_cmd" | tee -a "$OUT/run.log"
kill -TERM $README_PID; wait $README_PID
tail -n 50 "$OUT/run.log"
