#!/usr/bin/env bash
# Stop the server start.sh DIR started and delete DIR (kept when SATTRIB_KEEP_TESTPROM=1).
# Idempotent; only touches a dir that start.sh marked as its own.
set -uo pipefail

log() { printf 'testprom: %s\n' "$*" >&2; }

DIR="${1:?usage: stop.sh DIR}"
DIR="${DIR%/}"
if [ ! -e "$DIR/.sattrib-testprom" ]; then
    log "nothing to stop in $DIR (not a testprom dir)"
    exit 0
fi
if [ -s "$DIR/pid" ]; then
    pid="$(cat "$DIR/pid")"
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do
        grep -qs '^State:[[:space:]]*[^Z]' "/proc/$pid/status" || break   # gone, or a zombie
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null
fi
if [ "${SATTRIB_KEEP_TESTPROM:-}" = 1 ]; then
    log "stopped; kept $DIR"
else
    rm -rf "$DIR"
    log "stopped; removed $DIR"
fi
exit 0
