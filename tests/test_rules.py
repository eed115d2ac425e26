"""The rule pack: every rule passes its own examples, the Xid catalog, loader errors, corpus scan."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest
import yaml

from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset.hooks import (
    CUDA_FAMILIES,
    fault_signals,
    HOOKS,
    ibv_wc_status,
    teardown_signals,
    code_tables,
    decode_code,
    decode_signal,
    xid_catalog,
)
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner
from slurm_attrib.ruleset.selftest import check_rule
from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN, DOMAIN_OF_CATEGORY, SOURCE_KINDS

RULES = load_rules()
PROPER = [r for r in RULES if not r.event.fallback]  # what the first pass reads (fallback rules: second look only)
CORPUS = Path(__file__).resolve().parent / "data" / "dev_corpus"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_examples(rule):
    failures = check_rule(rule)
    assert not failures, "\n".join(str(f) for f in failures)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_is_documented(rule):
    assert rule.references and all(ref.startswith(("http://", "https://")) for ref in rule.references)
    assert rule.description.strip(), f"{rule.id} has no description"
    assert rule.examples.no_match, f"{rule.id} has no near-miss example"
    if rule.event.hook:
        assert rule.event.hook in HOOKS
    if rule.event.role == "marker":
        assert rule.event.category is None


def test_pack_is_large_and_ids_unique():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert len(RULES) >= 80


def test_every_rule_file_parses_with_documents():
    files = [p for p in bundled_dir("rules").glob("*.yaml") if not p.name.startswith("_")]
    assert {"gpu_xid.yaml", "nccl.yaml", "pytorch.yaml", "slurm.yaml", "markers.yaml"} <= {p.name for p in files}


# --- Xid catalog -------------------------------------------------------------------------------

REQUIRED_POINTS_AT = {
    13: {"application", "informational"},
    31: {"application", "informational"},
    43: {"application", "informational"},
    68: {"application", "informational"},
    94: {"application", "informational"},
    45: {"follow_on"},
    154: {"follow_on"},
}
REQUIRED_HARDWARE = {
    79: "gpu_fell_off_bus",
    48: "gpu_uncorrectable_ecc",
    95: "gpu_uncorrectable_ecc",
    140: "gpu_uncorrectable_ecc",
    64: "gpu_row_remap_failure",
    74: "gpu_nvlink",
    **{n: "gpu_nvlink" for n in range(144, 151)},
    119: "gpu_firmware",
    120: "gpu_firmware",
}


def test_xid_catalog_entries_are_complete():
    catalog = xid_catalog()
    assert len(catalog) >= 60
    for number, entry in catalog.items():
        assert 8 <= number <= 176  # nverror.h of driver 595 ends at 176
        assert {"name", "description", "action", "points_at"} <= set(entry), number
        assert entry["points_at"] in {"hardware", "application", "follow_on", "informational"}, number
        if entry["points_at"] == "hardware":
            assert entry["category"] in CATEGORIES_BY_DOMAIN["gpu"], number
        elif entry["points_at"] == "application":  # optional: the kind of fault the app met
            assert entry.get("category", "gpu_uncorrectable_ecc") in CATEGORIES_BY_DOMAIN["gpu"], number
        else:
            assert "category" not in entry, number


@pytest.mark.parametrize("xid,allowed", sorted(REQUIRED_POINTS_AT.items()))
def test_xid_not_hardware(xid, allowed):
    assert xid_catalog()[xid]["points_at"] in allowed


@pytest.mark.parametrize("xid,category", sorted(REQUIRED_HARDWARE.items()))
def test_xid_hardware(xid, category):
    entry = xid_catalog()[xid]
    assert entry["points_at"] == "hardware"
    assert entry["category"] == category


def test_xid_catalog_cites_sources():
    text = (bundled_dir("rules") / "_xid_catalog.yaml").read_text(encoding="utf-8")
    assert "[S1]" in text and "analyzing-xid-catalog" in text and "[S2]" in text
    assert "xids" in yaml.safe_load(text)


# --- hooks through the scanner -----------------------------------------------------------------

def _hits(text: str, kind: str = "kernel"):
    return Scanner(PROPER, engine="re").match_text(text, kind)


def _one(text: str, rule_id: str, kind: str = "kernel"):
    hits = [h for h in _hits(text, kind) if h.rule.id == rule_id]
    assert len(hits) == 1, [h.rule.id for h in _hits(text, kind)]
    return hits[0]


@pytest.mark.parametrize("message,category", [
    ("check_nvsmi_healthmon:  nvidia-smi:  The GPU has fallen off the bus or has otherwise become inaccessible. FaultCode: NHC2010",
     "gpu_fell_off_bus"),
    ("check_nvlink_status: GPU 3 has nvlinks inactive: 2,5. FaultCode: NHC2016", "gpu_nvlink"),
    ("check_gpu_bw: P2P test on GPU 1 to GPU 0 failed. Bandwidth 256.63 is less than 335. FaultCode: NHC2020", "gpu_nvlink"),
    ("check_gpu_bw: H2D test on GPU 2 failed. Bandwidth 11.2 is less than 20. FaultCode: NHC2020", "pcie_error"),
    ("check_ecc: GPU id 3: Row remap pending. FaultCode: NHC2007", "gpu_row_remap_failure"),
    ("check_ecc: GPU id 3: High DRAM Uncorrectable/correctable ECC error count detected, (100,200). FaultCode: NHC2019",
     "gpu_uncorrectable_ecc"),
    ("check_nccl_allreduce: NCCL allreduce, BUS BW (expected >=450 GB/s, but measured 230.4 GB/s). FaultCode: NHC2010",
     "fabric_other"),
    ("check_xid_errors: GPU 0 reported Xid 94", "gpu_hardware_other"),
    ("check_hw_ib:  No IB port mlx5_0:1 is ACTIVE (LinkUp 400 Gb/sec).", "link_down"),
    # the host's DIMMs (`ECC` there is EDAC's, not a GPU's), the kernel's slab, the check's own set-up
    ("check_hw_edac:  ECC errors detected - 31 corrected memory errors detected (limit of 9).", "host_hardware_other"),
    ("check_hw_slab_unreclaimable:  Slab unreclaimable is too large (13424716 kB > 5242880 kB).", "kernel_fault"),
    ("check_all_reduce_dependencies: HPCX_DIR is not set. Ensure HPCX is installed and sourced correctly.", "nccl_usage"),
])
def test_a_failed_health_check_is_read_by_what_it_names(message, category):
    hit = _one(f"ERROR:  nhc:  Health check failed:  {message}", "cmd.nhc_check_failed", "app")
    assert hit.category == category


def test_xid_hook_roles():
    hit = _one("NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "gpu.xid")
    assert (hit.role, hit.category, hit.strength) == ("cause", "gpu_fell_off_bus", 3)
    hit = _one("NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=python, Graphics SM Warp Exception", "gpu.xid")
    # An application fault seen by the GPU: a weak application cause that may name no culprit.
    assert (hit.role, hit.domain, hit.category, hit.strength) == ("cause", "application", "cuda_error", 1)
    assert hit.notes["no_culprit"] is True
    hit = _one("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No", "gpu.xid")
    assert (hit.domain, hit.category, hit.notes["no_culprit"]) == ("gpu", "gpu_uncorrectable_ecc", True)
    hit = _one("NVRM: Xid (PCI:0000:cb:00): 45, pid=1, name=python, Ch 00000010", "gpu.xid")
    assert hit.role == "symptom"
    hit = _one("NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "gpu.xid")
    assert hit.notes["recovery_action"] == "Node Reboot Required"
    fatal = _one("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)", "gpu.xid")
    assert (fatal.role, fatal.category, fatal.notes["nvlink_link"]) == ("cause", "gpu_nvlink", 8)
    nonfatal = _one("NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 03 (0x00000001 0x00000000)", "gpu.xid")
    assert (nonfatal.role, nonfatal.strength, nonfatal.notes["nvlink_fatal"]) == ("cause", 1, False)


def test_sxid_hook():
    fatal = _one("nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, Link 30 LTSSM Fault Up", "gpu.sxid")
    assert (fatal.role, fatal.category) == ("cause", "gpu_nvlink")
    minor = _one("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)", "gpu.sxid")
    assert (minor.role, minor.category) == ("context", None)


def test_ib_status_hook():
    line = "h1:1:2 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<47534> with error {}, opcode 48, len 32764, vendor err 244"
    retry = _one(line.format(12), "nccl.ib_completion_error", "app")
    assert retry.notes["ib_status_name"] == "IBV_WC_RETRY_EXC_ERR" and retry.role == "cause"
    flush = _one(line.format(5), "nccl.ib_completion_error", "app")
    assert flush.notes["ib_status_name"] == "IBV_WC_WR_FLUSH_ERR" and flush.role == "symptom"
    assert len(ibv_wc_status()) == 24 and ibv_wc_status()[12] == "IBV_WC_RETRY_EXC_ERR"
    # NCCL 2.28+ prints the name with the number; the hook reads either.
    named = _one("gpu-c:1:2 [0] transport/net_ib/p2p.cc:500 NCCL WARN NET/IB: Got completion from peer 10.0.0.8<41000> with status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_RECV(128) reqSize=0 vendor_err=81 req_type=Recv hca mlx5_0", "nccl.ib_completion_error", "app")
    assert (named.notes["ib_status_name"], named.domain, named.category) == ("IBV_WC_LOC_PROT_ERR", "network", "transport_error")


def test_nccl_busid_hook():
    hit = _one("h:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3b000 commId 0x2 - Init COMPLETE", "marker.nccl_rank", "app")
    assert hit.notes["pci"] == "0000:3b:00"
    hit = _one("h:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 3 busId 13b000 - Init COMPLETE", "marker.nccl_rank", "app")
    assert hit.notes["pci"] == "0001:3b:00"


def test_a_bare_shell_signal_line_is_read_through_the_signal_table():
    killed = _hits("Killed\n", "app")
    assert [(h.category, h.strength) for h in killed] == [("host_oom", 1)]  # no sender: most often the OOM killer
    assert "OOM killer" in killed[0].notes["inferred"]
    assert [(h.role, h.category) for h in _hits("Segmentation fault (core dumped)\n", "app")] == [("cause", "app_killed_signal")]
    assert [h.role for h in _hits("Aborted (core dumped)\n", "app")] == ["symptom"]  # abort() after a reported failure
    for kind in ("kernel", "syslog"):  # a shell's words, not the kernel's
        assert not _hits("Killed\n", kind)


def test_cuda_oom_beats_generic_exception():
    ids = {h.rule.id for h in _hits("[rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.35 GiB.", "app")}
    assert ids == {"cuda.oom"}


def test_nccl_wrappers_are_not_app_exceptions():
    text = "torch.distributed.DistBackendError: NCCL error in: x.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
    assert {h.rule.id for h in _hits(text, "app")} == {"nccl.system_error"}


# --- loader errors -----------------------------------------------------------------------------

GOOD_RULE = """
id: site.sample
title: sample
sources: [app]
match:
  contains: ['sample error']
  regex: 'sample error (?P<code>\\d+)'
fields: {code: int}
event: {type: sample, domain: application, category: app_exception, role: cause}
references: [https://example.org]
examples:
  match: [{line: 'sample error 3', fields: {code: 3}}]
  no_match: ['nothing']
"""


def _write(tmp_path: Path, text: str, name: str = "site.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_site_rule_loads(tmp_path):
    _write(tmp_path, GOOD_RULE)
    rules = load_rules([tmp_path])
    assert "site.sample" in {r.id for r in rules}


@pytest.mark.parametrize(
    "change,problem",
    [
        (("category: app_exception", "category: gpu_nvlink"), "does not belong to domain"),
        (("regex: 'sample error (?P<code>\\d+)'", "regex: 'sample error (?P<code>\\d+'"), "does not compile"),
        (("fields: {code: int}", "fields: {code: int, missing: int}"), "not named groups"),
        (("role: cause}", "role: culprit}"), "role"),
        (("sources: [app]", "sources: [app, email]"), "unknown source kind"),
        (("role: cause}", "role: cause, reports_on: named_node}"), "needs a group named node, host or ip"),
    ],
)
def test_broken_rule_names_file_rule_and_problem(tmp_path, change, problem):
    old, new = change
    assert old in GOOD_RULE
    path = _write(tmp_path, GOOD_RULE.replace(old, new), "broken.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path])
    message = str(info.value)
    assert str(path) in message
    assert "site.sample" in message
    assert problem in message


def test_unknown_keys_are_rejected(tmp_path):
    path = _write(tmp_path, GOOD_RULE + "severity_override: 3\n", "extra.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path])
    message = str(info.value)
    assert str(path) in message and "site.sample" in message and "severity_override" in message


def test_unknown_nested_key_is_rejected(tmp_path):
    _write(tmp_path, GOOD_RULE.replace("role: cause}", "role: cause, weight: 2}"), "nested.yaml")
    with pytest.raises(RuleError, match="weight"):
        load_rules([tmp_path])


def test_invalid_yaml_names_file(tmp_path):
    path = _write(tmp_path, "id: x.y\ntitle: [unclosed\n", "bad.yaml")
    with pytest.raises(RuleError, match=str(path).replace(".", r"\.")):
        load_rules([tmp_path])


def test_two_rules_without_a_separator_are_refused_not_merged(tmp_path):
    """PyYAML keeps a key's last value: without the check, the second rule silently replaced the first."""
    second = GOOD_RULE.replace("site.sample", "site.other").replace("sample error", "other error")
    path = _write(tmp_path, GOOD_RULE + second, "joined.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path])
    message = str(info.value)
    assert str(path) in message and "key 'id' again" in message and "`---` missing" in message
    _write(tmp_path, GOOD_RULE + "---\n" + second, "joined.yaml")
    assert {"site.sample", "site.other"} <= {r.id for r in load_rules([tmp_path])}


def test_a_relation_file_with_a_key_twice_is_refused(tmp_path):
    from slurm_attrib.ruleset.relations import load_relations

    folder = tmp_path / "relations"
    folder.mkdir()
    (folder / "site.yaml").write_text("id: sup.a\nkind: suppress\nid: sup.b\n", encoding="utf-8")
    with pytest.raises(RuleError, match="key 'id' again"):
        load_relations([tmp_path])



def test_a_validated_pack_is_cached_and_any_change_validates_again(tmp_path, monkeypatch):
    cache, site = tmp_path / "cache", tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(cache))
    _write(site, GOOD_RULE)
    first = load_rules([site])
    (pickled,) = cache.glob("rules-*.pickle")
    assert not pickled.stat().st_mode & 0o022
    assert load_rules([site]) == first  # read from the cache
    _write(site, GOOD_RULE.replace("regex: 'sample error (?P<code>\\d+)'", "regex: 'sample error (?P<code>\\d+'"))
    with pytest.raises(RuleError, match="does not compile"):
        load_rules([site])  # the changed file is validated, not served from the cache


def test_packs_used_in_turn_are_each_served_from_the_cache(tmp_path, monkeypatch):
    """With and without a site folder (or two installs) in turn: neither validates again."""
    from slurm_attrib.ruleset import loader

    cache, site = tmp_path / "cache", tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(cache))
    _write(site, GOOD_RULE)
    with_site, bundled = load_rules([site]), load_rules([])
    monkeypatch.setattr(loader, "_validate", lambda files: pytest.fail("validated again"))
    assert (load_rules([site]), load_rules([]), load_rules([site])) == (with_site, bundled, with_site)
    assert len(list(cache.glob("rules-*.pickle"))) == 2


def test_a_cache_folder_that_cannot_be_made_only_costs_time(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    assert [r.id for r in load_rules()] == [r.id for r in RULES]


@pytest.mark.parametrize("name", ["Rule", "Match", "EventSpec", "Examples", "MatchExample"])
def test_the_cached_rule_classes_hold_every_field_the_schema_validates(name):
    """spec's plain classes (what the cache keeps) and schema's pydantic models (what validates a
    file) name the same fields with the same defaults: a field added to one only fails here."""
    from dataclasses import MISSING, fields

    from slurm_attrib.ruleset import schema, spec

    model = getattr(schema, {"EventSpec": "EventModel"}.get(name, f"{name}Model"))
    plain = {f.name: f for f in fields(getattr(spec, name))}
    assert list(plain) == list(model.model_fields)
    for field_name, info in model.model_fields.items():
        default = plain[field_name].default_factory() if plain[field_name].default_factory is not MISSING else plain[field_name].default
        expected = MISSING if info.is_required() else info.get_default(call_default_factory=True)
        assert (field_name, default) == (field_name, expected)


def test_a_cache_file_others_can_write_is_ignored(tmp_path, monkeypatch):
    cache, site = tmp_path / "cache", tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(cache))
    _write(site, GOOD_RULE)
    load_rules([site])
    (pickled,) = cache.glob("rules-*.pickle")
    pickled.write_bytes(b"not a pickle")
    pickled.chmod(0o666)
    assert "site.sample" in {r.id for r in load_rules([site])}


def test_code_tables_are_cached_per_version_of_their_file(tmp_path, monkeypatch):
    from slurm_attrib.ruleset import hooks

    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(tmp_path))
    hooks.code_tables.cache_clear()
    try:
        built = hooks.code_tables()
        (pickled,) = tmp_path.glob("codes-*.pickle")
        pickled.write_bytes(pickle.dumps({"signal": "from the cache"}))
        hooks.code_tables.cache_clear()
        assert hooks.code_tables() == {"signal": "from the cache"}  # served from the file
        monkeypatch.setenv("SATTRIB_CACHE_DIR", "")
        hooks.code_tables.cache_clear()
        assert hooks.code_tables() == built == hooks._build_code_tables(bundled_dir("rules") / "_codes.yaml")
    finally:
        hooks.code_tables.cache_clear()

# --- whole pack over the dev corpus ------------------------------------------------------------

def _corpus_files():
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "expected.yaml")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="dev corpus not present")
@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pack_scans_corpus_file(path):
    scanner = Scanner(RULES, engine="re")
    data = path.read_bytes()
    for kind in SOURCE_KINDS:
        for hit in scanner.scan(data, kind):
            assert hit.lineno >= 1
            assert hit.role in ("cause", "symptom", "context", "marker")
            if hit.role == "cause":
                assert hit.category is not None


@pytest.mark.skipif(not CORPUS.is_dir(), reason="dev corpus not present")
def test_corpus_expected_categories_have_a_matching_cause():
    """Each dev case whose expected category is a failure has at least one rule hit of that category."""
    scanner = Scanner(PROPER, engine="re")
    for case in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        expected = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8"))
        if expected["domain"] in ("none", "unknown"):
            continue
        categories = set()
        for path in case.iterdir():
            if path.name == "expected.yaml":
                continue
            for kind in ("kernel", "app", "nvidia_smi"):
                categories |= {h.category for h in scanner.scan(path.read_bytes(), kind)}
        assert expected["category"] in categories, case.name


def test_exit_signal_hook_tells_faults_from_teardown():
    segv = _one("traceback : Signal 11 (SIGSEGV) received by PID 4432", "elastic.signal_received", kind="app")
    assert (segv.role, segv.category, segv.strength) == ("cause", "app_killed_signal", 2)
    abort = _one(
        "E1026 03:51:40.1 2521679 api.py:869] failed (exitcode: -6) local_rank: 6 (pid: 1246013) of binary: /usr/bin/python3",
        "elastic.worker_failed",
        kind="app",
    )
    assert abort.role == "symptom" and abort.notes["signal"] == "SIGABRT"
    killed = _one("['python', 'train.py'] exits with return code = -9", "deepspeed.launcher_exit", kind="app")
    assert (killed.role, killed.strength) == ("cause", 1)


# --- code tables (rules/_codes.yaml) ----------------------------------------------------------

def _decision(family, value):
    entry = decode_code(family, value)
    assert entry is not None, (family, value)
    return entry["name"], entry["domain"], entry["category"], entry["role"], entry["strength"]


def test_code_tables_are_complete_and_valid():
    tables = code_tables()
    assert {"ibv_wc_status", "cuda_runtime", "cuda_driver", "cublas", "cudnn", "nccl_result", "signal"} <= set(tables)
    for family, table in tables.items():
        assert table["source"].startswith("https://") and table["versions"], family
        for number, entry in table["by_number"].items():
            assert entry["name"] and entry["why"], (family, number)
            if family == "slurm_job_state":
                assert entry["dated"] in ("job_end", "none"), number
            assert entry["role"] in ("cause", "symptom", "context"), (family, number)
            if entry["domain"] != "none":
                assert entry["domain"] in CATEGORIES_BY_DOMAIN, (family, number)
            if entry["category"] is not None:
                assert entry["category"] in CATEGORIES_BY_DOMAIN[entry["domain"]], (family, number)
            if entry["role"] == "cause":
                assert entry["category"] is not None, (family, number)
            if entry.get("other_reading") is not None:
                assert entry["other_reading"] in DOMAIN_OF_CATEGORY and entry["other_reading"] != entry["category"], (family, number)
    assert len(tables["cuda_runtime"]["by_number"]) >= 130 and len(tables["cuda_driver"]["by_number"]) >= 100


@pytest.mark.parametrize(
    "family,value,expected",
    [
        # ibv_wc_status by number, name and ibv_wc_status_str message
        ("ibv_wc_status", 12, ("IBV_WC_RETRY_EXC_ERR", "network", "transport_error", "cause", 2)),
        ("ibv_wc_status", "IBV_WC_RETRY_EXC_ERR", ("IBV_WC_RETRY_EXC_ERR", "network", "transport_error", "cause", 2)),
        ("ibv_wc_status", "transport retry counter exceeded", ("IBV_WC_RETRY_EXC_ERR", "network", "transport_error", "cause", 2)),
        ("ibv_wc_status", "13", ("IBV_WC_RNR_RETRY_EXC_ERR", "network", "transport_error", "cause", 2)),
        ("ibv_wc_status", 5, ("IBV_WC_WR_FLUSH_ERR", "network", "transport_error", "symptom", 1)),
        ("ibv_wc_status", "local protection error", ("IBV_WC_LOC_PROT_ERR", "network", "transport_error", "cause", 2)),
        ("ibv_wc_status", 10, ("IBV_WC_REM_ACCESS_ERR", "network", "transport_error", "cause", 1)),
        # CUDA runtime / driver: hardware codes point at the GPU, kernel faults at the application
        (CUDA_FAMILIES, 214, ("cudaErrorECCUncorrectable", "gpu", "gpu_uncorrectable_ecc", "cause", 2)),
        (CUDA_FAMILIES, "CUDA_ERROR_ECC_UNCORRECTABLE", ("CUDA_ERROR_ECC_UNCORRECTABLE", "gpu", "gpu_uncorrectable_ecc", "cause", 2)),
        (CUDA_FAMILIES, "uncorrectable ECC error encountered", ("cudaErrorECCUncorrectable", "gpu", "gpu_uncorrectable_ecc", "cause", 2)),
        (CUDA_FAMILIES, "unknown error", ("cudaErrorUnknown", "gpu", "gpu_hardware_other", "cause", 1)),
        (CUDA_FAMILIES, 802, ("cudaErrorSystemNotReady", "gpu", "gpu_nvlink", "cause", 2)),
        (CUDA_FAMILIES, "all CUDA-capable devices are busy or unavailable", ("cudaErrorDevicesUnavailable", "application", "cuda_error", "cause", 1)),
        (CUDA_FAMILIES, "cudaErrorNvlinkUncorrectable", ("cudaErrorNvlinkUncorrectable", "gpu", "gpu_nvlink", "cause", 2)),
        (CUDA_FAMILIES, "cudaErrorMemoryAllocation", ("cudaErrorMemoryAllocation", "application", "gpu_oom", "cause", 3)),
        (CUDA_FAMILIES, "an illegal instruction was encountered", ("cudaErrorIllegalInstruction", "application", "cuda_error", "cause", 2)),
        (CUDA_FAMILIES, "hardware stack error", ("cudaErrorHardwareStackError", "application", "cuda_error", "cause", 2)),
        (CUDA_FAMILIES, 719, ("cudaErrorLaunchFailure", "application", "cuda_error", "cause", 1)),
        (CUDA_FAMILIES, "unspecified launch failure in prior launch", ("cudaErrorPriorLaunchFailure", "application", "cuda_error", "symptom", 1)),
        (CUDA_FAMILIES, "CUDA driver version is insufficient for CUDA runtime version", ("cudaErrorInsufficientDriver", "application", "cuda_error", "cause", 2)),
        (CUDA_FAMILIES, "CUDA_ERROR_LAUNCH_FAILED", ("CUDA_ERROR_LAUNCH_FAILED", "application", "cuda_error", "cause", 1)),
        # cuBLAS / cuDNN
        (("cublas", "cudnn"), "CUBLAS_STATUS_ALLOC_FAILED", ("CUBLAS_STATUS_ALLOC_FAILED", "application", "gpu_oom", "cause", 2)),
        (("cublas", "cudnn"), 13, ("CUBLAS_STATUS_EXECUTION_FAILED", "application", "cuda_error", "cause", 2)),
        (("cublas", "cudnn"), "CUDNN_STATUS_ALLOC_FAILED", ("CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", "application", "gpu_oom", "cause", 2)),
        ("cudnn", 4000, ("CUDNN_STATUS_INTERNAL_ERROR", "application", "cuda_error", "cause", 1)),
        # NCCL results: number, name, ncclGetErrorString old and new, PyTorch's detail string
        ("nccl_result", 2, ("ncclSystemError", "network", "fabric_other", "symptom", 1)),
        ("nccl_result", "ncclUnhandledCudaError", ("ncclUnhandledCudaError", "application", "cuda_error", "symptom", 1)),
        ("nccl_result", "unhandled cuda error", ("ncclUnhandledCudaError", "application", "cuda_error", "symptom", 1)),
        ("nccl_result", "invalid usage (run with NCCL_DEBUG=WARN for details)", ("ncclInvalidUsage", "application", "nccl_usage", "cause", 2)),
        ("nccl_result", "remote process exited or there was a network error", ("ncclRemoteError", "network", "transport_error", "symptom", 1)),
        # signals
        ("signal", 11, ("SIGSEGV", "application", "app_killed_signal", "cause", 2)),
        ("signal", "SIGTERM", ("SIGTERM", "application", None, "symptom", 1)),
        ("signal", "Bus error", ("SIGBUS", "application", "app_killed_signal", "cause", 2)),
        ("signal", 9, ("SIGKILL", "application", "host_oom", "cause", 1)),  # no sender in the evidence: the OOM killer
        # Slurm job states (the job's record): by name as sacct prints it, compact, enum number
        ("slurm_job_state", "NODE_FAIL", ("NODE_FAIL", "host", "node_failure", "cause", 3)),
        ("slurm_job_state", "OOM", ("OUT_OF_MEMORY", "application", "host_oom", "cause", 3)),
        ("slurm_job_state", 10, ("DEADLINE", "scheduler", "time_limit", "cause", 3)),
        ("slurm_job_state", "FAILED", ("FAILED", "none", None, "context", 1)),  # the lines say why
    ],
)
def test_code_decisions(family, value, expected):
    assert _decision(family, value) == expected


@pytest.mark.parametrize("value", [None, "", "   ", 3.5, True, "no such code", -1, 123456, ["x"], {"a": 1}])
def test_decode_code_is_safe_on_any_input(value):
    for family in (CUDA_FAMILIES, "nccl_result", "ibv_wc_status", ("cublas", "cudnn"), "signal"):
        assert decode_code(family, value) is None


def test_signal_tables_and_exit_codes():
    assert fault_signals() == {4: "SIGILL", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}
    assert {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 15: "SIGTERM", 10: "SIGUSR1", 12: "SIGUSR2", 24: "SIGXCPU"}.items() <= teardown_signals().items()
    assert decode_signal(exitcode=-11) == (11, "negative exit code")
    assert decode_signal(exitcode=137) == (9, "shell status 128+N")
    assert decode_signal(exitcode=1) is None and decode_signal(exitcode=255) is None
    assert decode_signal("SIGBUS") == (7, "signal")


def test_cuda_code_hook_through_rules():
    unknown = _one("RuntimeError: CUDA error: unknown error", "cuda.error_generic", "app")
    assert (unknown.domain, unknown.category, unknown.role, unknown.strength) == ("gpu", "gpu_hardware_other", "cause", 1)
    assert unknown.notes["cuda_error_name"] == "cudaErrorUnknown"
    launch = _one("[rank0]: RuntimeError: CUDA error: unspecified launch failure", "cuda.error_generic", "app")
    assert (launch.domain, launch.category, launch.strength) == ("application", "cuda_error", 1)
    teardown = _one("RuntimeError: CUDA error: driver shutting down", "cuda.error_generic", "app")
    assert teardown.role == "symptom"
    ecc = _one("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered", "cuda.error_name", "app")
    assert (ecc.domain, ecc.category) == ("gpu", "gpu_uncorrectable_ecc")
    fm = _one("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized", "cuda.device_count_error", "app")
    assert (fm.domain, fm.category, fm.notes["cuda_error_number"]) == ("gpu", "gpu_nvlink", 802)


def test_lib_status_hook_through_rules():
    alloc = _one("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda.cublas_failure", "app")
    assert (alloc.domain, alloc.category) == ("application", "gpu_oom")
    internal = _one("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "cuda.cudnn_failure", "app")
    assert (internal.category, internal.strength) == ("cuda_error", 1)


def test_decoding_leaves_unknown_values_alone():
    from slurm_attrib.ruleset.hooks import decode_fields
    from slurm_attrib.ruleset.spec import Decode

    hit = _one("[rank0]: RuntimeError: CUDA error: unspecified launch failure", "cuda.error_generic", "app")
    decodes = [Decode(list(CUDA_FAMILIES), ["cuda_error", "msg"], "cuda_error"), Decode(["cublas", "cudnn"], ["msg"], "lib_status"),
               Decode(["nccl_result"], ["msg"], "nccl_result")]
    for value in (None, "", "something no table knows", 3.5):
        hit.fields = {"cuda_error": value, "msg": value}
        before = (hit.domain, hit.category, hit.role, hit.strength)
        for decode in decodes:
            assert (decode_fields(hit, decode).domain, hit.category, hit.role, hit.strength) == before


def test_a_rule_decodes_only_fields_it_names_from_families_that_exist():
    from pydantic import ValidationError

    from slurm_attrib.ruleset.schema import RuleModel

    rule = {"id": "x.y", "title": "t", "references": ["https://example.org"], "match": {"contains": ["Error:"], "regex": "Error: (?P<code>\\w+)"},
            "event": {"type": "t", "domain": "application", "category": "cuda_error", "role": "cause",
                      "decode": {"families": ["cuda_runtime"], "fields": ["code"], "note": "cuda_error"}},
            "examples": {"match": [{"line": "Error: cudaErrorMemoryAllocation"}], "no_match": ["nothing"]}}
    assert RuleModel.model_validate(rule).event.decode.families == ["cuda_runtime"]
    for wrong in ({"families": ["no_such_family"], "fields": ["code"], "note": "x"},
                  {"families": ["cuda_runtime"], "fields": ["not_a_group"], "note": "x"}):
        with pytest.raises(ValidationError):
            RuleModel.model_validate({**rule, "event": {**rule["event"], "decode": wrong}})


def test_sxid_without_severity_word():
    halted = _one("nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 26006, SOE HALTED", "gpu.sxid")
    assert (halted.role, halted.category) == ("cause", "gpu_nvlink")
    warm = _one("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 10001, NVSWITCH Temperature 96C | TSENSE WARN Threshold 95C", "gpu.sxid")
    assert warm.role == "context"


def test_xid_mig_compute_instance_keeps_pci():
    hit = _one("NVRM: Xid (PCI:0000:4e:00 GPU-I:02 GPU-CI:01): 48, pid=1, name=python, An uncorrectable double bit error", "gpu.xid")
    assert hit.fields["pci"] == "0000:4e:00" and hit.category == "gpu_uncorrectable_ecc"


@pytest.mark.parametrize(
    "line, domain, category, role",
    [
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "application", "host_oom", "cause"),
        ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "scheduler", "time_limit", "cause"),
        ("TERM_OWNER: job killed by owner.", "scheduler", "cancelled", "cause"),
        ("TERM_PREEMPT: job killed after preemption.", "scheduler", "preempted", "cause"),
        ("TERM_CWD_NOTEXIST: current working directory is not accessible or does not exist on the execution host.",
         "storage", "filesystem_error", "cause"),
        ("TERM_ZOMBIE: job exited while LSF is not available.", "scheduler", None, "context"),
        ("TERM_NOT_IN_THE_TABLE: job killed for a new reason.", "scheduler", None, "context"),
    ],
)
def test_lsf_termination_reasons_decide_the_domain_through_the_code_table(line, domain, category, role):
    (hit,) = [h for h in Scanner(RULES).match_text(line, "app") if h.rule.id == "term.lsf_termination"]
    assert (hit.domain, hit.category, hit.role) == (domain, category, role)


def test_a_warm_cache_reads_no_yaml(tmp_path):
    """With the rule pack, code tables and Xid catalog cached, an analysis imports no YAML parser
    and builds no pydantic model of a rule (the schema that validates rule files)."""
    import os
    import subprocess
    import sys

    sample = Path(__file__).resolve().parents[1] / "slurm_attrib" / "samples" / "demo"
    program = (
        "import sys; from slurm_attrib import cli\n"
        f"sys.argv = ['sattrib', 'analyze', {str(sample)!r}, '--output', {str(tmp_path / 'out.json')!r}]\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "print('slurm_attrib.ruleset.schema' in sys.modules, 'yaml' in sys.modules)\n"
    )
    env = {**os.environ, "SATTRIB_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]
    assert [run.stdout.split()[-2:] for run in runs] == [["True", "True"], ["False", "False"]]
    assert (tmp_path / "out.json").read_text().count('"gpu_fell_off_bus"') >= 1


# Lines every healthy node logs all day.  The epilog's pre-filter reads every literal case-blind
# (`grep -i` as soon as one rule is ignore_case): a literal found in one of these would make it keep
# (and ship) most of the syslog and miss its time budget.
ROUTINE_SYSTEM_LINES = [
    "2024-04-09T01:21:39,000000+00:00 bench01 systemd[1]: session-12345.scope: Succeeded.",
    "Apr  9 01:21:39 gpu01 systemd[1]: Started Session 4242 of User alice.",
    "Apr  9 01:21:39 gpu01 systemd-logind[1234]: New session 4242 of user alice.",
    "Apr  9 01:21:39 gpu01 systemd-logind[1234]: Removed session 4242.",
    "Apr  9 01:21:39 gpu01 CRON[5678]: (root) CMD (/usr/lib/sysstat/debian-sa1 1 1)",
    "Apr  9 01:21:39 gpu01 sshd[999]: Accepted publickey for alice from 10.0.0.5 port 51234 ssh2: RSA SHA256:abc",
    "Apr  9 01:21:39 gpu01 sshd[999]: pam_unix(sshd:session): session opened for user alice(uid=1000) by (uid=0)",
    "Apr  9 01:21:39 gpu01 slurmd[2222]: launch task StepId=77.0 request from UID:1000 GID:1000 HOST:10.0.0.1 PORT:40000",
    "Apr  9 01:21:39 gpu01 chronyd[777]: Selected source 10.0.0.2 (ntp.cluster)",
    "Apr  9 01:21:39 gpu01 kernel: [12345.678901] eth0: rx queue 3 stats 0.123456",
]

# Routine lines of every torchrun/NCCL job: a rule literal found in one makes every copy of it a
# candidate line that the rule's regex must then reject (a 200 MB job's scan went 3x slower).
ROUTINE_JOB_LINES = [
    "W1204 10:11:12.123000 4242 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for "
    "each process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
    "for optimal performance in your application as needed.",
    "gpu01:4242:4242 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    "gpu01:4242:4242 [0] NCCL INFO Using network IB",
    "gpu01:4242:4280 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "Epoch 3/10:  45%|####5     | 562/1250 [00:59<01:12,  9.51it/s, loss=2.31]",
]


def test_no_rule_literal_occurs_in_routine_system_lines():
    from slurm_attrib.capture.literals import load_literals

    literals = load_literals()
    assert not literals.errors
    for line in ROUTINE_SYSTEM_LINES:
        found = [lit.decode() for lit in literals.all_literals() if lit.lower() in line.lower().encode()]
        assert not found, (line, found)


def test_no_first_pass_literal_occurs_in_routine_job_lines():
    # a rule read at a file's ends is never searched by its literals (tests/test_progress.py)
    literals = {lit for rule in RULES if not rule.event.fallback and not rule.event.ends for lit in rule.match.contains}
    for line in ROUTINE_JOB_LINES:
        found = sorted(lit for lit in literals if lit.lower() in line.lower())
        assert not found, (line, found)


def test_a_value_built_by_code_loaded_before_an_upgrade_is_never_read_after_it(tmp_path, monkeypatch):
    """An upgrade lands while a process that imported the older code still runs (a service): what
    that process builds is keyed by the code it loaded (code_digest at import), so a process of the
    new code never unpickles the older shape ('When' object has no attribute ...)."""
    from slurm_attrib.ruleset.cache import cached, code_digest

    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(tmp_path / "cache"))
    source, code = tmp_path / "pack.yaml", tmp_path / "policies.py"
    source.write_text("rows: []\n")
    code.write_text("class When: a = None\n")
    loaded_before = code_digest([code])  # the running process imported this
    code.write_text("class When: a = None; quality = None\n")  # the upgrade
    assert cached("policy-t", [source], lambda: "older shape", lambda value: True, code=loaded_before) == "older shape"
    loaded_after = code_digest([code])  # a process started after the upgrade
    assert cached("policy-t", [source], lambda: "newer shape", lambda value: True, code=loaded_after) == "newer shape"
    assert cached("policy-t", [source], lambda: "built again", lambda value: True, code=loaded_after) == "newer shape"


@pytest.mark.parametrize("section, category", [
    ("PCIe error", "pcie_error"), ("memory error", "host_hardware_other"), (None, "host_hardware_other"),
])
def test_a_ghes_record_is_read_by_its_section(section, category):
    """An APEI/GHES fatal record's first `section_type:` (cper_section table) decides the category."""
    record = "{1}[Hardware Error]: event severity: fatal\n{1}[Hardware Error]:  Error 0, type: fatal\n"
    if section:
        record += f"{{1}}[Hardware Error]:   section_type: {section}\n"
    hit = _one(record, "host.ghes_uncorrected")
    assert (hit.domain, hit.category, hit.role) == ("host", category, "cause")
