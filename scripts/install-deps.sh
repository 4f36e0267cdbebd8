#!/bin/sh
# Install what a fresh Debian/Ubuntu machine with the CUDA toolkit lacks, and nothing that
# is already there. Installing needs root; without it the missing names are printed.
#
#   sh scripts/install-deps.sh build       build and serve: libmicrohttpd, cJSON, SQLite and libpq
#                                          (the PostgreSQL fleet store) headers; python3 and pip
#                                          (make flashinfer fetches FlashInfer's wheel with pip download)
#   sh scripts/install-deps.sh test        build + what make test uses (the default):
#       apt: clang (libFuzzer targets of tests/fuzz), chromium (the dashboard test drives it
#            headless), openssl (self-signed certificates for the TLS tests), jq (the README's
#            examples are run as printed), postgresql (the tests run a throwaway server of
#            their own, tests/pg/pg_server.py), curl (the tensor transfer tests and bench
#            scripts upload and download with it, as users do)
#       pip: pytest, numpy, requests; prometheus_client (its text parser reads /metrics),
#            schemathesis (fuzzes the API against docs/openapi.json), websocket-client
#            (Chromium's DevTools protocol), pyyaml (deploy/*.yaml), hatchling (the client
#            package is built offline), pandas (the client's optional to_dataframe)
#   sh scripts/install-deps.sh bench-http  build + wrk, for bench/http_load.sh
set -e
what=${1:-test}
py=${PYTHON:-python3}
apt_missing=""
pip_missing=""

need_header() { [ -f "$1" ] || apt_missing="$apt_missing $2"; }
need_command() { command -v "$1" >/dev/null 2>&1 || apt_missing="$apt_missing $2"; }
need_module() { $py -c "import $1" 2>/dev/null || pip_missing="$pip_missing $2"; }
# Debian keeps the server programs out of PATH, under a folder per major version.
need_pg_server() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_missing="$apt_missing postgresql"; }

need_header /usr/include/microhttpd.h libmicrohttpd-dev
need_header /usr/include/cjson/cJSON.h libcjson-dev
need_header /usr/include/sqlite3.h libsqlite3-dev
need_header /usr/include/postgresql/libpq-fe.h libpq-dev
need_command python3 python3
$py -m pip --version >/dev/null 2>&1 || apt_missing="$apt_missing python3-pip"
case "$what" in
test)
    need_command clang clang
    need_command chromium chromium
    need_command openssl openssl
    need_command jq jq
    need_command curl curl
    need_pg_server
    for m in pytest:pytest numpy:numpy requests:requests prometheus_client:prometheus_client \
             schemathesis:schemathesis websocket:websocket-client yaml:pyyaml \
             hatchling:hatchling pandas:pandas; do
        need_module "${m%%:*}" "${m#*:}"
    done
    ;;
bench-http) need_command wrk wrk ;;
build) ;;
*) echo "usage: $0 [build|test|bench-http]" >&2; exit 2 ;;
esac

if [ -n "$apt_missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "attnd needs:$apt_missing (run as root, or: sudo apt-get install$apt_missing)" >&2
        exit 1
    fi
    echo "installing (apt):$apt_missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $apt_missing >/dev/null
fi
if [ -n "$pip_missing" ]; then
    echo "installing (pip):$pip_missing"
    $py -m pip install -q $pip_missing 2>&1 | grep -v 'WARNING: Running pip as' || true
fi
