"""The cyclic collector is paused around an analysis and restored after it, whatever happens."""

import gc

import pytest

from slurm_attrib.collection import no_cycle_collection
from slurm_attrib.engine import pipeline


@pytest.fixture
def collector_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled_before", [True, False])
def test_paused_inside_and_restored_after(collector_state, enabled_before):
    (gc.enable if enabled_before else gc.disable)()
    with no_cycle_collection():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled_before


def test_restored_when_the_work_fails(collector_state):
    gc.enable()
    with pytest.raises(RuntimeError), no_cycle_collection():
        raise RuntimeError("the work failed")
    assert gc.isenabled()


def test_an_analysis_runs_without_collection_passes_and_leaves_the_collector_on(collector_state, tmp_path, monkeypatch):
    gc.enable()
    seen = []
    judge = pipeline.judge

    def judge_and_look(*args, **kwargs):
        seen.append(gc.isenabled())
        return judge(*args, **kwargs)

    monkeypatch.setattr(pipeline, "judge", judge_and_look)
    (tmp_path / "slurm-1.out").write_text("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    pipeline.analyze_path(tmp_path)
    assert seen and not any(seen)
    assert gc.isenabled()
