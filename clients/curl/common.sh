# Sourced by the scripts here: ATTND_URL (default http://127.0.0.1:8080) and, when set,
# ATTND_TOKEN as a bearer token. Every script prints the JSON answer and exits non-zero on
# an HTTP error (curl --fail-with-body).
ATTND_URL=${ATTND_URL:-http://127.0.0.1:8080}
set -- -sS --fail-with-body
if [ -n "${ATTND_TOKEN:-}" ]; then
    set -- "$@" -H "Authorization: Bearer $ATTND_TOKEN"
fi
