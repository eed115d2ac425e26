"""Rule matching is linear in the line: lines that made the backtracking engine run for days (the
ReDoS of py.exception) are analysed at once, and a rule that needs backtracking is refused."""

import json
import subprocess

import pytest

from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner
from support import sattrib_argv

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB"
# Shapes that backtrack: py.exception's prefix loop (blanks, `[..]`, `N:`, `(pid=N)`), an exception
# name that never ends in a colon, rank tags without their bracket, long label sets, CUDA errors
# whose message never ends.
ADVERSARIAL = [
    " " * 24 + "ValueError:x",
    " " * 40 + "ValueError:x",
    " " * 10_000 + "ValueError:x",
    "[a]" * 3000 + "ValueError:x",
    "1: " * 3000 + "KeyError:x",
    "(pid=1) " * 1000 + "RuntimeError:x",
    "a." * 4000 + "Error x",
    "[rank1" * 1500 + " CUDA error: " + "a" * 8000,
    "CUDA error: " + " " * 8000 + "x",
    "DCGM_FI_DEV_XID_ERRORS 0 -> 79 (" + "{" * 4000 + 'UUID="' * 500,
    "NCCL WARN Call to " + "ibv" * 2000 + " failed",
    "CA 'mlx5_0'" + "\nC" * 12 + "\n\tPort 1:\n\t\tState: Active",
]

# Shapes for the format sniffers of ingest (prompt lines, sysfs key=value, nvidia-smi, NCCL prefix).
INGEST_SHAPES = [
    "user@gpu01:~$ " + "journalctl " * 1000,
    "0" * 10_000 + "!",
    "a/" * 5000 + "!",
    "\t" * 10_000 + "A",
    " " * 10_000 + "A: ",
    "0" * 10_000 + ":1:2 [0] x",
    "." * 10_000 + "x",
]


def test_redos_lines_are_analysed_and_the_diagnosis_is_made(tmp_path):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "hostile.log").write_text("\n".join(INGEST_SHAPES) + "\n")
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "1", "state": "FAILED", "nodes": ["gpu01"]}))
    (tmp_path / "slurm-1.out").write_text("\n".join([*ADVERSARIAL, OOM]) + "\n")
    result = subprocess.run([*sattrib_argv(), "analyze", str(tmp_path)], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["category"] == "gpu_oom"


@pytest.mark.parametrize(
    "regex",
    [
        r"sample error (?=\d)",  # lookahead
        r"(?<!no )sample error",  # lookbehind
        r"(?P<code>\d+) sample error (?P=code)",  # backreference
        r"(\d+) sample error \1",
    ],
)
@pytest.mark.parametrize("where", ["regex", "unless", "capture", "requires"])
def test_a_rule_the_linear_engine_cannot_run_is_refused_at_load(tmp_path, regex, where):
    from test_rules import GOOD_RULE, _write

    quoted = "'" + regex.replace("'", "''") + "'"
    if where == "regex":
        text = GOOD_RULE.replace("regex: 'sample error (?P<code>\\d+)'", f"regex: {quoted}").replace("fields: {code: int}\n", "")
    else:
        text = GOOD_RULE.replace("  regex: 'sample", f"  {where}: [{quoted}]\n  regex: 'sample")
    path = _write(tmp_path, text, "catastrophic.yaml")
    with pytest.raises(Exception) as info:
        load_rules([tmp_path])
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert str(path) in message and "site.sample" in message and "RE2" in message


def test_capture_and_requires_read_the_whole_matched_line(tmp_path):
    from test_rules import GOOD_RULE, _write

    text = GOOD_RULE.replace(
        "  regex: 'sample", "  capture: ['\\[rank(?P<rank>\\d+)\\]']\n  requires: ['node=(?P<node>\\w+)']\n  regex: 'sample"
    ).replace("fields: {code: int}", "fields: {code: int, rank: int}")
    _write(tmp_path, text.replace("fields: {code: 3}}]", "fields: {code: 3}, kind: app}]").replace("'sample error 3'", "'node=a sample error 3'"))
    rule = next(r for r in load_rules([tmp_path]) if r.id == "site.sample")
    scanner = Scanner([rule], engine="re")
    before, after = scanner.match_text("[rank7] node=a sample error 3", "app"), scanner.match_text("node=b sample error 4 [rank2]", "app")
    assert before[0].fields == {"rank": 7, "node": "a", "code": 3}
    assert after[0].fields == {"rank": 2, "node": "b", "code": 4}
    assert scanner.match_text("[rank7] sample error 3", "app") == []  # requires: no node=
    assert scanner.match_text("sample error 3 node=c", "app")[0].fields == {"node": "c", "code": 3}
