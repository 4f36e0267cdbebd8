#!/usr/bin/env bash
# tests/gpu/run.sh — everything that needs a GPU, in one go (< 8 minutes on an H200):
# start attnd on all GPUs, run tests/gpu against it, run bench/run.sh with the same server,
# print a short summary table last.
#
#   ATTND_BIN   the binary (default build/attnd)
#   OUT         where logs and results go (default /tmp/attnd-gpu-out)
#   SKIP_BENCH=1  tests only
#   TESTS_TIMEOUT_S / BENCH_TIMEOUT_S  limits of the two phases (default 300 / 150)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/attnd-gpu-out}
export OUT
mkdir -p "$OUT"
T0=$(date +%s)

if nvidia-smi -L; then export ATTND_REQUIRE_GPU=${ATTND_REQUIRE_GPU:-1}; fi

BIN=${ATTND_BIN:-build/attnd}
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
export ATTND_BIN="$BIN" # tests that start a server of their own (other settings) start this one
# Few files under $OUT (the lent machine sends back only so many): gpu-tests.log,
# gpu-facts.json, attnd-stderr.log, bench.log and the bench report (.md, .json).
DATA=$(mktemp -d /tmp/attnd-gpu-data.XXXXXX)
SERVER_PID=
SERVER_EXIT="not started"

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        local _
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -KILL "$SERVER_PID"
            SERVER_EXIT="killed: no exit within 10 s of SIGTERM"
            wait "$SERVER_PID" 2>/dev/null
        else
            wait "$SERVER_PID"
            SERVER_EXIT="exit $? after SIGTERM"
        fi
    fi
    SERVER_PID=
}
trap stop_server EXIT

. scripts/serve-attnd.sh
attnd_serve "$BIN" "$DATA" "$OUT/attnd-stderr.log" --devices all --enable-fault-injection true \
    --job-timeout-s 60 --log-level warn
rc=$?
SERVER_PID=$ATTND_SERVE_PID
ATTND_URL=$ATTND_SERVE_URL
[ $rc = 0 ] || exit 1
export ATTND_URL ATTND_PID=$SERVER_PID # ATTND_PID: the front, whose memory tests watch
echo "attnd at $ATTND_URL (pid $SERVER_PID, data $DATA)"
curl -s --max-time 10 "$ATTND_URL/v1/device"; echo

timeout -k 10 "${TESTS_TIMEOUT_S:-300}" python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu 2>&1 \
    | tee "$OUT/gpu-tests.log"
TESTS_RC=${PIPESTATUS[0]}

BENCH_RC=skipped
if [ "${SKIP_BENCH:-0}" != "1" ]; then
    # bench/ starts its own attnd (same binary): that one loads the cuDNN PyTorch uses
    # (BENCH_CUDNN, bench/README.md), so the cudnn rows compare like with like
    env -u ATTND_URL -u ATTND_PID ATTND_BIN="$BIN" timeout -k 10 "${BENCH_TIMEOUT_S:-150}" bash bench/run.sh 2>&1 \
        | tee "$OUT/bench.log"
    BENCH_RC=${PIPESTATUS[0]}
fi

curl -s --max-time 5 "$ATTND_URL/healthz" >/dev/null && ALIVE=yes || ALIVE=no
stop_server

SECS=$(( $(date +%s) - T0 ))
python3 - "$OUT" "$TESTS_RC" "$BENCH_RC" "$ALIVE" "$SERVER_EXIT" "$SECS" <<'EOF'
import glob, json, os, re, sys
out, tests_rc, bench_rc, alive, server_exit, secs = sys.argv[1:]
rows = []
log = open(os.path.join(out, "gpu-tests.log"), errors="replace").read() if os.path.exists(os.path.join(out, "gpu-tests.log")) else ""
tail = [l for l in log.splitlines() if re.search(r"\b(passed|failed|error|skipped)\b", l)]
rows.append(("tests/gpu", "%s (rc %s)" % (tail[-1].strip("= ") if tail else "no summary", tests_rc)))
for l in log.splitlines():
    if l.startswith(("FAILED", "ERROR")):
        rows.append(("  " + l.split(" ")[0].lower(), l.split(" ", 1)[1][:150]))
try:
    facts = json.load(open(os.path.join(out, "gpu-facts.json")))
except (OSError, ValueError):
    facts = {}
for key in sorted(facts):
    if key.endswith(" table"):
        continue
    v = facts[key]
    if isinstance(v, float):
        v = "%.4g" % v
    rows.append((key, str(v)[:150]))
rows.append(("bench", "rc %s" % bench_rc))
mds = sorted(glob.glob(os.path.join(out, "20*-*.md")), key=os.path.getmtime)
if mds:
    md = open(mds[-1]).read().splitlines()
    rows.append(("bench report", os.path.basename(mds[-1])))
    # the study shape's rows: variant, attnd gpu us, torch gpu us, ratio
    try:
        i = next(n for n, l in enumerate(md) if l.startswith("### B=8 H=16 S=1024 D=64"))
        for l in md[i + 4:]:
            if not l.startswith("|"):
                break
            c = [x.strip() for x in l.strip("|").split("|")]
            rows.append(("  study " + c[0], "gpu %s vs %s us (x%s), host %s vs %s us, ops %s vs %s" %
                         (c[1], c[2], c[3], c[4], c[5], c[7], c[8])))
    except StopIteration:
        pass
rows.append(("server", "alive at the end: %s; %s" % (alive, server_exit)))
rows.append(("wall time", "%s s" % secs))
w = max(len(k) for k, _ in rows)
print()
print("| %-*s | %s |" % (w, "what", "result"))
print("|%s|%s|" % ("-" * (w + 2), "-" * 60))
for k, v in rows:
    print("| %-*s | %s |" % (w, k, v.replace("|", "/")))
EOF
[ "$TESTS_RC" = 0 ]
