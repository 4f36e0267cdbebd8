#!/usr/bin/env bash
# bench/run.sh — attnd and PyTorch on the same GPU, the same shapes (bench/shapes.json),
# side by side (bench/README.md explains the method).
#
#   ATTND_URL   a running attnd (with GPUs); unset: start $ATTND_BIN (default build/attnd)
#   OUT         also write the report (.md, .json with the raw records) here
#   PREDICTION_FILE  the prediction written before measuring, pasted into the report
#   BENCH_SHAPES     the shapes file (default bench/shapes.json)
#   BENCH_VARIANTS   PyTorch variants to run (default: BENCH_ATTND_VARIANTS when set, else
#                    all six of the shapes file)
#   BENCH_ATTND_VARIANTS  attnd variants to run, e.g. flash,cudnn (default: every GPU
#                    variant the server lists available)
#   BENCH_CUDNN      the cuDNN of attnd's cudnn variant when this script starts attnd:
#                    torch (PyTorch's own, nvidia.cudnn's lib/ directory, through
#                    ATTND_CUDNN_LIBRARY) or system (the dynamic loader's search). Default:
#                    torch when PyTorch is importable and that directory has libcudnn.so.9,
#                    else system. A server given by ATTND_URL keeps its own; the report says
#                    which cuDNN each side ran.
#
# Writes bench/results/<card>/YYYY-MM-DD-<commit>-bench.md and .json (bench/README.md, "Reports").
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-}
SHAPES=${BENCH_SHAPES:-bench/shapes.json}
ATTND_VARIANTS=${BENCH_ATTND_VARIANTS:-}
TORCH_VARIANTS=${BENCH_VARIANTS:-$ATTND_VARIANTS}
WORK=$(mktemp -d /tmp/attnd-bench.XXXXXX)
SERVER_PID=

if [ ! -r "$SHAPES" ]; then
    echo "bench: BENCH_SHAPES=$SHAPES is not a readable file" >&2
    exit 2
fi

# PyTorch's cuDNN directory (its nvidia-cudnn wheel), printed when torch imports and the
# directory holds libcudnn.so.9; nothing otherwise.
torch_cudnn_dir() {
    python3 - <<'PY' 2>/dev/null
import os
import torch  # noqa: F401  (the peer must be importable, not only the wheel)
import nvidia.cudnn
d = os.path.join(list(nvidia.cudnn.__path__)[0], "lib")
if os.path.isfile(os.path.join(d, "libcudnn.so.9")):
    print(d)
PY
}

TORCH_CUDNN_DIR=$(torch_cudnn_dir || true)
CUDNN_CHOICE=${BENCH_CUDNN:-}
if [ -z "$CUDNN_CHOICE" ]; then
    if [ -n "$TORCH_CUDNN_DIR" ]; then CUDNN_CHOICE=torch; else CUDNN_CHOICE=system; fi
fi
case "$CUDNN_CHOICE" in
torch)
    if [ -z "$TORCH_CUDNN_DIR" ]; then
        echo "bench: BENCH_CUDNN=torch, but PyTorch's cuDNN is not importable here (import torch, nvidia.cudnn;" \
            "lib/libcudnn.so.9 in it); use BENCH_CUDNN=system" >&2
        exit 2
    fi
    ATTND_CUDNN=$TORCH_CUDNN_DIR ;;
system) ATTND_CUDNN= ;;
*)
    echo "bench: BENCH_CUDNN must be torch or system, got '$CUDNN_CHOICE'" >&2
    exit 2 ;;
esac

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
    echo "bench: starting attnd with cuDNN: ${ATTND_CUDNN:-the dynamic loader search} (BENCH_CUDNN=$CUDNN_CHOICE)" >&2
    . scripts/serve-attnd.sh
    ATTND_CUDNN_LIBRARY=$ATTND_CUDNN attnd_serve "$BIN" "$WORK/data" "$WORK/attnd.stderr" --devices all --log-level warn
    rc=$?
    SERVER_PID=$ATTND_SERVE_PID
    ATTND_URL=$ATTND_SERVE_URL
    [ $rc = 0 ] || { echo "bench: attnd did not start" >&2; exit 1; }
else
    # Started elsewhere: its cudnn_library is its own. Stated, and in the report.
    [ -n "${BENCH_CUDNN:-}" ] && echo "bench: BENCH_CUDNN=$BENCH_CUDNN has no effect on the running attnd" \
        "at $ATTND_URL (set ATTND_CUDNN_LIBRARY where it starts)" >&2
    CUDNN_CHOICE=
fi
export ATTND_URL
echo "bench: attnd at $ATTND_URL, work dir $WORK" >&2

python3 bench/compare.py attnd --url "$ATTND_URL" --shapes "$SHAPES" ${ATTND_VARIANTS:+--variants "$ATTND_VARIANTS"} \
    --out "$WORK/attnd.jsonl"
rc_attnd=$?

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 bench/peer_pytorch.py --shapes "$SHAPES" ${TORCH_VARIANTS:+--variants "$TORCH_VARIANTS"} \
        --out "$WORK/torch.jsonl"
    rc_torch=$?
else
    echo "bench: PyTorch with CUDA is not importable here; the report uses the recorded peer numbers" >&2
    rc_torch=0
fi

# Rows: the variants either side was restricted to (all when neither was).
ROWS=
[ -n "$ATTND_VARIANTS" ] && [ -n "$TORCH_VARIANTS" ] && ROWS="$ATTND_VARIANTS,$TORCH_VARIANTS"
python3 bench/compare.py report --attnd "$WORK/attnd.jsonl" --torch "$WORK/torch.jsonl" \
    --shapes "$SHAPES" --url "$ATTND_URL" --results-dir bench/results ${OUT:+--out-dir "$OUT"} \
    ${CUDNN_CHOICE:+--cudnn-choice "$CUDNN_CHOICE"} ${ROWS:+--variants "$ROWS"}
rc_report=$?
# The raw records of both sides are in the report's .json (and stay in $WORK).
[ $rc_attnd -eq 0 ] && [ $rc_torch -eq 0 ] && [ $rc_report -eq 0 ]
