"""Site configuration: /etc/sattrib/config.yaml, or the file named by $SATTRIB_CONFIG.

Read by the epilog's hot path too, so this module uses only the standard library and PyYAML
(no pydantic).  Unknown keys are an error naming the file and the key; a missing
/etc/sattrib/config.yaml means the defaults below, a missing $SATTRIB_CONFIG is an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from slurm_attrib.provenance import Provenance

DEFAULT_PATH = Path("/etc/sattrib/config.yaml")
ENV_VAR = "SATTRIB_CONFIG"


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class SourceConfig:
    """One capture source: a command (argv list) or a path, with its own bounds."""

    name: str
    kind: str  # vocab.SOURCE_KINDS
    command: tuple[str, ...] = ()
    path: str = ""  # file path or glob; used when command is empty
    timeout: float = 3.0
    max_bytes: int = 8 * 1024 * 1024
    prefilter: bool = True  # keep only lines holding a rule literal (plus a little context)
    enabled: bool = True
    max_files: int = 32  # a glob path: at most this many files (the newest)
    # Who can write it (provenance.Provenance value); empty: a command run as root is what its kind
    # says, a file is too when root owns it and only root can write it, anything else is `user`.
    provenance: str = ""
    # "root": every line was sent by uid 0 (a journalctl match on `_UID=0`, which journald takes
    # from the sender's socket credentials): a line filed under one of provenance.ROOT_DAEMONS is
    # that daemon's own, not a user's `logger` line under its name.  Empty: the sender is unknown.
    senders: str = ""


@dataclass(frozen=True)
class WebhookConfig:
    """One receiver of each new diagnosis (sattrib.notify)."""

    url: str  # http:// or https://
    format: str = "json"  # json: the diagnosis and its index row | template: a jinja2 rendering
    template: str = "webhook-chat.json.j2"  # with format template: a file of template_dirs or templates/
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # e.g. an Authorization header
    timeout: float = 5.0  # seconds per attempt
    retries: int = 3  # attempts after the first one
    backoff: float = 1.0  # seconds before the first retry, doubling


WEBHOOK_FORMATS = ("json", "template")


@dataclass(frozen=True)
class LokiStream:
    """One LogQL stream selector of a Loki connector, read as the given source kind."""

    name: str  # names the evidence source: loki:<node>/<name>
    kind: str  # kernel | syslog | app (vocab.SOURCE_KINDS)
    selector: str  # a LogQL stream selector, e.g. '{job="systemd-journal", transport="kernel"}'
    pipeline: str = ""  # LogQL line filters appended to the query, e.g. '|~ "NVRM|mlx5"'
    program_label: str = ""  # a label naming the program (syslog_identifier): shown as `prog:`


@dataclass(frozen=True)
class LokiConfig:
    """Kernel and syslog lines of the job's nodes and window from Loki's query_range API."""

    url: str = ""  # empty: off
    headers: tuple[tuple[str, str], ...] = ()  # Authorization, X-Scope-OrgID, ...
    node_label: str = "host"  # the stream label holding the node's hostname
    node_suffix: str = r"(?:\..*)?"  # regex after the hostname in that label (a domain)
    streams: tuple[LokiStream, ...] = ()
    margin: float = 300.0  # seconds read before the job's start and after its end
    timeout: float = 10.0  # seconds for all of this connector's requests of one job
    max_bytes: int = 16 * 1024 * 1024  # response bytes, all requests of one job
    max_lines: int = 50_000  # entries per stream of one job (the newest are kept)
    page_lines: int = 5000  # entries per request (Loki's max_entries_limit_per_query default)


@dataclass(frozen=True)
class PrometheusConfig:
    """DCGM and node_exporter series of the job's nodes and window from Prometheus' query API."""

    url: str = ""  # empty: off
    headers: tuple[tuple[str, str], ...] = ()
    # the series labels that may hold the node's hostname, tried in turn: node_exporter is found
    # by its target (`instance`), dcgm-exporter also by its own `Hostname` (a target may be an IP)
    node_labels: tuple[str, ...] = ("instance", "Hostname")
    node_suffix: str = r"(?:\..*)?(?::\d+)?"  # regex after the hostname: a domain, a port
    metrics: tuple[str, ...] = ()  # empty: connectors.prometheus.DEFAULT_METRICS
    margin: float = 300.0
    timeout: float = 10.0
    max_bytes: int = 16 * 1024 * 1024
    max_series: int = 4096  # changed series read per job


@dataclass(frozen=True)
class Config:
    spool: str = "/var/spool/sattrib"  # shared filesystem: <spool>/<jobid>/nodes/<node>.json.gz
    local_spool: str = "/var/tmp/sattrib"  # fallback when the shared spool is not writable
    # SlurmUser of slurm.conf: the controller's worker runs as it, and spool files are readable by
    # root and its group only; empty: SlurmUser= of slurm.conf ($SLURM_CONF), else root.
    slurm_user: str = ""
    results: str = "/var/lib/sattrib/results"  # <results>/<jobid>/diagnosis.{json,txt}, index.db
    epilog_timeout: float = 10.0  # the epilog's hard bound, all sources included
    bundle_max_bytes: int = 16 * 1024 * 1024
    context_lines: int = 2  # lines kept around each pre-filtered line
    analysis_deadline: float = 60.0  # how long the controller waits for node bundles
    # After that first analysis, how long the worker keeps watching for the bundles still missing
    # (a node whose job process hangs in the kernel runs its epilog only after Slurm's
    # UnkillableStepTimeout): each late arrival is analysed again and replaces the diagnosis.
    late_bundle_wait: float = 600.0
    # Each analysis of the worker and of `sattrib batch` runs in a child process within these
    # (0: no limit); one that exceeds them is stored as an incomplete diagnosis saying so.
    analysis_max_seconds: float = 600.0
    analysis_max_bytes: int = 4 * 1024**3  # address space of the analysing process
    drain_policy: str = "recommend"  # off | recommend | auto
    drain_max_nodes: int = 2
    systemic_threshold: int = 3  # more suspects than this in one job: drain nothing
    admin_group: str = ""  # may read every diagnosis
    rule_dirs: tuple[str, ...] = ()
    template_dirs: tuple[str, ...] = ()
    sources: tuple[SourceConfig, ...] = ()  # empty: the built-in capture sources
    slurm_backend: str = "auto"  # auto | pyslurm | cli
    # The fleet (sattrib report / drain): a node or GPU named as the hardware origin of >= 2 jobs
    # within this many days is a repeat offender; GPU-hours lost count this many GPUs per node;
    # iblinkinfo / ibnetdiscover output mapping host ports to switch ports.
    repeat_window_days: float = 14.0
    gpus_per_node: int = 8
    topology_files: tuple[str, ...] = ()
    # node_exporter textfile collector folder: the worker rewrites <dir>/sattrib.prom after each diagnosis
    metrics_textfile_dir: str = ""
    # POST each new diagnosis; what cannot be delivered is appended to the dead-letter file
    # (default <results>/webhooks-dead-letter.jsonl) for `sattrib webhooks --retry`.
    webhooks: tuple[WebhookConfig, ...] = ()
    webhook_dead_letter: str = ""
    # sattrib serve: admins by a token file (mode 0600), users by MUNGE credentials or a reverse
    # proxy's user header.  The header is honoured only over a channel a local user cannot reach:
    # the service's Unix socket (`sattrib serve --socket`, mode 0660, group service_socket_group),
    # or with the shared secret of service_proxy_secret_file (root-owned, 0600) that the proxy adds
    # as X-Sattrib-Proxy-Secret, or from the addresses of service_trusted_proxies (a loopback
    # address, which every local user can reach, only with service_trust_loopback_proxy: true).
    service_admin_token_file: str = ""
    service_trusted_proxies: tuple[str, ...] = ()
    service_user_header: str = "X-Remote-User"
    service_munge_socket: str = ""  # empty: unmunge's default socket
    service_socket_group: str = ""  # the web server's group, which may connect to --socket
    service_proxy_secret_file: str = ""
    service_trust_loopback_proxy: bool = False
    # POST /v1/analyze: analyses at once, uploads waiting beyond those (then 503), and each
    # analysis' bounds (a child process: wall-clock seconds, address space in MB).
    service_upload_workers: int = 2
    service_upload_queue: int = 8
    service_upload_timeout: float = 120.0
    service_upload_memory_mb: int = 2048
    # The results index: empty = SQLite in `results` (index.db); a postgresql:// URL = that database
    # (for writers on several hosts at once; needs the `postgres` extra).
    index_url: str = ""
    # Who may read the SQLite index (job ids, users, states, node names; no log text): `auto` =
    # everyone where Slurm shows everyone's jobs anyway (PrivateData without jobs), else only its
    # writers and admin_group; `everyone` / `own` decide it here.  Users then read their own
    # diagnoses through their per-user files (sattrib show) or the service.
    index_visibility: str = "auto"
    # Evidence connectors beside the local files and node bundles (slurm_attrib.connectors):
    # each is bounded in time and size, and its failure is recorded in coverage, never fatal.
    loki: LokiConfig = LokiConfig()
    prometheus: PrometheusConfig = PrometheusConfig()


DRAIN_POLICIES = ("off", "recommend", "auto")
INDEX_VISIBILITIES = ("auto", "everyone", "own")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def index_url_problem(url: object) -> str:
    """What is wrong with an `index_url` setting ("" when nothing).  Never quotes a URL, which
    may hold a password."""
    if not isinstance(url, str):
        return f"index_url must be a string, not {type(url).__name__}"
    if not url or url.startswith(POSTGRES_SCHEMES):
        return ""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    shown = f"a {scheme}:// URL" if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) else "a value without a URL scheme"
    return f"index_url must be empty (SQLite in the results directory) or a postgresql:// URL, not {shown}"


def config_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def load_config(path: Path | None = None) -> Config:
    """The site config; the defaults when /etc/sattrib/config.yaml does not exist.  A file named
    by $SATTRIB_CONFIG (or `path`) that does not exist is an error: a typo there must not turn
    into the default spool and results."""
    named = path is not None or bool(os.environ.get(ENV_VAR))
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if named:
            raise ConfigError(f"{path}: no such config file") from None
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return _config_of_text(text, path)


def admin_group_for_gates() -> tuple[str, Path]:
    """(admin_group, the file that set it) for the command line's admin gates.  Only a file that
    root owns and only root can write decides who is an administrator: $SATTRIB_CONFIG when it is
    such a file, else /etc/sattrib/config.yaml (a caller's own config may set anything else, but
    cannot make anyone an administrator).  No such file: "" (root only).  Raises ConfigError when
    the default file could have been written by someone else."""
    if os.environ.get(ENV_VAR):
        chosen = Path(os.environ[ENV_VAR])
        try:
            return _root_owned_config(chosen).admin_group, chosen
        except (FileNotFoundError, ConfigError):
            pass
    try:
        return _root_owned_config(DEFAULT_PATH).admin_group, DEFAULT_PATH
    except FileNotFoundError:
        return "", DEFAULT_PATH


def _root_owned_config(path: Path) -> Config:
    """The config in `path`, read through one descriptor whose owner and mode are checked."""
    try:
        with open(path, "rb") as stream:
            info = os.fstat(stream.fileno())
            if info.st_uid != 0 or info.st_mode & 0o022:
                raise ConfigError(f"{path} decides who is an administrator but is not owned by root, or "
                                  f"is writable by group or others (chown root; chmod go-w)")
            text = stream.read(4 * 1024 * 1024).decode("utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return _config_of_text(text, path)


def _config_of_text(text: str, path: Path) -> Config:
    import yaml  # only when a file exists

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of settings")
    return _config_from(data, path)


def _config_from(data: dict, path: Path) -> Config:
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}")
    values = {}
    for key, value in data.items():
        if key == "sources":
            values[key] = tuple(_source_from(item, path) for item in value or [])
        elif key == "webhooks":
            values[key] = tuple(_webhook_from(item, path) for item in value or [])
        elif key == "loki":
            values[key] = _loki_from(value, path)
        elif key == "prometheus":
            values[key] = _connector_from(PrometheusConfig, "prometheus", value, path)
        elif key == "drain_policy" and value is False:
            values[key] = "off"  # YAML 1.1 reads a bare `off` as false
        elif key in ("rule_dirs", "template_dirs", "topology_files", "service_trusted_proxies"):
            values[key] = tuple(str(v) for v in value or [])
        else:
            values[key] = value
    config = replace(Config(), **values)
    if config.drain_policy not in DRAIN_POLICIES:
        raise ConfigError(f"{path}: drain_policy {config.drain_policy!r} is not one of {', '.join(DRAIN_POLICIES)}")
    for key in ("drain_max_nodes", "systemic_threshold", "repeat_window_days"):
        value = getattr(config, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise ConfigError(f"{path}: {key} must be a number >= 0, not {value!r}")
    if config.index_visibility not in INDEX_VISIBILITIES:
        raise ConfigError(f"{path}: index_visibility {config.index_visibility!r} is not one of {', '.join(INDEX_VISIBILITIES)}")
    if index_url_problem(config.index_url):
        raise ConfigError(f"{path}: {index_url_problem(config.index_url)}")
    for key in ("analysis_max_seconds", "analysis_max_bytes"):
        value = getattr(config, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise ConfigError(f"{path}: {key} must be a number >= 0 (0: no limit), not {value!r}")
    if 0 < config.analysis_max_bytes < 256 * 1024**2:
        raise ConfigError(f"{path}: analysis_max_bytes must be 0 (no limit) or at least 268435456 (256 MiB)")
    _check_service(config, path)
    return config


def _check_service(config: Config, path: Path) -> None:
    for key in ("service_upload_workers", "service_upload_queue", "service_upload_memory_mb"):
        value = getattr(config, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "service_upload_queue" else 1):
            raise ConfigError(f"{path}: {key} must be a whole number of at least {0 if key == 'service_upload_queue' else 1}")
    timeout = config.service_upload_timeout
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < 86400:
        raise ConfigError(f"{path}: service_upload_timeout must be seconds between 0 and 86400")
    if not isinstance(config.service_trust_loopback_proxy, bool):
        raise ConfigError(f"{path}: service_trust_loopback_proxy must be true or false")
    for key in ("service_socket_group", "service_proxy_secret_file", "service_user_header"):
        if not isinstance(getattr(config, key), str):
            raise ConfigError(f"{path}: {key} must be a string")


def _webhook_from(item: object, path: Path) -> WebhookConfig:
    if not isinstance(item, dict) or not isinstance(item.get("url"), str):
        raise ConfigError(f"{path}: each webhook needs a 'url'")
    known = {f.name for f in fields(WebhookConfig)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ConfigError(f"{path}: webhook: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if not item["url"].startswith(("http://", "https://")):
        raise ConfigError(f"{path}: webhook url must start with http:// or https://")
    if item.get("format", "json") not in WEBHOOK_FORMATS:
        raise ConfigError(f"{path}: webhook format {item.get('format')!r} is not one of {', '.join(WEBHOOK_FORMATS)}")
    headers = item.get("headers") or {}
    if not isinstance(headers, dict):
        raise ConfigError(f"{path}: webhook headers must be a mapping")
    return WebhookConfig(**{**item, "headers": tuple((str(k), str(v)) for k, v in headers.items())})


def _source_from(item: object, path: Path) -> SourceConfig:
    if not isinstance(item, dict) or "name" not in item or "kind" not in item:
        raise ConfigError(f"{path}: each source needs at least 'name' and 'kind'")
    known = {f.name for f in fields(SourceConfig)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ConfigError(f"{path}: source {item['name']!r}: unknown key(s) {', '.join(unknown)}")
    if "command" in item:
        item = {**item, "command": tuple(str(a) for a in item["command"] or ())}
    if item.get("provenance", "") not in ("", *(p.value for p in Provenance)):
        raise ConfigError(f"{path}: source {item['name']!r}: provenance must be one of {', '.join(p.value for p in Provenance)}")
    if item.get("senders", "") not in ("", "root"):
        raise ConfigError(f"{path}: source {item['name']!r}: senders must be 'root' or empty")
    return SourceConfig(**item)


def _connector_from(cls, name: str, item: object, path: Path, **extra):
    """A connector's mapping: known keys, an http(s) URL, headers as a mapping."""
    if item is None:
        return cls()
    if not isinstance(item, dict):
        raise ConfigError(f"{path}: {name} must be a mapping of settings")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ConfigError(f"{path}: {name}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    url = item.get("url", "")
    if not isinstance(url, str) or (url and not url.startswith(("http://", "https://"))):
        raise ConfigError(f"{path}: {name} url must start with http:// or https://")
    headers = item.get("headers") or {}
    if not isinstance(headers, dict):
        raise ConfigError(f"{path}: {name} headers must be a mapping")
    values = {**item, **extra, "headers": tuple((str(k), str(v)) for k, v in headers.items())}
    for key in ("metrics", "node_labels"):
        if key in values:
            listed = values[key] if isinstance(values[key], (list, tuple)) else [values[key]]
            values[key] = tuple(str(m) for m in listed if m is not None)
    for label in values.get("node_labels", ()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label):
            raise ConfigError(f"{path}: {name} node_labels: {label!r} is not a label name")
    try:
        re.compile(str(values.get("node_suffix", "")))
    except re.error as exc:
        raise ConfigError(f"{path}: {name} node_suffix is not a valid regex: {exc}") from None
    return cls(**values)


def _loki_from(item: object, path: Path) -> LokiConfig:
    streams = []
    raw = item.get("streams") if isinstance(item, dict) else None
    for entry in raw or []:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("name", "kind", "selector")):
            raise ConfigError(f"{path}: each loki stream needs 'name', 'kind' and 'selector'")
        known = {f.name for f in fields(LokiStream)}
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ConfigError(f"{path}: loki stream {entry['name']!r}: unknown key(s) {', '.join(unknown)}")
        if entry["kind"] not in ("kernel", "syslog", "app"):
            raise ConfigError(f"{path}: loki stream {entry['name']!r}: kind must be kernel, syslog or app")
        if not (entry["selector"].strip().startswith("{") and entry["selector"].strip().endswith("}")):
            raise ConfigError(f"{path}: loki stream {entry['name']!r}: selector must be a LogQL stream selector {{...}}")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", entry["name"]):
            raise ConfigError(f"{path}: loki stream name {entry['name']!r} may hold only letters, digits, . _ -")
        streams.append(LokiStream(**entry))
    config = _connector_from(LokiConfig, "loki", item, path, streams=tuple(streams))
    if config.url and not config.streams:
        raise ConfigError(f"{path}: loki needs at least one entry in streams (name, kind, selector)")
    return config
