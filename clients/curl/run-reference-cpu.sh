#!/bin/sh
# A run of the fp64 reference on the cpu device: works on any server, GPU or not.
. "$(dirname "$0")/common.sh"
curl "$@" -X POST "$ATTND_URL/v1/runs" -H 'Content-Type: application/json' \
    -d '{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq":64,"head_dim":32,"warmup":0,"iters":3}'
