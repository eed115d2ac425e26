"""`POST /v1/analyze`: an uploaded job folder (a tar archive, usually .tar.gz), analysed where it
cannot stall the service.

The service writes the body to a private temporary folder as it arrives (at most
MAX_UPLOAD_BYTES), then runs `python -m slurm_attrib.service.upload FOLDER` with a memory, CPU
and file-size rlimit and a wall-clock timeout, at most `service_upload_workers` at a time and
`service_upload_queue` more waiting (beyond that: 503 with Retry-After).  The child unpacks the
archive member by member with every limit checked while it reads (members, depth, per-member and
total unpacked bytes, the ratio of unpacked to uploaded bytes, gzip members decompressed on the
way to count what they hold; no absolute paths, `..`, links or devices), analyses it with every
source untrusted, and prints one JSON line: the diagnosis, or a status and a one-line reason.
Whatever the upload does to the child (a bomb, a hang, a crash), the service answers a 4xx.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_UPLOAD_BYTES = 64 * 1024 * 1024  # the request body
MAX_MEMBERS = 4096  # archive members of any type
MAX_DEPTH = 8  # path parts of a member
MAX_MEMBER_BYTES = 256 * 1024 * 1024  # one member unpacked (a gzip member: decompressed)
MAX_UNPACKED_BYTES = 512 * 1024 * 1024  # all members unpacked
MAX_RATIO = 200  # unpacked bytes per uploaded byte (text logs compress 10-30x)
RATIO_FREE_BYTES = 16 * 1024 * 1024  # unpacked bytes below which the ratio is not checked
RECEIVE_TIMEOUT = 300.0  # seconds to receive the body
RETRY_AFTER = "30"  # seconds, when the queue is full
CHUNK = 1024 * 1024
BODY_NAME = "upload.tar"
UNPACKED_NAME = "unpacked"


class UploadRefused(Exception):
    """An upload that cannot be analysed: an HTTP status and a one-line reason."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


@dataclass(frozen=True)
class UploadLimits:
    workers: int
    queue: int
    timeout: float  # seconds of one analysis, unpacking included
    memory_mb: int  # address space of the child


class UploadGate:
    """Admission and concurrency: `workers` analyses at once, `queue` more admitted (receiving
    or waiting); beyond that the upload is refused at once."""

    def __init__(self, limits: UploadLimits):
        self.limits = limits
        self.admitted = 0
        self.running = asyncio.Semaphore(limits.workers)

    async def analyse(self, chunks, rule_dirs: tuple[str, ...]) -> dict:
        """The diagnosis (as JSON data) of the archive the body `chunks` carries."""
        if self.admitted >= self.limits.workers + self.limits.queue:
            raise UploadRefused(503, "too many uploads being analysed; try again later", {"Retry-After": RETRY_AFTER})
        self.admitted += 1
        folder = tempfile.mkdtemp(prefix="sattrib-upload-")
        try:
            await _receive(chunks, Path(folder) / BODY_NAME)
            async with self.running:
                return await _run_child(folder, rule_dirs, self.limits)
        finally:
            self.admitted -= 1
            await asyncio.to_thread(shutil.rmtree, folder, True)


async def _receive(chunks, target: Path) -> None:
    size = 0
    try:
        async with asyncio.timeout(RECEIVE_TIMEOUT):
            with open(target, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > MAX_UPLOAD_BYTES:
                        raise UploadRefused(413, f"upload larger than {MAX_UPLOAD_BYTES} bytes")
                    out.write(chunk)
    except TimeoutError:
        raise UploadRefused(408, f"upload not received within {RECEIVE_TIMEOUT:.0f} s") from None
    if not size:
        raise UploadRefused(400, "empty upload: send the job folder as a .tar.gz body")


async def _run_child(folder: str, rule_dirs: tuple[str, ...], limits: UploadLimits) -> dict:
    argv = [sys.executable, "-m", "slurm_attrib.service.upload", folder, str(limits.memory_mb),
            str(int(limits.timeout) + 1), *rule_dirs]
    child = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    try:
        async with asyncio.timeout(limits.timeout):
            out, _ = await child.communicate()
    except TimeoutError:
        raise UploadRefused(422, f"the analysis of the upload took longer than {limits.timeout:g} s") from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        if child.returncode and child.returncode < 0:  # killed: the memory or CPU rlimit
            raise UploadRefused(413, f"the analysis of the upload needed more than {limits.memory_mb} MB "
                                     f"or its CPU time (signal {-child.returncode})") from None
        raise UploadRefused(422, f"the analysis of the upload failed (exit {child.returncode})") from None
    if answer.get("status") != 200:
        raise UploadRefused(answer["status"], answer["detail"])
    return answer["diagnosis"]


# -- the child ------------------------------------------------------------------------------------


def _limit_self(memory_mb: int, cpu_seconds: int) -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file over the size limit: EFBIG, not death
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_MEMBER_BYTES + CHUNK,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def unpack(body: Path, into: Path) -> Path:
    """The archive's regular files and folders under `into`, every limit checked while reading;
    the job folder (`into`, or its one top folder when the archive is `tar czf x.tgz job/`)."""
    into.mkdir()
    with open(body, "rb") as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|*") as archive:
                tops, top_dirs = _unpack_members(archive, into, raw)
        except UNREADABLE as exc:
            raise UploadRefused(400, f"not a readable tar archive: {_one_line(exc)}") from None
    if len(tops) == 1 and tops == top_dirs:
        return into / tops.pop()
    return into


# What a damaged archive raises while it is read (lzma and bz2 errors are OSError or ValueError;
# a file that clashes with a folder of the same name is OSError).
UNREADABLE = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError, UnicodeError)


def _unpack_members(archive: tarfile.TarFile, into: Path, raw) -> tuple[set[str], set[str]]:
    """(top-level names, those of them that are folder members)."""
    members = unpacked = 0
    tops: set[str] = set()
    top_dirs: set[str] = set()
    for member in archive:
        members += 1
        if members > MAX_MEMBERS:
            raise UploadRefused(413, f"more than {MAX_MEMBERS} archive members")
        parts = _checked_parts(member)
        if not parts:
            continue
        tops.add(parts[0])
        if member.isdir():
            top_dirs.update(parts if len(parts) == 1 else ())
            into.joinpath(*parts).mkdir(parents=True, exist_ok=True)
            continue
        if member.size > MAX_MEMBER_BYTES:
            raise UploadRefused(413, f"{member.name}: larger than {MAX_MEMBER_BYTES} bytes")
        unpacked = _write_member(archive, member, into.joinpath(*parts), raw, unpacked)
    return tops, top_dirs


def _checked_parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts:
        raise UploadRefused(400, f"{member.name}: path outside the job folder")
    if not (member.isfile() or member.isdir()):
        raise UploadRefused(400, f"{member.name}: links and devices are not accepted, only files and folders")
    parts = tuple(p for p in path.parts if p != ".")
    if len(parts) > MAX_DEPTH:
        raise UploadRefused(400, f"{member.name}: deeper than {MAX_DEPTH} folders")
    return parts


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path, raw, unpacked: int) -> int:
    """Copy one member, counting its bytes (a gzip member's decompressed bytes) into `unpacked`."""
    source = archive.extractfile(member)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UploadRefused(400, f"{member.name}: {exc.strerror or exc} (a file where a folder is)") from None
    gzip_size = GzipSize() if member.name.endswith(".gz") else None
    held = 0
    try:
        out = open(target, "xb")
    except OSError as exc:  # a second member of this name, or a file where a folder is
        raise UploadRefused(400, f"{member.name}: {exc.strerror or exc} (one name, two members)") from None
    with out:
        while chunk := source.read(CHUNK):
            out.write(chunk)
            grown = gzip_size.add(chunk) if gzip_size is not None else len(chunk)
            held += grown
            unpacked += grown
            _check_sizes(member.name, held, unpacked, raw.tell())
    return unpacked


class GzipSize:
    """What a gzip file decompresses to, fed chunk by chunk and decompressed a block at a time
    (never held whole); every gzip member of a concatenation counts.  Content that is not gzip
    counts as itself (the analysis reports such a file as unreadable)."""

    def __init__(self):
        self.inflater = zlib.decompressobj(wbits=31)
        self.plain = False

    def add(self, chunk: bytes) -> int:
        if self.plain:
            return len(chunk)
        size, data = 0, chunk
        try:
            while data and size <= MAX_MEMBER_BYTES:
                size += len(self.inflater.decompress(data, CHUNK))
                data = self.inflater.unconsumed_tail
                if self.inflater.eof:  # the next member of a concatenation, if any
                    data = self.inflater.unused_data + data
                    self.inflater = zlib.decompressobj(wbits=31)
        except zlib.error:
            self.plain = True
            return len(chunk)
        return size


def _check_sizes(name: str, held: int, unpacked: int, uploaded: int) -> None:
    if held > MAX_MEMBER_BYTES:
        raise UploadRefused(413, f"{name}: more than {MAX_MEMBER_BYTES} bytes unpacked")
    if unpacked > MAX_UNPACKED_BYTES:
        raise UploadRefused(413, f"more than {MAX_UNPACKED_BYTES} bytes unpacked")
    if unpacked > RATIO_FREE_BYTES and unpacked > MAX_RATIO * max(uploaded, 1):
        raise UploadRefused(413, f"{name}: unpacks to more than {MAX_RATIO} times the upload's size")


def analyse_as_untrusted(root: Path, rule_dirs: tuple[Path, ...]):
    """An upload is user evidence whatever its folders and file kinds look like: no source of it
    is trusted and its diagnosis drains nothing."""
    from slurm_attrib.engine.pipeline import analyze_evidence, load_any

    return analyze_evidence(load_any(root, vouch=False), rule_dirs)


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def main(argv: list[str]) -> dict:
    folder = argv[0]
    answer = _analyse_upload(*argv)
    if "detail" in answer:  # name the upload's files as the user does, not by the temporary folder
        answer["detail"] = answer["detail"].replace(f"{Path(folder) / UNPACKED_NAME}/", "")
    return answer


def _analyse_upload(folder: str, memory_mb: str, cpu_seconds: str, *rule_dirs: str) -> dict:
    _limit_self(int(memory_mb), int(cpu_seconds))
    from slurm_attrib.errors import SattribError

    try:
        root = unpack(Path(folder) / BODY_NAME, Path(folder) / UNPACKED_NAME)
        diagnosis = analyse_as_untrusted(root, tuple(Path(d) for d in rule_dirs))
    except UploadRefused as exc:
        return {"status": exc.status, "detail": exc.detail}
    except SattribError as exc:
        return {"status": 422, "detail": _one_line(exc)}
    except MemoryError:
        return {"status": 413, "detail": f"the analysis of the upload needed more than {memory_mb} MB"}
    except RecursionError:
        return {"status": 422, "detail": "the upload is nested too deeply to analyse"}
    return {"status": 200, "diagnosis": diagnosis.model_dump(mode="json")}


if __name__ == "__main__":
    try:
        answer = main(sys.argv[1:])
    except Exception as exc:  # a bug met on hostile input: still a one-line 4xx, never a 500
        answer = {"status": 422, "detail": f"the upload could not be analysed: {type(exc).__name__}: {_one_line(exc)}"}
    sys.stdout.write(json.dumps(answer) + "\n")
