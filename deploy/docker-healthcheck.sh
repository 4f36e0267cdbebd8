#!/bin/sh
# HEALTHCHECK of the attnd image: GET /healthz on the port of ATTND_LISTEN, over HTTPS when
# ATTND_TLS_CERT_FILE is set (the certificate is not checked: this is the process itself).
listen=${ATTND_LISTEN:-0.0.0.0:8080}
port=${listen##*:}
scheme=http
[ -n "${ATTND_TLS_CERT_FILE:-}" ] && scheme=https
exec curl -fsS -k --max-time 4 -o /dev/null "$scheme://127.0.0.1:$port/healthz"
