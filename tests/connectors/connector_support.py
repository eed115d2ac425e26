"""Helpers of the connector tests: simulated jobs split between local files and a server, and the
throw-away Prometheus of contrib/testprom.  (No conftest.py here: other test folders import theirs
by name.)"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
import subprocess
import tempfile
from pathlib import Path

import pytest

from slurm_attrib.config import LokiStream
from slurm_attrib.simulate.job import Job
from slurm_attrib.simulate.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[2]
TESTPROM = REPO / "contrib" / "testprom"


def simulated(name: str, out: Path, seed: int = 3, nodes: int = 4) -> Job:
    """Write scenario `name` as a logs-layout job into `out`; the Job keeps every line with its time."""
    job = Job(name, nodes, 4, seed)
    job.baseline()
    SCENARIOS[name].build(job)
    job.write(out)
    return job


def diagnose(path: Path, config=None) -> dict:
    from slurm_attrib.engine.pipeline import analyze_path

    return analyze_path(path, (), config).model_dump(mode="json")


def verdict(diagnosis: dict) -> dict:
    """What must not depend on where the lines were read from."""
    return {
        "domain": diagnosis["domain"],
        "category": diagnosis["category"],
        "culprit_nodes": diagnosis["culprit_nodes"],
        "quality": diagnosis["quality"],
        "drain": [d["node"] for d in diagnosis["drain"]],
        "gpus": [(g["node"], g["pci_bus_id"], g["xid"]) for g in diagnosis.get("gpus") or []],
    }


def cause_lines(diagnosis: dict) -> list[dict]:
    return [e for e in diagnosis["evidence"] if e["role"] == "cause"]


def drop_lines(job_dir: Path, *needles: str) -> int:
    """Remove, from every node's files, the lines holding any of `needles`; how many went."""
    dropped = 0
    for path in sorted(job_dir.glob("*/*")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if not any(n in line for n in needles)]
        dropped += len(lines) - len(kept)
        path.write_text("".join(kept), encoding="utf-8")
    return dropped


class PrometheusServer:
    """contrib/testprom/start.sh over an OpenMetrics file; stop() removes it."""

    def __init__(self, openmetrics: str):
        self.dir = tempfile.mkdtemp(prefix="sattrib-testprom-", dir="/tmp")
        shutil.rmtree(self.dir)
        source = Path(tempfile.mkstemp(prefix="sattrib-om-", suffix=".om")[1])
        source.write_text(openmetrics, encoding="utf-8")
        try:
            proc = subprocess.run([str(TESTPROM / "start.sh"), self.dir, str(source)], capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)
        finally:
            source.unlink()
        if proc.returncode == 2:
            pytest.skip(f"prometheus tests: SKIPPED — {proc.stderr.strip().splitlines()[-1]}")
        if proc.returncode != 0:
            self.stop()
            pytest.fail(f"contrib/testprom/start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False)
        self.url = proc.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        subprocess.run([str(TESTPROM / "stop.sh"), self.dir], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


class OpenMetrics:
    """Series written as OpenMetrics text for promtool: one family after another, samples in time order."""

    def __init__(self):
        self.families: dict[str, tuple[str, dict[str, list[tuple[float, float]]]]] = {}

    def series(self, metric: str, kind: str, labels: dict[str, str], samples: list[tuple[float, float]]) -> None:
        shown = ",".join(f'{k}={json.dumps(v)}' for k, v in labels.items())
        self.families.setdefault(metric, (kind, {}))[1].setdefault(shown, []).extend(samples)

    def text(self) -> str:
        out = []
        for metric, (kind, series) in self.families.items():
            out.append(f"# TYPE {metric} {kind}")
            for shown, samples in series.items():
                out += [f"{metric}{{{shown}}} {_num(v)} {t:.3f}" for t, v in sorted(samples)]
        return "\n".join(out) + "\n# EOF\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def scrapes(start: float, end: float, every: float = 15.0) -> list[float]:
    """Scrape times over [start, end], aligned to `every` seconds."""
    first = (int(start // every) + 1) * every
    return [first + i * every for i in range(int((end - first) // every) + 1)]


def step_samples(times: list[float], changes: list[tuple[float, float]], initial: float = 0.0) -> list[tuple[float, float]]:
    """A series scraped at `times` whose value becomes v at each (t, v) of `changes`."""
    out = []
    for at in times:
        value = initial
        for t, v in changes:
            if t <= at:
                value = v
        out.append((at, value))
    return out


# -- what the exporters and the log shipper would have held for a simulated job --------------------

XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-f:]+)\): (?P<xid>\d+),")
UUID = re.compile(r"NVRM: GPU at PCI:(?P<bus>[0-9a-f:]+): (?P<uuid>GPU-[0-9a-f-]+)")


def dcgm_series(job, metrics: OpenMetrics, with_totals: bool) -> None:
    """What dcgm-exporter would have exposed for the job's GPUs: the last-value Xid gauge and,
    from newer exporters, a counter per Xid; every GPU of every node, scraped every 15 s."""
    times = scrapes(job.start - 600, job.end + 600)
    for node in job.nodes:
        xids = [(t, m["bus"], int(m["xid"])) for t, _, msg in job.kernel[node.host] if (m := XID.search(msg))]
        uuids = {m["bus"]: m["uuid"] for _, _, msg in job.kernel[node.host] if (m := UUID.search(msg))}
        for index in range(job.rpn):
            bus = job.gpu_bus(index)
            labels = {"gpu": str(index), "UUID": uuids.get(bus, f"GPU-{node.index:08x}-0000-0000-0000-{index:012x}"),
                      "pci_bus_id": f"0000{bus.upper()}.0", "device": f"nvidia{index}",
                      "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node.host,
                      "instance": f"{node.host}:9400", "job": "dcgm"}
            mine = [(t, x) for t, b, x in xids if b == bus]
            metrics.series("DCGM_FI_DEV_XID_ERRORS", "gauge", labels, step_samples(times, mine))
            for code in sorted({x for _, x in mine}) if with_totals else []:
                counts = [(t, sum(1 for u, x in mine if x == code and u <= t)) for t, _ in mine]
                metrics.series("DCGM_EXP_XID_ERRORS_TOTAL", "counter", {**labels, "xid": str(code)},
                               step_samples(times, counts))


def ib_series(job, metrics: OpenMetrics, down: dict[str, tuple[float, float]]) -> None:
    """node_exporter's infiniband collector on every node: port mlx5_0/1 ACTIVE; a node in `down`
    loses the link at t0 (link_downed +1, state DOWN) and gets it back at t1."""
    times = scrapes(job.start - 600, job.end + 600)
    for node in job.nodes:
        labels = {"device": "mlx5_0", "port": "1", "instance": f"{node.host}:9100", "job": "node"}
        t0, t1 = down.get(node.host, (float("inf"), float("inf")))
        metrics.series("node_infiniband_link_downed_total", "counter", labels, step_samples(times, [(t0, 1)], 0))
        metrics.series("node_infiniband_state_id", "gauge", labels, step_samples(times, [(t0, 1), (t1, 4)], 4))
        metrics.series("node_infiniband_physical_state_id", "gauge", labels, step_samples(times, [(t0, 2), (t1, 5)], 5))


STREAMS = (
    LokiStream(name="kernel", kind="kernel", selector='{job="systemd-journal", transport="kernel"}'),
    LokiStream(name="journal", kind="syslog", selector='{job="systemd-journal", transport!="kernel"}',
               program_label="syslog_identifier"),
)


def push_job(server: LokiStandIn, job) -> int:
    """What promtail's journal scrape would have sent for the job's nodes: bare messages with their
    journal time and labels; kernel messages under transport=kernel.  -> entries pushed."""
    streams = []
    for node in job.nodes:
        horizon = min(node.cut if node.cut is not None else float("inf"), job.end + 45)
        kernel = [[str(int((t + node.skew) * 1e9)), m] for t, _, m in sorted(job.kernel[node.host]) if t <= horizon]
        streams.append({"stream": {"job": "systemd-journal", "transport": "kernel", "host": node.host}, "values": kernel})
        by_program: dict[str, list] = {}
        for t, _, program, message in sorted(job.syslog[node.host]):
            if program != "kernel" and node.boot + 30 <= t <= horizon:
                name = re.sub(r"\[\d+\]$", "", program)
                by_program.setdefault(name, []).append([str(int((t + node.skew) * 1e9)), message])
        for name, values in sorted(by_program.items()):
            streams.append({"stream": {"job": "systemd-journal", "transport": "syslog", "host": node.host,
                                       "syslog_identifier": name}, "values": values})
    body = json.dumps({"streams": streams}).encode()
    request = urllib.request.Request(server.url + "/loki/api/v1/push", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **({"X-Scope-OrgID": server.tenant} if server.tenant else {})})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
    return sum(len(s["values"]) for s in streams)


def remove_node_logs(job_dir: Path) -> None:
    """Only the job's own output stays local."""
    for folder in [p for p in job_dir.iterdir() if p.is_dir()]:
        for path in folder.iterdir():
            path.unlink()
