#!/usr/bin/env bash
# Start a complete single-machine Slurm test cluster:
#   munged, mariadbd, slurmdbd, slurmctld and four slurmd (gpu01..gpu04).
# Usage: start.sh [STATE_DIR]     (default /tmp/sattrib-testcluster)
# The state dir is wiped and recreated (any cluster still running from it is
# stopped first), so every start is from a clean state.
# Knobs (environment): see README.md in this directory.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${1:-${SATTRIB_STATE_DIR:-/tmp/sattrib-testcluster}}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$PWD/$STATE_DIR" ;; esac
STATE_DIR="${STATE_DIR%/}"

CLUSTER="${SATTRIB_CLUSTER_NAME:-sattrib-test}"
NODES=(gpu01 gpu02 gpu03 gpu04)
NODE_CPUS="${SATTRIB_NODE_CPUS:-1}"
NODE_MEM="${SATTRIB_NODE_MEM:-1000}"
SLURM_USER="${SATTRIB_SLURM_USER:-slurm}"
TEST_USER="${SATTRIB_TEST_USER:-sattrib-user}"
TEST_ACCOUNT="${SATTRIB_TEST_ACCOUNT:-sattrib}"
CTLD_PORT="${SATTRIB_CTLD_PORT:-16817}"
DBD_PORT="${SATTRIB_DBD_PORT:-16819}"
SLURMD_PORT_BASE="${SATTRIB_SLURMD_PORT_BASE:-16831}"   # gpu01 = base, gpu02 = base+1 ...
DB_PORT="${SATTRIB_DB_PORT:-16306}"
DB_PASS="${SATTRIB_DB_PASS:-sattrib-test-pw}"
WAIT="${SATTRIB_START_TIMEOUT:-60}"

log() { printf 'testcluster: %s\n' "$*" >&2; }
die() { printf 'testcluster: ERROR: %s\n' "$*" >&2; exit 1; }
t0_ms=$(( ${EPOCHREALTIME/./} / 1000 ))
elapsed() { local ms=$(( ${EPOCHREALTIME/./} / 1000 - t0_ms )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }

[ "$(id -u)" -eq 0 ] || die "must run as root (daemons and users are set up)"
for b in munged mariadbd mariadb-install-db slurmdbd slurmctld slurmd sacctmgr sinfo sacct; do
    command -v "$b" >/dev/null 2>&1 || die "$b not found: run $HERE/install.sh first"
done
id "$SLURM_USER" >/dev/null 2>&1 || die "SlurmUser '$SLURM_USER' does not exist"
for v in SATTRIB_PROLOG SATTRIB_EPILOG SATTRIB_EPILOG_CTLD; do
    p="${!v:-}"
    if [ -n "$p" ]; then
        case "$p" in /*) ;; *) die "$v must be an absolute path: $p" ;; esac
        [ -x "$p" ] || die "$v=$p is not an executable file"
    fi
done

# --- clean state dir -------------------------------------------------------
if [ -d "$STATE_DIR" ]; then
    "$HERE/stop.sh" "$STATE_DIR" >/dev/null 2>&1 || true
    rm -rf "$STATE_DIR"
fi
mkdir -p "$STATE_DIR"
chmod 755 "$STATE_DIR"
# Every parent must be traversable by the slurm/munge/mysql/test users.
d="$STATE_DIR"
while [ "$d" != "/" ]; do
    d="$(dirname "$d")"
    perm=$(stat -c %A "$d")
    [ "${perm:9:1}" = x ] || [ "${perm:9:1}" = t ] || die "parent dir $d is not world-traversable (mode $perm); pick another STATE_DIR"
done

ETC="$STATE_DIR/etc"; RUN="$STATE_DIR/run"; LOG="$STATE_DIR/log"
DB="$STATE_DIR/mysql"; CTLD="$STATE_DIR/ctld"
SPOOL="$STATE_DIR/spool"; JOBS="$STATE_DIR/jobs"
mkdir -p "$ETC" "$RUN" "$LOG" "$DB/data" "$DB/run" "$CTLD" "$SPOOL" "$JOBS"
for n in "${NODES[@]}"; do mkdir -p "$SPOOL/$n"; done
chown "$SLURM_USER": "$RUN" "$LOG" "$CTLD"
chown -R mysql:mysql "$DB"
chmod 1777 "$JOBS"

export SLURM_CONF="$ETC/slurm.conf"

# --- test user ---------------------------------------------------------------
if ! id "$TEST_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash --comment "slurm-attrib test user" "$TEST_USER"
    log "created Unix user $TEST_USER"
fi

# --- munge ---------------------------------------------------------------------
# Slurm 22.05 ignores AuthInfo=socket=... for client<->slurmdbd connections
# (sacctmgr always dials /run/munge/munge.socket.2), so use the default munged
# socket and key. Reuse a munged that already answers there; else start one.
MUNGE_SOCKET=/run/munge/munge.socket.2
# A munged started by a test cluster is shared by all of them: each registers
# itself in $MUNGE_USERS; stop.sh stops munged when the last one goes.
MUNGE_USERS=/run/munge/sattrib-clusters
MUNGE_PIDFILE=/run/munge/sattrib-munged.pid
mkdir -p /run/munge "$MUNGE_USERS"
printf '%s\n' "$STATE_DIR" > "$MUNGE_USERS/$(printf '%s' "$STATE_DIR" | md5sum | cut -c1-16)"
munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }
if munge_ok; then
    log "reusing running munged on $MUNGE_SOCKET"
else
    if [ ! -s /etc/munge/munge.key ]; then
        if command -v mungekey >/dev/null 2>&1; then mungekey --create --keyfile=/etc/munge/munge.key
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
        chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge; chmod 755 /run/munge
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    runuser -u munge -- env -u SLURM_CONF munged --pid-file="$MUNGE_PIDFILE" \
        </dev/null >/dev/null 2>&1 \
        || { tail -5 /var/log/munge/munged.log >&2 2>/dev/null; die "munged failed to start"; }
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || die "munge round trip failed (see /var/log/munge/munged.log)"
fi
log "munge ok ($(elapsed)s)"

# --- MariaDB -----------------------------------------------------------------
DB_SOCKET="$DB/run/mysqld.sock"
mariadb-install-db --no-defaults --user=mysql --datadir="$DB/data" \
    --auth-root-authentication-method=socket --skip-test-db \
    >"$LOG/mariadb-install.log" 2>&1 || { tail -20 "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
setsid mariadbd --no-defaults --user=mysql --datadir="$DB/data" \
    --socket="$DB_SOCKET" --port="$DB_PORT" --bind-address=127.0.0.1 \
    --pid-file="$DB/run/mariadbd.pid" --log-error="$LOG/mariadbd.log" \
    --skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=128M \
    --innodb-log-file-size=48M --innodb-flush-log-at-trx-commit=2 \
    --innodb-lock-wait-timeout=900 --max-allowed-packet=64M \
    </dev/null >>"$LOG/mariadbd.log" 2>&1 &
ln -sf "$DB/run/mariadbd.pid" "$RUN/mariadbd.pid"
ok=0
for _ in $(seq 300); do
    if timeout 5 mariadb-admin --no-defaults --socket="$DB_SOCKET" -uroot ping >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.1
done
[ "$ok" = 1 ] || { tail -20 "$LOG/mariadbd.log" >&2; die "mariadbd did not come up"; }
mariadb --no-defaults --socket="$DB_SOCKET" -uroot <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
log "mariadbd up on 127.0.0.1:$DB_PORT ($(elapsed)s)"

# --- config --------------------------------------------------------------------
CTLD_HOST="$(hostname -s)"
{
cat <<CONF
# Generated by contrib/testcluster/start.sh -- do not edit, re-run start.sh.
ClusterName=$CLUSTER
SlurmctldHost=$CTLD_HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=$SLURM_USER
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$CTLD
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=${SATTRIB_SLURMD_TIMEOUT:-20}
MessageTimeout=10
InactiveLimit=0
KillWait=2
WaitTime=0
OverTimeLimit=0
JobRequeue=0
MinJobAge=600
PrologEpilogTimeout=60
BatchStartTimeout=20
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
CONF
[ -n "${SATTRIB_PROLOG:-}" ] && echo "Prolog=$SATTRIB_PROLOG"
if [ -n "${SATTRIB_PROLOG:-}" ] && [ -n "${SATTRIB_PROLOG_FLAGS-Alloc}" ]; then
    echo "PrologFlags=${SATTRIB_PROLOG_FLAGS-Alloc}"
fi
[ -n "${SATTRIB_EPILOG:-}" ] && echo "Epilog=$SATTRIB_EPILOG"
[ -n "${SATTRIB_EPILOG_CTLD:-}" ] && echo "EpilogSlurmctld=$SATTRIB_EPILOG_CTLD"
echo
i=0
for n in "${NODES[@]}"; do
    echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i)) CPUs=$NODE_CPUS RealMemory=$NODE_MEM State=UNKNOWN"
    i=$((i + 1))
done
echo "PartitionName=gpu Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
if [ -n "${SATTRIB_EXTRA_SLURM_CONF:-}" ]; then
    echo
    echo "# SATTRIB_EXTRA_SLURM_CONF"
    printf '%s\n' "$SATTRIB_EXTRA_SLURM_CONF"
fi
} > "$SLURM_CONF"
chmod 644 "$SLURM_CONF"

# slurmdbd reads slurmdbd.conf from the directory of $SLURM_CONF.
cat > "$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$SLURM_USER
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
CONF
chown "$SLURM_USER": "$ETC/slurmdbd.conf"; chmod 600 "$ETC/slurmdbd.conf"

cat > "$STATE_DIR/env.sh" <<ENV
# source this file to use the test cluster
export SLURM_CONF=$SLURM_CONF
ENV

# --- slurmdbd ----------------------------------------------------------------------
setsid slurmdbd </dev/null >>"$LOG/slurmdbd.stderr" 2>&1 \
    || { tail -20 "$LOG/slurmdbd.log" >&2; die "slurmdbd failed to start"; }
ok=0
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ]; do
    if timeout 10 sacctmgr -n -P show cluster >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
done
[ "$ok" = 1 ] || { tail -20 "$LOG/slurmdbd.log" >&2; die "slurmdbd did not answer within ${WAIT}s"; }
timeout 30 sacctmgr -i add cluster "$CLUSTER" >/dev/null
timeout 30 sacctmgr -i add account "$TEST_ACCOUNT" Cluster="$CLUSTER" Description="slurm-attrib tests" Organization=sattrib >/dev/null
timeout 30 sacctmgr -i add user "$TEST_USER" Account="$TEST_ACCOUNT" Cluster="$CLUSTER" >/dev/null
timeout 30 sacctmgr -i add user root Account="$TEST_ACCOUNT" Cluster="$CLUSTER" >/dev/null || true
log "slurmdbd up, cluster $CLUSTER registered ($(elapsed)s)"

# --- slurmctld ------------------------------------------------------------------
setsid slurmctld -i </dev/null >>"$LOG/slurmctld.stderr" 2>&1 \
    || { tail -20 "$LOG/slurmctld.log" >&2; die "slurmctld failed to start"; }
ok=0
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ]; do
    if timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then ok=1; break; fi
    sleep 0.2
done
[ "$ok" = 1 ] || { tail -20 "$LOG/slurmctld.log" >&2; die "slurmctld did not answer within ${WAIT}s"; }
log "slurmctld up ($(elapsed)s)"

# --- slurmd x4 -------------------------------------------------------------------
for n in "${NODES[@]}"; do
    setsid slurmd -N "$n" </dev/null >>"$LOG/slurmd-$n.stderr" 2>&1 \
        || { tail -20 "$LOG/slurmd-$n.log" >&2; die "slurmd -N $n failed to start"; }
done
ok=0
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ]; do
    states="$(timeout 10 sinfo -h -N -p gpu -o '%N %t' 2>/dev/null | sort -u)"
    if [ "$(printf '%s\n' "$states" | grep -c ' idle$')" -eq "${#NODES[@]}" ]; then ok=1; break; fi
    sleep 0.2
done
[ "$ok" = 1 ] || { printf '%s\n' "$states" >&2; die "nodes not all idle within ${WAIT}s (see $LOG/slurmd-*.log)"; }
ok=0
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ]; do
    if timeout 10 sacct -n -X -a >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
done
[ "$ok" = 1 ] || die "sacct does not work within ${WAIT}s"
log "4 nodes idle, sacct works: cluster ready in $(elapsed)s"
log "logs: $LOG  job output dir: $JOBS  test user: $TEST_USER"
echo "export SLURM_CONF=$SLURM_CONF"
