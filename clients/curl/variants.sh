#!/bin/sh
# GET /v1/variants: the attention variants and whether each can run here.
. "$(dirname "$0")/common.sh"
curl "$@" "$ATTND_URL/v1/variants"
