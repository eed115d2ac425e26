#!/usr/bin/env bash
# Start a throw-away Prometheus server holding the series of an OpenMetrics file; print its URL.
# Usage: start.sh DIR FILE.om   (DIR must be absent or empty)
# Debian's prometheus package (contrib/testcluster/install.sh installs it): the samples are
# written as TSDB blocks by `promtool tsdb create-blocks-from openmetrics`, then a server with no
# scrape targets serves them on 127.0.0.1 (a free port), with a retention long enough for samples
# of any age.  Stop it with stop.sh DIR.  Exit 2: cannot run here (SKIP).
set -euo pipefail

log() { printf 'testprom: %s\n' "$*" >&2; }
die() { printf 'testprom: ERROR: %s\n' "$*" >&2; exit 1; }
skip() { printf 'testprom: SKIP: %s\n' "$*" >&2; exit 2; }

command -v prometheus >/dev/null && command -v promtool >/dev/null ||
    skip "prometheus / promtool not found (as root: contrib/testcluster/install.sh)"
DIR="${1:?usage: start.sh DIR FILE.om}"
OM="${2:?usage: start.sh DIR FILE.om}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
DIR="${DIR%/}"
mkdir -p "$DIR"
[ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty (stop.sh $DIR first, or pick another dir)"
touch "$DIR/.sattrib-testprom"   # stop.sh deletes only a dir carrying this mark

promtool tsdb create-blocks-from openmetrics "$OM" "$DIR/data" >"$DIR/promtool.log" 2>&1 ||
    die "promtool could not load $OM: $(tail -n 3 "$DIR/promtool.log")"
printf 'global:\n  scrape_interval: 1h\nscrape_configs: []\n' >"$DIR/prometheus.yml"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in 1 2 3 4 5; do
    PORT=$(( 20000 + RANDOM % 30000 ))
    port_in_use "$PORT" && continue
    prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/data" \
        --storage.tsdb.retention.time=100y --web.listen-address="127.0.0.1:$PORT" \
        >"$DIR/prometheus.log" 2>&1 </dev/null &
    echo $! >"$DIR/pid"
    for _ in $(seq 150); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null &&
            python3 -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:$PORT/-/ready', timeout=2).status != 200)" 2>/dev/null; then
            URL="http://127.0.0.1:$PORT"
            echo "$URL" >"$DIR/url"
            log "server up in $DIR (port $PORT); stop: $(dirname "$0")/stop.sh $DIR"
            echo "$URL"
            exit 0
        fi
        kill -0 "$(cat "$DIR/pid")" 2>/dev/null || break
        sleep 0.1
    done
    kill "$(cat "$DIR/pid")" 2>/dev/null || true
    grep -q "address already in use" "$DIR/prometheus.log" || break
done
die "the server did not start; log: $(tail -n 5 "$DIR/prometheus.log" 2>/dev/null)"
