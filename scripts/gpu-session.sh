#!/usr/bin/env bash
# scripts/gpu-session.sh — one lent-GPU call: the GPU tests and the PyTorch comparison
# (tests/gpu/run.sh), then the README's curl example and an A/B of host_us with NVTX
# routed into CUPTI. Needs build/test/attnd (or ATTND_BIN) with build/test/lib beside it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnd-gpu-out}; mkdir -p "$OUT"
BIN=${ATTND_BIN:-$PWD/build/test/attnd}
export ATTND_BIN=$BIN OUT
bash tests/gpu/run.sh > "$OUT/run.log" 2>&1
# The README's example, on the default port, and the NVTX→CUPTI host-cost comparison.
py_run() { # $1 label, $2 url
    python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
label, url = sys.argv[1:]
for backend in ("naive", "naive_inplace", "math"):
    req = urllib.request.Request(url + "/run?backend=" + backend, method="POST")
    r = json.load(urllib.request.urlopen(req, timeout=120))
    print(label, backend, "host_us", round(r["timing"]["host_us"], 1), "gpu_us", round(r["timing"]["median_us"], 1))
PY
}
for mode in plain injected; do
    D=$(mktemp -d)
    if [ $mode = injected ]; then env ATTND_NVTX_TO_CUPTI=1 "$BIN" --data-dir "$D" >"$D/out" 2>"$D/err" &
    else "$BIN" --data-dir "$D" >"$D/out" 2>"$D/err" & fi
    PID=$!
    for _ in $(seq 1 100); do curl -sf localhost:8080/readyz >/dev/null && break; sleep 0.2; done
    if [ $mode = plain ]; then
        curl -s -X POST 'localhost:8080/run?backend=math' > "$OUT/curl-math.json"
    fi
    py_run $mode http://127.0.0.1:8080 >> "$D/host-ab.txt" 2>&1; cat "$D/host-ab.txt" >> /tmp/host-ab.txt
    kill -TERM $PID; wait $PID
done
tail -n 45 "$OUT/run.log"; cat /tmp/host-ab.txt
