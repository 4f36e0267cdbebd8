#!/bin/sh
# GET /v1/runs/ID: a stored run. Usage: get-run.sh ID
id=${1:-}
case "$id" in
    ''|*[!0-9]*) echo "usage: $0 RUN_ID" >&2; exit 2 ;;
esac
. "$(dirname "$0")/common.sh"
curl "$@" "$ATTND_URL/v1/runs/$id"
