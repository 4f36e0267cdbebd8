#!/bin/sh
# The README's two GPU runs: math through the query string (the /run alias), naive with a
# JSON body. Needs a GPU on the server (else 503 no_device).
. "$(dirname "$0")/common.sh"
curl "$@" -X POST "$ATTND_URL/run?backend=math" &&
curl "$@" -X POST "$ATTND_URL/v1/runs" -H 'Content-Type: application/json' \
    -d '{"backend":"naive","seq":2048,"dtype":"fp16","verify":true}'
