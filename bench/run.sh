#!/usr/bin/env bash
# bench/run.sh — attnd and PyTorch on the same GPU, the same shapes (bench/shapes.json),
# side by side (bench/README.md explains the method).
#
#   ATTND_URL   a running attnd (with GPUs); unset: start $ATTND_BIN (default build/attnd)
#   OUT         also write the report (.md, .json with the raw records) here
#   PREDICTION_FILE  the prediction written before measuring, pasted into the report
#   BENCH_VARIANTS   PyTorch variants to run (default: all six of shapes.json)
#
# Writes bench/results/YYYY-MM-DD-<gpu>-<commit>.md and .json.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-}
WORK=$(mktemp -d /tmp/attnd-bench.XXXXXX)
SERVER_PID=

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null
    fi
}
trap stop_server EXIT

if [ -z "${ATTND_URL:-}" ]; then
    BIN=${ATTND_BIN:-build/attnd}
    case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
    "$BIN" --listen 127.0.0.1:0 --data-dir "$WORK/data" --devices all --log-level warn \
        >"$WORK/attnd.stdout" 2>"$WORK/attnd.stderr" &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        ATTND_URL=$(grep -m1 -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/attnd.stdout" 2>/dev/null || true)
        [ -n "$ATTND_URL" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$ATTND_URL" ]; then
        echo "bench: attnd did not start; stderr:" >&2
        tail -n 40 "$WORK/attnd.stderr" >&2
        exit 1
    fi
    for _ in $(seq 1 200); do
        curl -sf --max-time 2 "$ATTND_URL/readyz" | grep -q '"ready": *true' && break
        sleep 0.1
    done
fi
export ATTND_URL
echo "bench: attnd at $ATTND_URL, work dir $WORK" >&2

python3 bench/compare.py attnd --url "$ATTND_URL" --shapes bench/shapes.json --out "$WORK/attnd.jsonl"
rc_attnd=$?

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 bench/peer_pytorch.py --shapes bench/shapes.json ${BENCH_VARIANTS:+--variants "$BENCH_VARIANTS"} \
        --out "$WORK/torch.jsonl"
    rc_torch=$?
else
    echo "bench: PyTorch with CUDA is not importable here; the report uses the recorded peer numbers" >&2
    rc_torch=0
fi

python3 bench/compare.py report --attnd "$WORK/attnd.jsonl" --torch "$WORK/torch.jsonl" \
    --shapes bench/shapes.json --url "$ATTND_URL" --results-dir bench/results ${OUT:+--out-dir "$OUT"}
rc_report=$?
# The raw records of both sides are in the report's .json (and stay in $WORK).
[ $rc_attnd -eq 0 ] && [ $rc_torch -eq 0 ] && [ $rc_report -eq 0 ]
