#!/usr/bin/env bash
# scripts/gpu-quick.sh — a short lent-GPU call: attnd on the GPU and a chosen subset of
# tests/gpu (default: the fused variants, resident tensors, traces). Logs under $OUT.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/attnd-gpu-out}; mkdir -p "$OUT"
BIN=${ATTND_BIN:-$PWD/build/test/attnd}
. scripts/serve-attnd.sh
attnd_serve "$BIN" "$(mktemp -d)" "$OUT/attnd-stderr.log" --devices all --enable-fault-injection true --job-timeout-s 60 \
    --log-level "${ATTND_LOG_LEVEL:-warn}" || { kill "$ATTND_SERVE_PID" 2> /dev/null; exit 1; }
PID=$ATTND_SERVE_PID
export ATTND_URL=$ATTND_SERVE_URL ATTND_PID=$PID ATTND_REQUIRE_GPU=1 # ATTND_PID: the front, whose memory tests watch
timeout -k 5 "${TESTS_TIMEOUT_S:-150}" python3 -m pytest -q -rfEs -p no:cacheprovider \
    ${TESTS:-tests/gpu/test_fused.py tests/gpu/test_tensors.py tests/gpu/test_trace.py} 2>&1 | tee "$OUT/tests.log" | tail -n 30
python3 -c "import json,sys; [print(k, ':', v) for k, v in json.load(open(sys.argv[1])).items()]" "$OUT/gpu-facts.json" 2>/dev/null | grep -iE "fused|tensors|trace"
kill -TERM $PID; wait $PID
