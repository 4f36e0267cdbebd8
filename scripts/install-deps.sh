#!/bin/sh
# Install what building and testing attnd needs on a fresh Debian/Ubuntu machine that has
# the CUDA toolkit: libmicrohttpd, cJSON and SQLite headers and clang (apt), pytest, numpy and
# requests (pip). Does nothing for what is already there; needs root to install.
set -e
missing=""
[ -f /usr/include/microhttpd.h ] || missing="$missing libmicrohttpd-dev"
[ -f /usr/include/cjson/cJSON.h ] || missing="$missing libcjson-dev"
[ -f /usr/include/sqlite3.h ] || missing="$missing libsqlite3-dev"
# clang: the libFuzzer targets of make test-fuzz; optional (skipped with a message) when
# it cannot be installed here.
if ! command -v clang >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then missing="$missing clang"
    else echo "note: clang is missing (make test-fuzz will skip): sudo apt-get install clang" >&2; fi
fi
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "attnd needs:$missing (run as root, or: sudo apt-get install$missing)" >&2
        exit 1
    fi
    echo "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
py=${PYTHON:-python3}
if ! $py -c 'import pytest, numpy, requests' 2>/dev/null; then
    echo "installing: pytest numpy requests (pip)"
    $py -m pip install -q pytest numpy requests 2>&1 | grep -v 'WARNING: Running pip as' || true
fi
# Issue 5: /metrics is parsed with prometheus_client's parser, the API is fuzzed against
# docs/openapi.json with schemathesis, and the dashboard is driven in Debian's headless
# chromium through its DevTools protocol (websocket-client).
if ! $py -c 'import prometheus_client, schemathesis, websocket' 2>/dev/null; then
    echo "installing: prometheus_client schemathesis websocket-client (pip)"
    $py -m pip install -q prometheus_client schemathesis websocket-client 2>&1 | grep -v 'WARNING: Running pip as' || true
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing: chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# Issue 6: the client package is built offline in tests (setuptools, wheel); deploy/*.yaml
# is parsed with PyYAML; TLS tests make a self-signed certificate with openssl.
if ! $py -c 'import yaml, setuptools, wheel' 2>/dev/null; then
    echo "installing: pyyaml setuptools wheel (pip)"
    $py -m pip install -q pyyaml setuptools wheel 2>&1 | grep -v 'WARNING: Running pip as' || true
fi
if ! command -v openssl >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing: openssl"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
# `sh scripts/install-deps.sh bench-http`: wrk for bench/http_load.sh (not needed by make test).
if [ "${1:-}" = bench-http ] && ! command -v wrk >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "bench/http_load.sh needs wrk (sudo apt-get install wrk)" >&2
        exit 1
    fi
    echo "installing: wrk"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
