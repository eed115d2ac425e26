"""Who the proxy says the caller is counts only over a channel a local user cannot reach: the
service's Unix socket (mode 0660, the configured group), or with the proxy's shared secret.  A
loopback proxy address alone is refused at start; repeated identity headers are refused."""

from __future__ import annotations

import grp
import os
import stat

import pytest
from service_support import PROXY_SECRET, start_server, stop_server, store_dir  # noqa: F401 (a fixture)

USER = ("X-Remote-User", "nobody")


def _config(store_dir, *lines: str) -> str:
    return "\n".join([f"results: {store_dir / 'results'}", *lines]) + "\n"


def test_a_loopback_proxy_address_alone_is_refused_at_start(store_dir):
    with pytest.raises(RuntimeError) as refused:
        start_server(store_dir, _config(store_dir, "service_trusted_proxies: ['127.0.0.1']"))
    message = str(refused.value).split(": ", 1)[1].strip()
    assert message.count("\n") == 0 and message.startswith("sattrib: service_trusted_proxies: 127.0.0.1 is a loopback")
    assert "service_trust_loopback_proxy" in message
    for address in ("::1", "127.0.0.2", "localhost"):
        with pytest.raises(RuntimeError, match="loopback address"):
            start_server(store_dir, _config(store_dir, f"service_trusted_proxies: ['{address}']"))


def test_the_operator_may_trust_a_loopback_proxy_explicitly(store_dir):
    server = start_server(store_dir, _config(store_dir, "service_trusted_proxies: ['127.0.0.1']",
                                             "service_trust_loopback_proxy: true"))
    try:
        status, _, body = server.raw_request("GET", "/v1/jobs", [USER])
        assert status == 200 and b'"101"' in body
    finally:
        stop_server(server)


def test_the_proxy_secret_is_what_makes_the_header_count(store_dir):
    server = start_server(store_dir, _config(store_dir, f"service_proxy_secret_file: {store_dir / 'proxy-secret'}",
                                             "service_trusted_proxies: ['127.0.0.1']"))
    try:
        assert server.raw_request("GET", "/v1/jobs", [USER, ("X-Sattrib-Proxy-Secret", PROXY_SECRET)])[0] == 200
        for secret in ([], [("X-Sattrib-Proxy-Secret", "guess")], [("X-Sattrib-Proxy-Secret", PROXY_SECRET + "x")],
                       [("X-Sattrib-Proxy-Secret", "é")]):
            status, _, body = server.raw_request("GET", "/v1/jobs", [USER, *secret])
            assert status == 401 and b"honoured only from the configured proxies" in body, secret
    finally:
        stop_server(server)


def test_repeated_identity_headers_are_refused(store_dir):
    server = start_server(store_dir, _config(store_dir, f"service_proxy_secret_file: {store_dir / 'proxy-secret'}"))
    secret = ("X-Sattrib-Proxy-Secret", PROXY_SECRET)
    try:
        for headers in ([("X-Remote-User", "nobody"), ("X-Remote-User", "root"), secret],
                        [("x-remote-user", "root"), ("X-Remote-User", "nobody"), secret],
                        [USER, secret, secret],
                        [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]):
            status, _, body = server.raw_request("GET", "/v1/jobs", headers)
            assert status == 400 and b"appears more than once" in body, headers
        assert server.raw_request("GET", "/v1/jobs", [("X-Remote-User", "root"), secret])[0] == 200
    finally:
        stop_server(server)


def test_over_the_unix_socket_the_proxy_header_counts(store_dir, tmp_path):
    group = grp.getgrgid(os.getgid()).gr_name if os.geteuid() != 0 else "daemon"
    path = tmp_path / "sattrib.sock"
    server = start_server(store_dir, _config(store_dir, f"service_socket_group: {group}"), socket_path=path)
    try:
        info = os.stat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660
        assert info.st_gid == grp.getgrnam(group).gr_gid
        status, _, body = server.raw_request("GET", "/v1/jobs", [USER])
        assert status == 200 and b'"101"' in body and b'"102"' not in body
        assert server.raw_request("GET", "/v1/jobs", [])[0] == 401
    finally:
        stop_server(server)
    again = start_server(store_dir, _config(store_dir), socket_path=path)  # the stale socket file is replaced
    stop_server(again)


def test_an_unknown_socket_group_is_one_line(store_dir, tmp_path):
    with pytest.raises(RuntimeError, match="service_socket_group 'no-such-group' is not a group on this host"):
        start_server(store_dir, _config(store_dir, "service_socket_group: no-such-group"), socket_path=tmp_path / "s")


def test_a_secret_file_others_can_read_is_refused(store_dir):
    loose = store_dir / "loose-secret"
    loose.write_text("x\n")
    loose.chmod(0o640)
    with pytest.raises(RuntimeError, match="service_proxy_secret_file .*: must not be readable by group or others"):
        start_server(store_dir, _config(store_dir, f"service_proxy_secret_file: {loose}"))


@pytest.mark.parametrize("setting, words", [
    ("service_upload_workers: 0", "service_upload_workers must be a whole number of at least 1"),
    ("service_upload_queue: -1", "service_upload_queue must be a whole number of at least 0"),
    ("service_upload_timeout: soon", "service_upload_timeout must be seconds between 0 and 86400"),
    ("service_upload_memory_mb: true", "service_upload_memory_mb must be a whole number of at least 1"),
    ("service_trust_loopback_proxy: 'yes please'", "service_trust_loopback_proxy must be true or false"),
    ("service_socket_group: [www-data]", "service_socket_group must be a string"),
])
def test_bad_service_settings_are_one_line_naming_the_key(tmp_path, setting, words):
    from slurm_attrib.config import ConfigError, load_config

    path = tmp_path / "config.yaml"
    path.write_text(setting + "\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == f"{path}: {words}"
