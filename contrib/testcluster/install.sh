#!/usr/bin/env bash
# Install the Debian packages the local test cluster needs (idempotent).
# Exits 0 quickly when everything is already installed.
set -euo pipefail

# python3-click and python3-yaml: a Python the non-root test user can run for `sattrib show`
# (the project venv may live under /root, which other users cannot enter).
# postgresql: the fleet store's second backend; prometheus: its promtool checks the metrics we write,
# and the Prometheus connector is tested against its server (contrib/testprom);
# chromium: the service's pages are loaded in it (headless), through nginx-light with
# contrib/systemd/nginx-sattrib.conf, the reverse proxy a site puts in front of the service.
PKGS=(slurm-wlm slurmdbd slurm-client munge mariadb-server python3-click python3-yaml postgresql prometheus chromium nginx-light)
# Binaries that must exist afterwards (package -> binary sanity check).
BINS=(slurmctld slurmd slurmdbd sbatch sacct sacctmgr munged mariadbd promtool chromium nginx)

have_all() {
    local b
    for b in "${BINS[@]}"; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || return 1
    done
    dpkg-query -W -f='${Status}\n' "${PKGS[@]}" 2>/dev/null | grep -vq '^install ok installed$' && return 1
    return 0
}

if have_all; then
    echo "testcluster/install.sh: all packages present"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "testcluster/install.sh: SKIP: must run as root to install ${PKGS[*]}" >&2
    exit 2
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "testcluster/install.sh: SKIP: apt-get not found (Debian/Ubuntu only); install ${PKGS[*]} by hand" >&2
    exit 3
fi

export DEBIAN_FRONTEND=noninteractive
# Never start services from the postinst (there is no init system here anyway).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    created_policy=1
fi
cleanup() { [ "$created_policy" = 1 ] && rm -f "$policy"; return 0; }
trap cleanup EXIT

echo "testcluster/install.sh: installing ${PKGS[*]}"
# Where apt's helper cannot find gpgv on its PATH, tell apt where it is (signatures are still checked).
apt_opts=()
gpgv_path=$(command -v gpgv || true)
[ -n "$gpgv_path" ] && apt_opts=(-o "Apt::Key::gpgvcommand=$gpgv_path")
apt-get "${apt_opts[@]}" update -qq
apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${PKGS[@]}" >/dev/null

if ! have_all; then
    echo "testcluster/install.sh: ERROR: packages installed but binaries missing" >&2
    exit 1
fi
echo "testcluster/install.sh: done"
