#!/bin/sh
# Install what building and testing attnd needs on a fresh Debian/Ubuntu machine that has
# the CUDA toolkit: libmicrohttpd, cJSON and SQLite headers (apt), pytest, numpy and
# requests (pip). Does nothing for what is already there; needs root to install.
set -e
missing=""
[ -f /usr/include/microhttpd.h ] || missing="$missing libmicrohttpd-dev"
[ -f /usr/include/cjson/cJSON.h ] || missing="$missing libcjson-dev"
[ -f /usr/include/sqlite3.h ] || missing="$missing libsqlite3-dev"
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
