#!/bin/sh
# GET /v1/device: the devices served (cpu, cuda:N).
. "$(dirname "$0")/common.sh"
curl "$@" "$ATTND_URL/v1/device"
