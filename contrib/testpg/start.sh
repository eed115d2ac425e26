#!/usr/bin/env bash
# Start a throw-away PostgreSQL server for the results store's tests and print its URL.
# Usage: start.sh [DIR]     (default: a fresh /tmp/sattrib-testpg-XXXXXX; DIR must be absent or empty)
# Debian's server binaries (/usr/lib/postgresql/<version>/bin, not on PATH; the package comes with
# contrib/testcluster/install.sh), run as the `postgres` user when started by root (postgres
# refuses to run as root), else as the calling user.  It listens on 127.0.0.1 (a free port) and on
# a unix socket in DIR/sock only, trusts every local connection (test only!), skips fsync, and
# has a database sattrib_test.  Stop it with stop.sh DIR.  Exit 2: cannot run here (SKIP).
set -euo pipefail

log() { printf 'testpg: %s\n' "$*" >&2; }
die() { printf 'testpg: ERROR: %s\n' "$*" >&2; exit 1; }
skip() { printf 'testpg: SKIP: %s\n' "$*" >&2; exit 2; }

BIN="${SATTRIB_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
[ -n "$BIN" ] && [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ] ||
    skip "PostgreSQL server not found under /usr/lib/postgresql/*/bin (as root: contrib/testcluster/install.sh)"

DIR="${1:-$(mktemp -d /tmp/sattrib-testpg-XXXXXX)}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
DIR="${DIR%/}"
mkdir -p "$DIR"
[ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty (stop.sh $DIR first, or pick another dir)"

if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || skip "no 'postgres' system user to run the server as"
    as_server() { runuser -u postgres -- "$@"; }
    chown postgres: "$DIR"
else
    as_server() { "$@"; }
fi
chmod 700 "$DIR"
touch "$DIR/.sattrib-testpg"   # stop.sh deletes only a dir carrying this mark
cd "$DIR"

as_server "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-locale -N >"$DIR/initdb.log" 2>&1 ||
    die "initdb failed: $(tail -n 3 "$DIR/initdb.log")"
as_server mkdir -p "$DIR/sock"
cat >>"$DIR/data/postgresql.conf" <<CONF
# sattrib testpg: local only, speed over durability
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 60
CONF
cat >"$DIR/data/pg_hba.conf" <<HBA
# sattrib testpg: trust, on the unix socket and 127.0.0.1 only
local all all              trust
host  all all 127.0.0.1/32 trust
HBA

# A free port: probe, then let the server bind it; on a lost race try another.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
started=0
for _ in 1 2 3 4 5; do
    PORT=$(( 20000 + RANDOM % 30000 ))
    port_in_use "$PORT" && continue
    if as_server "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 30 -o "-p $PORT" start >/dev/null; then
        started=1
        break
    fi
    grep -q "could not bind\|already in use" "$DIR/postgres.log" 2>/dev/null || break
done
[ "$started" = 1 ] || die "the server did not start; log: $(tail -n 5 "$DIR/postgres.log" 2>/dev/null)"

as_server "$BIN/createdb" -h "$DIR/sock" -p "$PORT" -U postgres sattrib_test ||
    { as_server "$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1; die "createdb failed"; }

URL="postgresql://postgres@127.0.0.1:$PORT/sattrib_test"
echo "$URL" >"$DIR/url"
log "server up in $DIR (unix socket dir $DIR/sock, port $PORT); stop: $(dirname "$0")/stop.sh $DIR"
echo "$URL"
