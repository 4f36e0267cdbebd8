#!/bin/sh
# GET /healthz and /readyz.
. "$(dirname "$0")/common.sh"
curl "$@" "$ATTND_URL/healthz" && curl "$@" "$ATTND_URL/readyz"
