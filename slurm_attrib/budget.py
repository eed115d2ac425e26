"""A time and memory budget for one analysis (the controller's worker, `sattrib batch`).

The analysis runs in a forked child whose address space is limited (RLIMIT_AS, per process: the
scan workers a large job forks inherit the limit) and which is killed, with its process group,
when its wall-clock time is up.  The child reports what it read (the job and the coverage)
as soon as the evidence is loaded, then its result; when it does not finish, the caller still
gets what was read and why it stopped, and stores an incomplete diagnosis saying so.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_LENGTH = struct.Struct("!Q")


@dataclass(frozen=True)
class Budget:
    seconds: float = 0.0  # wall-clock time; 0: no limit
    memory: int = 0  # bytes of address space; 0: no limit


def budget_of(config) -> Budget:
    return Budget(float(config.analysis_max_seconds), int(config.analysis_max_bytes))


@dataclass
class Run:
    result: Any = None  # what the work returned, when it finished
    partial: Any = None  # the last value it passed to report()
    stopped: str = ""  # why it did not finish (the budget it exceeded, how the child ended)


def run_within(budget: Budget, work: Callable[..., Any], *args: Any) -> Run:
    """work(report, *args) in a child process within the budget.  An exception the work raises
    is raised here again; running out of budget is no exception (Run.stopped says why)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(budget, write_end, work, args)
    os.close(write_end)
    _own_group(pid)
    run = Run()
    try:
        outcome = _collect(read_end, pid, budget, run)
    except BaseException:  # an interrupted caller (Ctrl-C): the child, in its own group, goes too
        _stop(pid)
        raise
    finally:
        os.close(read_end)
    if outcome is not None and outcome[0] == "raised":
        raise outcome[1]
    if outcome is not None and outcome[0] == "done":
        run.result = outcome[1]
    return run


def _child(budget: Budget, write_end: int, work: Callable[..., Any], args: tuple) -> None:
    status = 0
    try:
        _own_group(0)
        if budget.memory > 0:
            resource.setrlimit(resource.RLIMIT_AS, (budget.memory, budget.memory))
        with os.fdopen(write_end, "wb") as out:
            try:
                outcome = ("done", work(lambda value: _send(out, ("partial", value)), *args))
            except MemoryError:
                outcome = ("memory", None)
            except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
                outcome = ("raised", _picklable(error))
            _send(out, outcome)
    except BaseException:  # noqa: BLE001 - the parent sees the pipe closed without a result
        status = 1
    finally:
        os._exit(status)


def _own_group(pid: int) -> None:
    """The child leads its own process group (set on both sides of the fork, whichever runs
    first), so that a stop also ends the scan workers it forked."""
    try:
        os.setpgid(pid, 0)
    except OSError:  # the child has already done it, or has already exited
        pass


def _stop(pid: int) -> None:
    """Kill the child with the scan workers it forked, and reap it."""
    try:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):  # already reaped
        pass


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - an exception that does not pickle is passed by its text
        return RuntimeError(f"{type(error).__name__}: {error}")


def _send(out, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LENGTH.pack(len(data)) + data)
    out.flush()


def _collect(read_end: int, pid: int, budget: Budget, run: Run) -> tuple | None:
    """Read the child's messages until it closes the pipe or the time is up; the last one, or
    None when it ended without a result (run.stopped then says how)."""
    deadline = time.monotonic() + budget.seconds if budget.seconds > 0 else None
    buffer = bytearray()
    outcome = None
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and (left <= 0 or not select.select([read_end], [], [], left)[0]):
            _stop(pid)
            run.stopped = f"analysis stopped after {budget.seconds:g} s, its time budget (analysis_max_seconds)"
            return None
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= _LENGTH.size and len(buffer) >= _LENGTH.size + _LENGTH.unpack_from(buffer)[0]:
            size = _LENGTH.unpack_from(buffer)[0]
            message = pickle.loads(bytes(buffer[_LENGTH.size:_LENGTH.size + size]))
            del buffer[:_LENGTH.size + size]
            if message[0] == "partial":
                run.partial = message[1]
            else:
                outcome = message
    _, status = os.waitpid(pid, 0)
    if outcome is not None and outcome[0] == "memory":
        run.stopped = f"analysis stopped over its memory budget of {budget.memory} bytes (analysis_max_bytes)"
        return None
    if outcome is None:
        how = f"signal {signal.Signals(-os.waitstatus_to_exitcode(status)).name}" if os.WIFSIGNALED(status) else (
            f"exit status {os.waitstatus_to_exitcode(status)}")
        memory = f" (memory budget {budget.memory} bytes)" if budget.memory > 0 else ""
        run.stopped = f"analysis stopped: its process ended by {how} without a result{memory}"
    return outcome


def incomplete_diagnosis(job, coverage: list, stopped: str):
    """The diagnosis of an analysis that did not finish: what was read, and that nothing is
    concluded (domain unknown, quality insufficient, no drain)."""
    from slurm_attrib.engine.assemble import outcome
    from slurm_attrib.ingest.types import CoverageEntry, JobContext
    from slurm_attrib.model import CoverageItem, Diagnosis

    entries = [*coverage, CoverageEntry(None, "analysis", None, "truncated", stopped)]
    read = sum(1 for c in coverage if c.status in ("ok", "truncated"))
    return Diagnosis(
        domain="unknown", category="no_evidence", culprit_nodes=[], quality="insufficient", drain=[], evidence=[],
        summary=f"The analysis is incomplete ({stopped}; {read} sources read): no conclusion is drawn.",
        outcome=outcome(job if job is not None else JobContext()),
        coverage=[CoverageItem(**vars(c)) for c in entries],
        notes=[f"incomplete: {stopped}"],
    )
