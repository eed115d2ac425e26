"""Every scan engine (Hyperscan, Aho-Corasick, grep -F, Python's re) finds exactly the same hits."""

import functools
import random
from dataclasses import replace

import pytest

from slurm_attrib.ruleset import scanner as scanner_module
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import ENGINES, Scanner, available_engines, normalise_pci
from slurm_attrib.simulate import write_scenario

RULES = load_rules()
FAST_ENGINES = [e for e in ENGINES if e != "re"]


def _signature(hits):
    return [(h.lineno, h.offset, h.rule.id, sorted(h.fields.items()), h.role, h.category, h.text) for h in hits]


def _engine(rules, engine):
    if engine not in available_engines():
        pytest.skip(f"{engine} engine not available here")
    return Scanner(rules, engine=engine)


def _caseless(rules, every=3):
    """Copies of some rules with match.ignore_case set (the pack has few or none of its own)."""
    out = []
    for i, rule in enumerate(rules):
        if i % every == 0 and not rule.match.ignore_case:
            rule = replace(rule, match=replace(rule.match, ignore_case=True))
        out.append(rule)
    return out


def _jumble_case(data: bytes, seed: int) -> bytes:
    rng = random.Random(seed)
    return bytes(b ^ 32 if 97 <= (b | 32) <= 122 and rng.random() < 0.3 else b for b in data)


@pytest.mark.parametrize("engine", FAST_ENGINES)
@pytest.mark.parametrize("scenario", ["gpu_fell_off_bus", "link_down", "filesystem_error", "app_exception"])
def test_every_engine_finds_what_re_finds(tmp_path, scenario, engine):
    write_scenario(scenario, tmp_path, nodes=4, seed=1)
    fast, plain = _engine(RULES, engine), Scanner(RULES, engine="re")
    assert (fast.engine, plain.engine) == (engine, "re")
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file()):
        data = path.read_bytes() + b"\x00\xff binary tail NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x\n"
        for kind in ("kernel", "app"):
            assert _signature(fast.scan(data, kind)) == _signature(plain.scan(data, kind)), path


def _examples_in_noise(jumble: bool) -> tuple[list, bytes]:
    """Every rule's examples shuffled into noise (with some literals made caseless and the text's
    case jumbled, when `jumble`): the rules and the text."""
    rules = _caseless(RULES) if jumble else RULES
    lines = [b"noise line %d step loss 1.5" % i for i in range(50)]
    for rule in rules:
        lines += [example.line.encode() for example in rule.examples.match]
        lines += [text.encode() for text in rule.examples.no_match]
    random.Random(7).shuffle(lines)
    data = b"\n".join(lines) + b"\n"
    return rules, _jumble_case(data, 3) if jumble else data


@functools.lru_cache(maxsize=2)
def _read_by_re(jumble: bool) -> tuple[list[int], dict[str, list]]:
    """What `re`, the reference engine, finds in _examples_in_noise: read once for every engine's
    comparison (it is the slowest engine, and the same reading each time)."""
    rules, data = _examples_in_noise(jumble)
    plain = Scanner(rules, engine="re")
    return ([s for s, _ in plain.candidate_lines(data)],
            {kind: _signature(plain.scan(data, kind)) for kind in ("kernel", "app", "syslog")})


@pytest.mark.parametrize("engine", ENGINES)
def test_all_engines_agree_on_every_rule_example(engine):
    """Each rule's examples, shuffled into noise: every engine finds the same lines as `re`
    (a missed or an extra line fails), also for ASCII case-insensitive literals."""
    for jumble in (False, True):
        rules, data = _examples_in_noise(jumble)
        starts, signatures = _read_by_re(jumble)
        if engine == "re":
            assert starts and signatures["app"] and signatures["kernel"]  # the reference reads the examples
            continue
        fast = _engine(rules, engine)
        assert [s for s, _ in fast.candidate_lines(data)] == starts
        for kind in ("kernel", "app", "syslog"):
            assert _signature(fast.scan(data, kind)) == signatures[kind]


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_fail_loudly_on_a_missed_or_extra_line(engine):
    """The comparison above is not vacuous: each engine finds the literal lines and only them."""
    scanner = _engine(RULES, engine)
    line = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    data = b"noise\n" + line + b"\nnoise NVRM without the rest\n" + line + b"\n"
    starts = [s for s, _ in scanner.candidate_lines(data)]
    assert 6 in starts and data.rfind(line) in starts
    assert all(data[s:data.find(b"\n", s)] != b"noise" for s in starts)


@pytest.mark.parametrize("engine", ENGINES)
def test_caseless_literals(engine):
    rules = _caseless(RULES, every=1)
    scanner, plain = _engine(rules, engine), Scanner(rules, engine="re")
    data = b"nvrm: XID (pci:0000:3B:00): 79, PID=1, gpu HAS FALLEN OFF THE BUS.\nnoise\n"
    hits = scanner.scan(data, "kernel")
    assert any(h.rule.id == "gpu.xid" for h in hits)
    assert _signature(hits) == _signature(plain.scan(data, "kernel"))
    exact = _engine(RULES, engine)
    assert not [h for h in exact.scan(data, "kernel") if h.rule.id == "gpu.xid"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_of_the_buffer(engine):
    """scan(data, kind, begin, end, first_line) reports the lines starting in [begin, end) only,
    numbered from first_line, with offsets into data: what streaming windows rely on."""
    scanner = _engine(RULES, engine)
    line = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    data = line + b"noise\n" + line + b"noise\n" + line
    begin, end = len(line) + 6, 2 * len(line) + 12
    hits = [h for h in scanner.scan(data, "kernel", begin, end, first_line=3) if h.rule.id == "gpu.xid"]
    assert [(h.lineno, h.offset) for h in hits] == [(3, begin)]
    whole = [(h.lineno, h.offset) for h in scanner.scan(data, "kernel") if h.rule.id == "gpu.xid"]
    assert whole == [(1, 0), (3, begin), (5, end)]


def test_the_default_engine_needs_no_extra(monkeypatch):
    monkeypatch.setattr(scanner_module, "hyperscan", None)
    monkeypatch.delenv(scanner_module.ENGINE_VARIABLE, raising=False)
    expected = "ahocorasick" if scanner_module.ahocorasick_rs is not None else available_engines()[0]
    assert Scanner(RULES).engine == expected
    monkeypatch.setattr(scanner_module, "ahocorasick_rs", None)
    assert Scanner(RULES).engine in ("grep", "re")  # still works without the library
    monkeypatch.setenv(scanner_module.ENGINE_VARIABLE, "re")
    assert Scanner(RULES).engine == "re"


def test_lines_without_literals_are_never_decoded():
    scanner = Scanner([r for r in RULES if not r.event.fallback], engine="re")  # the first pass
    data = b"step 1 loss 2.0\n" * 1000 + b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    assert [start for start, _ in scanner.candidate_lines(data)] == [16 * 1000]
    assert [h.lineno for h in scanner.scan(data, "kernel") if h.rule.id == "gpu.xid"] == [1001]


def test_lines_at_both_ends_of_the_buffer():
    scanner = Scanner(RULES, engine="re")
    line = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    hits = [h for h in scanner.scan(line + b"\nnoise\n" + line, "kernel") if h.rule.id == "gpu.xid"]
    assert [h.lineno for h in hits] == [1, 3]


@pytest.mark.parametrize(
    "raw,expected",
    [("PCI:0000:3B:00", "0000:3b:00"), ("00000000:3B:00.0", "0000:3b:00"), ("3b:00.0", "0000:3b:00")],
)
def test_pci_ids_are_normalised(raw, expected):
    assert normalise_pci(raw) == expected


@pytest.mark.parametrize("prefix", ["", "0: ", " 12: ", "[rank3]:", "[rank3]: ", "[1,3]<stdout>:", "    ", "7: [rank7]: ",
                                    "[pod/nccl-tests-0/worker] ", "tests-1  | 0: ", "node1: ", "worker-1: [rank1]: ", "> ",
                                    "> 0: ", "2024-05-01 10:00:00,123 ", "[10:00:00] 3: "])
def test_an_anchored_rule_reads_the_program_line_after_launcher_prefixes_and_indents(prefix):
    # nccl-tests' closing check is read from the start of the line (`^#`): under `srun --label`,
    # `mpirun --tag-output`, PyTorch's rank prefix or a post's indent it is still the program's line.
    scanner = Scanner(RULES, engine="re")
    line = (prefix + "# Out of bounds values : 0 OK").encode()
    assert "marker.nccl_tests_ok" in {h.rule.id for h in scanner.scan(line, "app")}


def test_an_anchored_rule_still_wants_its_text_at_the_line_start():
    scanner = Scanner(RULES, engine="re")
    for line in (b"echo '# Out of bounds values : 0 OK'", b"node1: echo # Out of bounds values : 0 OK",
                 b"Error running: # Out of bounds values : 0 OK"):
        assert "marker.nccl_tests_ok" not in {h.rule.id for h in scanner.scan(line, "app")}


def test_a_relaying_tools_prefix_is_read_past_only_when_the_rule_does_not_match_before_it():
    # `RuntimeError: ` or Megatron's `> building ...` begin as a relaying tool's prefix does: the
    # program's line is read whole first, and past such a prefix only when the rule does not match
    from slurm_attrib.ingest.origin import relay_prefix_end

    assert relay_prefix_end(b"worker-1: [rank1]: x") == 18
    assert relay_prefix_end(b"> x") == 2
    assert relay_prefix_end(b"2024-05-01 10:00:00,123 x") == 24  # a logging handler's time
    assert relay_prefix_end(b"[10:00:00] worker-1: 0: x") == 24
    assert relay_prefix_end(b"HDF5-DIAG: x") == 11  # a word like a host: only a second chance
    assert relay_prefix_end(b"redis: x") == relay_prefix_end(b"x") == 0  # a program's name
    assert relay_prefix_end(b"E       AttributeError: x") == 8  # pytest's report of a failure
    assert relay_prefix_end(b"E1202 13:04:06.123 x") == relay_prefix_end(b"E x") == 0  # glog; a word
    scanner = Scanner(RULES, engine="re")
    line = b"node1: # Out of bounds values : 0 OK"
    [hit] = [h for h in scanner.scan(line, "app") if h.rule.id == "marker.nccl_tests_ok"]
    assert hit.text == line.decode()


def test_pytests_failure_report_is_read_past_to_the_exception():
    scanner = Scanner(RULES, engine="re")
    line = b"E       AttributeError: '_OpNamespace' object has no attribute 'permute_2D_sparse_data'"
    [hit] = [h for h in scanner.scan(line, "app") if h.rule.id == "py.exception"]
    assert hit.fields["exc"] == "AttributeError"
    raised = b'E           raise AttributeError(f"\'_OpNamespace\' object has no attribute \'{op_name}\'") from e'
    assert "py.exception" not in {h.rule.id for h in scanner.scan(raised, "app")}


def test_an_anchored_unless_reads_past_launcher_prefixes_too():
    # a glog warning line is no error lead, labelled by srun or not
    scanner = Scanner(RULES, engine="re")
    line = "W0000 00:00:1715498963.019816  583764 curl_transport.cc:444] Error [28]=Timeout was reached"
    for text in (line, "0: " + line, "[rank0]:" + line):
        assert "fallback.app_error_words" not in {h.rule.id for h in scanner.scan(text.encode(), "app")}
    assert "fallback.app_error_words" in {h.rule.id for h in scanner.scan(b"0: Error [28]=Timeout was reached", "app")}


def test_terminal_colour_codes_are_no_part_of_a_line():
    # tools that force colour into files (rich, loguru, FORCE_COLOR) wrap words in ECMA-48 codes
    scanner = Scanner(RULES, engine="re")
    plain = "RuntimeError: CUDA error: an illegal memory access was encountered"
    coloured = "\x1b[31;1mRuntimeError\x1b[0m: CUDA error: an illegal memory access was encountered\x1b[0m\x1b[K"
    [hit] = [h for h in scanner.scan(coloured.encode(), "app") if h.rule.id == "cuda.illegal_memory_access"]
    [expected] = [h for h in scanner.scan(plain.encode(), "app") if h.rule.id == "cuda.illegal_memory_access"]
    assert (hit.text, hit.fields) == (plain, expected.fields)


def test_an_anchored_rule_never_reads_a_launchers_prefix():
    # `(RayTrainWorker ...)` is Ray's, not the program's: its 'Train' makes no progress bar a training one
    scanner = Scanner(RULES, engine="re")
    bar = "Processing dataset chunks: 100%|##########| 106/106 [00:11<00:00,  9.45it/s]"
    for prefix in ("", "(RayTrainWorker pid=4242, ip=10.0.0.7) ", "0: "):
        hits = {h.rule.id for h in scanner.scan((prefix + bar).encode(), "app")}
        assert "marker.training_progress_done" not in hits, prefix
    hits = {h.rule.id for h in scanner.scan(b"(pid=4242) Training: 100%|##########| 500/500 [00:11<00:00]", "app")}
    assert "marker.training_progress_done" in hits


def test_a_second_look_lead_does_not_stand_on_a_line_a_rule_read_as_following():
    # mcelog's record is read whole by its rule: its decoded status lines (`Corrected error`,
    # `Transaction: Memory scrubbing error`) are no leads of the second look; a line after it is
    scanner = Scanner(RULES, engine="re")
    record = ("Hardware event. This is not a software error.\nMCE 0\nCPU 0 BANK 11\nMCG status:\nMCi status:\n"
              "Corrected error\nTransaction: Memory scrubbing error\nMemCtrl: Corrected patrol scrub error\n"
              "STATUS 8c000051000800c2 MCGSTATUS 0\nCPUID Vendor Intel Family 6 Model 79\nrun.sh: fatal error reading input\n")
    hits = scanner.scan(record.encode(), "app")
    assert [(h.rule.id, h.lines) for h in hits if h.lineno == 1] == [("host.mcelog_corrected", 9)]
    assert [h.lineno for h in hits if h.rule.event.fallback and h.role == "cause"] == [11]


@pytest.mark.parametrize("prefix", ["", "0: ", "[1,0]<stderr>:", "worker-1: ", "> ", "[10:00:00] "])
def test_a_rules_following_lines_are_read_as_the_programs_lines(prefix):
    # srun labels every line of Open MPI's signal block, not only its first
    scanner = Scanner(RULES, engine="re")
    block = "".join(prefix + line + "\n" for line in (
        "[gpu004:105080] *** Process received signal ***", "[gpu004:105080] Signal: Aborted (6)"))
    [hit] = [h for h in scanner.scan(block.encode(), "app") if h.rule.id == "proc.ompi_received_signal"]
    assert (hit.fields["signal"], hit.lines, hit.text) == (6, 2, block.rstrip("\n"))


def test_a_second_look_rule_reads_a_multi_line_message_after_its_header():
    # read after the syslog header, the OSU benchmark's table matches: the lines it read are counted
    # on the same text (the header is never read)
    scanner = Scanner(RULES, engine="re")
    text = b"Dec  2 13:04:06 node1 osu_latency: # Size          Latency (us)\n8                       1.66\n"
    [hit] = [h for h in scanner.scan(text, "app") if h.rule.id == "fallback.osu_results"]
    assert hit.lines == 2


@pytest.mark.parametrize("line,rule", [
    ('torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5', 'nccl.remote_error'),
    ('torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ', 'elastic.child_failed'),
    ('[rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.35 GiB.', 'cuda.oom'),
    ('RuntimeError: CUDA error: an illegal memory access was encountered', 'cuda.illegal_memory_access'),
    ('[rank1]: OSError: [Errno 116] Stale file handle: xxx', 'storage.stale_file_handle'),
    ("OSError: [Errno 121] Remote I/O error: '/mnt/nfs/data/shard_0001'", 'storage.remote_io_error'),
    ("OSError: [Errno 16] Device or resource busy: '.nfs000000000123abcd00000042'", 'storage.nfs_silly_rename_busy'),
    ('OSError: [Errno 28] No space left on device', 'storage.io_error_app'),
    ('torch.distributed.elastic.multiprocessing.api.SignalException: Process 2521679 got signal: 15', 'elastic.signal_exception'),
    ('torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL', 'torch.spawn_process_signal'),
    ('Exception: process 1 terminated with signal SIGKILL', 'torch.spawn_process_signal'),
    ('torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError', 'elastic.rendezvous_timeout'),
    ('[rank2]: torch.distributed.DistNetworkError: Connection reset by peer', 'torch.store_connection_lost'),
    ('torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.', 'torch.store_clients_timeout'),
    ('ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR expected, but not set', 'torch.init_config_error'),
    ('RuntimeError: NCCL Error 2: unhandled system error', 'nccl.system_error'),
    ('tensorflow.python.framework.errors_impl.CancelledError: Enqueue operation was cancelled', 'marker.tensorflow_enqueue_cancelled'),
    ("AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'", 'deepspeed.cpu_adam_teardown_error'),
    ("subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank=0']' returned non-zero exit status 137.", 'accelerate.launcher_child_failed'),
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': -9}", 'vllm.engine_start_failed'),
    ('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.', 'vllm.engine_dead'),
    ('RuntimeError: Engine core process EngineCore_DP0 died unexpectedly.', 'vllm.process_died'),
    ('subprocess.CalledProcessError: Command XXXXX (my script params) died with <Signals.SIGSEGV: 11>.', 'py.subprocess_signal'),
    ('RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.', 'torch.dataloader_worker_signal'),
    ('[rank3]: RuntimeError: DataLoader worker (pid(s) 41877, 41880) exited unexpectedly', 'torch.dataloader_worker_exited'),
    ('torch.distributed.DistBackendError: NCCL communicator was aborted after a previous error', 'torch.comm_aborted'),
    ('RuntimeError: HIP error: invalid device function', 'hip.error_message'),
    ('[rank5]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 12.95 GiB. GPU 5 has a total capacity of 191.98 GiB of which 18.55 GiB is free.', 'hip.out_of_memory'),
    ('jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: orbax_sync_global_devices. Timed out task names:', 'xla.coord_barrier_timeout'),
    ('jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Shutdown barrier has failed.', 'xla.coord_shutdown_barrier_failed'),
    ('jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):', 'xla.coord_heartbeat_timeout'),
    ('jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Coordination service has stopped. RecordHeartbeat() from task: /job:jax_worker/replica:0/task:2 failed.', 'xla.coord_leader_unreachable'),
    ("jax.errors.JaxRuntimeError: INTERNAL: NCCL operation ncclGroupEnd() failed: remote process exited or there was a network error. Last NCCL warning(error) log entry (may be unrelated) 'NET/IB : Got completion from peer 10.0.0.2<47534> with status=12 opcode=0 len=0 vendor err 129 (Send)'.", 'xla.nccl_error'),
    ('ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check python-core-worker-*.log files for more information.', 'ray.actor_or_worker_died'),
    ('RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR', 'cuda.cudnn_failure'),
    ('jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered', 'cuda.error_name'),
    ('cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorUnknown: unknown error', 'cuda.error_name'),
    ('RuntimeError: CUDA driver error: unknown error', 'cuda.driver_error_message'),
    ('RuntimeError: Triton Error [CUDA]: uncorrectable ECC error encountered', 'cuda.driver_error_message'),
    ('RuntimeError: cublas runtime error : the GPU program failed to execute at /pytorch/aten/src/THC/THCBlas.cu:258', 'cuda.cublas_failure'),
    ('RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50', 'cuda.thc_runtime_error'),
    ('torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to connect to (10.1.0.4, 29400).', 'torch.store_connect_failed'),
    ('torch.distributed.DistStoreError: Socket Timeout', 'torch.store_wait_timeout'),
    ('torch.distributed.DistBackendError: NCCL timeout when waiting for nonblocking call to become successful.', 'torch.nccl_nonblocking_timeout'),
    ('OSError: [Errno 98] Address already in use', 'app.port_in_use'),
    ("zmq.error.ZMQError: Address already in use (addr='tcp://localhost:5557')", 'app.port_in_use'),
    ('ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!', 'torch.init_config_error'),
])
def test_a_generic_reading_yields_to_the_rule_that_knows_the_line(line, rule):
    # py.exception reads any `<name>Error: <message>` line (event.generic): where a rule knows the
    # wording (what raised it, what it means), that rule's reading is the line's only one
    found = {h.rule.id for h in Scanner(RULES, engine="re").scan(line.encode(), "app")}
    assert rule in found and "py.exception" not in found, found


def test_a_generic_reading_stands_where_no_rule_knows_the_line():
    found = {h.rule.id for h in Scanner(RULES, engine="re").scan(b"ValueError: shapes (3,4) and (5,) not aligned", "app")}
    assert found == {"py.exception"}


def test_only_a_rule_propers_cause_or_symptom_is_a_generic_reading():
    import dataclasses

    from pydantic import ValidationError

    from slurm_attrib.ruleset.schema import RuleModel

    data = dataclasses.asdict(next(r for r in RULES if r.id == "fallback.app_error_words"))
    data["event"]["generic"] = True
    with pytest.raises(ValidationError, match="a generic reading is a rule proper's cause or symptom"):
        RuleModel.model_validate(data)


def test_the_literal_database_is_loaded_from_the_cache_and_a_bad_copy_compiled_again(tmp_path, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    import pickle

    monkeypatch.setenv("SATTRIB_CACHE_DIR", str(tmp_path))
    line = b"[ 3.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    compiled = [h.rule.id for h in Scanner(RULES, engine="hyperscan").scan(line, "kernel")]
    assert "gpu.xid" in compiled
    (saved,) = tmp_path.glob("hyperscan-*.pickle")

    def no_compiling(**_):
        raise AssertionError("compiled although the cache holds the database")

    with monkeypatch.context() as patched:
        patched.setattr(scanner_module.hyperscan, "Database", no_compiling)
        assert [h.rule.id for h in Scanner(RULES, engine="hyperscan").scan(line, "kernel")] == compiled

    saved.write_bytes(pickle.dumps(b"not a database"))  # another Hyperscan's, another CPU's
    assert [h.rule.id for h in Scanner(RULES, engine="hyperscan").scan(line, "kernel")] == compiled
    assert hyperscan.loadb(pickle.loads(saved.read_bytes()), hyperscan.HS_MODE_BLOCK) is not None  # written again
