#!/usr/bin/env bash
# Stop the server start.sh DIR started and delete DIR (kept when SATTRIB_KEEP_TESTPG=1).
# Idempotent; only touches a dir that start.sh marked as its own.
set -uo pipefail

log() { printf 'testpg: %s\n' "$*" >&2; }

DIR="${1:?usage: stop.sh DIR}"
DIR="${DIR%/}"
if [ ! -e "$DIR/.sattrib-testpg" ]; then
    log "nothing to stop in $DIR (not a testpg dir)"
    exit 0
fi
if [ -e "$DIR/data/postmaster.pid" ]; then
    BIN="${SATTRIB_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
    if [ "$(id -u)" -eq 0 ]; then as_server() { runuser -u postgres -- "$@"; }; else as_server() { "$@"; }; fi
    pid="$(head -n 1 "$DIR/data/postmaster.pid" 2>/dev/null)"
    (cd "$DIR" && as_server "$BIN/pg_ctl" -D "$DIR/data" -m fast -t 20 -w stop >/dev/null) ||
        log "pg_ctl stop failed; postmaster pid $pid"
    # pg_ctl returns once the pid file is gone; the postmaster exits a moment later
    for _ in $(seq 50); do
        grep -qs '^State:[[:space:]]*[^Z]' "/proc/$pid/status" || break   # gone, or a zombie
        sleep 0.1
    done
fi
if [ "${SATTRIB_KEEP_TESTPG:-}" = 1 ]; then
    log "stopped; kept $DIR"
else
    rm -rf "$DIR"
    log "stopped; removed $DIR"
fi
exit 0
