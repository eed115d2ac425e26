"""nginx in front of `sattrib serve --socket`, configured with the location block a site copies
from contrib/systemd/nginx-sattrib.conf: its authentication line enabled (basic auth with a test
password file) and its socket path the test's, nothing else changed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "contrib" / "systemd" / "nginx-sattrib.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
WORKER_USER = "www-data"  # Debian's nginx workers, the group the service's socket is given to
AUTH_EXAMPLE = '# your authentication here, e.g.:  auth_basic "sattrib"; auth_basic_user_file /etc/nginx/sattrib.htpasswd;'


def site_folder() -> Path:
    """A folder nginx's workers (www-data) can enter: the socket and the password file live here."""
    folder = Path(tempfile.mkdtemp(prefix="sattrib-nginx-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


def location_block(socket_path: Path, htpasswd: Path) -> str:
    block = EXAMPLE.read_text(encoding="utf-8")
    assert AUTH_EXAMPLE in block and "/run/sattrib/serve.sock" in block, "contrib/systemd/nginx-sattrib.conf changed"
    return (block.replace(AUTH_EXAMPLE, f'auth_basic "sattrib"; auth_basic_user_file {htpasswd};')
            .replace("/run/sattrib/serve.sock", str(socket_path)))


def start_nginx(folder: Path, socket_path: Path, users: dict[str, str]) -> tuple[str, subprocess.Popen]:
    """(base URL of the service's pages, the nginx process) for these users and passwords."""
    htpasswd = folder / "htpasswd"
    htpasswd.write_text("".join(f"{user}:{{PLAIN}}{password}\n" for user, password in users.items()))
    htpasswd.chmod(0o644)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    temp = "\n".join(f"{kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = folder / "nginx.conf"
    conf.write_text(f"""daemon off;
user {WORKER_USER};
worker_processes 1;
pid {folder / 'nginx.pid'};
error_log {folder / 'error.log'};
events {{ worker_connections 64; }}
http {{
    access_log off;
    {temp}
    server {{
        listen 127.0.0.1:{port};
{location_block(socket_path, htpasswd)}
    }}
}}
""")
    process = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(folder)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited {process.returncode}: {process.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"http://127.0.0.1:{port}/sattrib", process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("nginx did not listen within 20 s")
