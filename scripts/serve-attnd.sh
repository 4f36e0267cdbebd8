# scripts/serve-attnd.sh — sourced (bash) by the scripts that start an attnd of their own: the
# lent-GPU sessions, tests/gpu, the benchmarks and the HTTP load test.
#
# attnd_serve BIN DATA_DIR STDERR [attnd options…] starts BIN on a free port of 127.0.0.1 with
# DATA_DIR (its stdout in DATA_DIR/stdout), and returns once /readyz answers 200, with
# ATTND_SERVE_URL and ATTND_SERVE_PID set. If BIN exits or prints no listening line within 60 s,
# or is not ready 2 minutes later (its workers start every GPU), it prints why and stderr's
# tail, and returns 1 (the pid still set).
# Environment it is given (ATTND_CUDNN_LIBRARY=…) goes to the server.
attnd_serve() {
    local bin=$1 data=$2 err=$3
    shift 3
    mkdir -p "$data"
    "$bin" --listen 127.0.0.1:0 --data-dir "$data" "$@" > "$data/stdout" 2> "$err" &
    ATTND_SERVE_PID=$!
    ATTND_SERVE_URL=
    local _
    for _ in $(seq 1 600); do
        ATTND_SERVE_URL=$(grep -m1 -o 'http://127\.0\.0\.1:[0-9]*' "$data/stdout" 2> /dev/null || true)
        [ -n "$ATTND_SERVE_URL" ] && break
        kill -0 "$ATTND_SERVE_PID" 2> /dev/null || break
        sleep 0.1
    done
    if [ -z "$ATTND_SERVE_URL" ]; then
        echo "attnd ($bin) did not print its listening line; its stderr:" >&2
        tail -n 40 "$err" >&2
        return 1
    fi
    for _ in $(seq 1 1200); do
        curl -sf --max-time 2 "$ATTND_SERVE_URL/readyz" > /dev/null && return 0
        kill -0 "$ATTND_SERVE_PID" 2> /dev/null || break
        sleep 0.1
    done
    echo "attnd at $ATTND_SERVE_URL is not ready; its stderr:" >&2
    tail -n 40 "$err" >&2
    return 1
}
