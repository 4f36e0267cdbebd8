#!/usr/bin/env bash
# HTTP load on the front (its throughput targets): /healthz and a tiny cpu-device run request,
# measured with wrk against a fresh attnd on the cpu device.
#
#   sh scripts/install-deps.sh bench-http     # wrk (Debian's package)
#   bash bench/http_load.sh [SECONDS] [CONNECTIONS] [THREADS]
#
# ATTND_BIN (default build/attnd, else build/test/attnd) is started on a free port with a
# temporary data dir and --devices none. CPU pinning: the server and wrk share the machine;
# on a 2-core box that is the configuration the targets name. Prints one line per test:
#   healthz: N req/s (p50 …, p99 …), non-2xx: K
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
conns=${2:-64}
threads=${3:-2}
command -v wrk >/dev/null || { echo "wrk is not installed: sh scripts/install-deps.sh bench-http" >&2; exit 1; }
bin=${ATTND_BIN:-}
[ -n "$bin" ] || for c in build/attnd build/test/attnd; do [ -x "$c" ] && bin=$c && break; done
[ -x "${bin:-}" ] || { echo "no attnd binary: make (or set ATTND_BIN)" >&2; exit 1; }

tmp=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill $pid 2>/dev/null; wait $pid 2>/dev/null; fi; rm -rf "$tmp"' EXIT
. scripts/serve-attnd.sh
rc=0
attnd_serve "$bin" "$tmp/data" "$tmp/stderr" --devices none --log-level error --queue-depth 100000 || rc=$?
pid=$ATTND_SERVE_PID
url=$ATTND_SERVE_URL
[ $rc = 0 ] || exit 1

# The tiny run: batch 1, heads 1, seq 8, head_dim 8, one timed forward, no warmup, no CUPTI.
cat >"$tmp/run.lua" <<'LUA'
wrk.method = "POST"
wrk.path = "/v1/runs?backend=reference&device=cpu&batch=1&heads=1&seq=8&head_dim=8&iters=1&warmup=0&profile=false"
wrk.headers["Content-Length"] = "0"
LUA
# wrk's own summary lacks non-2xx per status; the done() hook prints what we report.
cat >"$tmp/report.lua" <<'LUA'
done = function(summary, latency, requests)
  local s = summary.duration / 1e6
  io.write(string.format("RESULT %.0f req/s p50 %.2f ms p99 %.2f ms errors %d non2xx %d\n",
    summary.requests / s, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
LUA
cat "$tmp/run.lua" "$tmp/report.lua" >"$tmp/run_all.lua"

echo "attnd $url ($(nproc) cores; wrk -t$threads -c$conns -d${secs}s)"
printf 'healthz: '
wrk -t"$threads" -c"$conns" -d"${secs}s" -s "$tmp/report.lua" "$url/healthz" | sed -n 's/^RESULT //p'
printf 'cpu run: '
wrk -t"$threads" -c"$conns" -d"${secs}s" -s "$tmp/run_all.lua" "$url" | sed -n 's/^RESULT //p'
printf 'front RSS after: %s\n' "$(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
