"""``snap verify``: check every shard of a snapshot against its manifest, in parallel.

A full check recomputes each shard's crc32c from its bytes (and each record batch's, where the
manifest lists them; a remote shard's that disagree are read again once: damage in transit is
none at rest), compares the size, opens the Arrow file, checks its schema, and decodes every
record batch, comparing record counts with the manifest: what the loader will need, proved
ahead of a long run. A fast check (``fast=True``) downloads no shard: it compares the size and,
where the storage keeps one (GCS), the crc32c the storage reports; else sizes only, and says so.
Both also name the columns the loader refuses whatever their bytes hold (``unloadable``): a
valid Arrow type, from another writer or an earlier snap, that snap's readers cannot hand
back as it is meant.

A shard the storage fails to read (an OS error: EIO, ESTALE, EACCES) is never called
damaged: it is unreadable, listed with its cause, and the other shards are still checked.
What is no shard's stops verify with one answer: out of memory, threads or open files, and a
storage that fails alike at every shard (none read, or :data:`STOP_AFTER` in a row).

Threads, one shard each: crc32c and Arrow decoding release the GIL.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import pyarrow as pa

from .. import faults, ipc_layout, retry, storage, versions
from .. import schema as schema_mod
from ..console import named
from ..cores import cores
from ..errors import OptionError, OutOfMemoryError, SnapError, StorageError
from ..layout import MANIFEST_NAME, manifest_path
from ..manifest import ShardEntry, repair_advice
from ..stored_types import unloadable_columns
from ..units import integer
from . import limits, verify_files
from .checksum import block_problem, crc32c_buffer
from .snapshot import Snapshot
from .verify_report import (
    MISSING,
    Contradicted,
    Lost,
    Refused,
    ShardCheck,
    VerifyReport,
    sizes_only,
)

REMOTE_THREADS = 16  # shards checked at once on remote storage: hides time-to-first-byte
STOP_AFTER = 16  # shards in a row unreadable alike: the storage's, not theirs (stops verify)
AHEAD = 256  # shards' checks handed to the threads at a time (or twice the threads)
_PROCESS_WIDE = (errno.EMFILE, errno.ENFILE)  # (out of memory too: no shard's, stops verify)


def verify(
    snapshot: Snapshot,
    fast: bool = False,
    threads: int | None = None,
    on_shard: Callable[[ShardCheck], None] | None = None,
    files: bool = True,
) -> VerifyReport:
    """Check every shard of ``snapshot`` (a :class:`Snapshot` from ``snap.open``).

    Args:
        fast: compare sizes and the crc32c the storage reports, downloading nothing (see the
            module docstring); False reads and checks every byte.
        threads: shards checked at once, an integer >= 1 (None: a thread per CPU for a full
            check of local files, else as many as keep remote requests in flight).
        on_shard: called with each shard's :class:`ShardCheck` (from the worker threads) as
            it finishes.
        files: check the snapshot's own files too (:mod:`.verify_files`): not for a shard.

    Raises:
        OptionError: ``threads`` is not an integer >= 1.
        StorageError: the storage failed alike at every shard (see the module's doc).
        OutOfMemoryError: this process is short of memory or threads.
    """
    threads = integer(threads)  # (numpy's as int; 0 and -1 ran with 1 thread)
    bad = isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    if threads is not None and bad:
        raise OptionError(f"threads must be an integer >= 1 (or None: chosen), got {threads!r}")
    fs, root = snapshot.fs, snapshot.root
    local = storage.is_local(fs)
    if threads is None:
        threads = cores() if local and not fast else REMOTE_THREADS
    check_one = _fast_check if fast else _full_check
    started = time.perf_counter()

    def run(entry: ShardEntry) -> ShardCheck:
        result = check_one(fs, root, entry, snapshot.schema, local)
        if on_shard is not None:
            on_shard(result)
        return result

    pool = ThreadPoolExecutor(threads, thread_name_prefix="snap-verify")
    try:
        results = _checked_all(pool, run, snapshot.shards, max(AHEAD, 2 * threads))
    except RuntimeError as err:  # (its threads start as shards are handed out)
        fewer = f"check fewer shards at once ({named('--threads', 'threads=')})"
        faults.raise_no_thread(f"verify of {snapshot.url}", err, fewer)
        raise
    finally:  # (an answer found early: the shards not started are not checked)
        pool.shutdown(wait=True, cancel_futures=True)
    notes: list[str] = []
    problems = verify_files.problems(snapshot, notes) if files else []  # (its own files)
    problems += _contradicted(snapshot, results)
    notes += sizes_only(results) if fast else []
    seconds, unloadable = time.perf_counter() - started, unloadable_columns(snapshot.schema)
    replaced = _replaced(snapshot) if files and any(c.lost for c in results) else None
    if replaced is not None:  # (its own files' problems too: gone with it)
        problems, notes = (
            [],
            [
                f"version {snapshot.manifest.version} was replaced by version {replaced} while "
                "verify ran, and the shards only it had were removed with it (snap gc): they are "
                "no damage of the snapshot; run snap verify again"
            ],
        )
    return VerifyReport(snapshot.url, fast, seconds, results, unloadable, problems, notes,
                        replaced)  # fmt: skip


def _contradicted(snapshot: Snapshot, results: list[ShardCheck]) -> list[str]:
    """The manifest's problem where shards as written have another schema than it says
    (:class:`Contradicted`) and none has its schema: those shards are intact (their problem
    is cleared). Where one has it, the others are another snapshot's (damaged)."""
    those = [c for c in results if isinstance(c.problem, Contradicted)]
    if not those:
        return []
    first, agreed = those[0].problem, any(c.ok and c.check == "full" for c in results)
    for check in those:
        check.problem = (
            f"its schema differs from the manifest's ({check.problem})" if agreed else None
        )
    if agreed:
        return []
    manifest = storage.to_url(snapshot.fs, manifest_path(snapshot.root))
    shards = f"{len(those)} of {len(results)} shards" if len(those) > 1 else "a shard"
    return [
        f"{manifest}: its schema (schema.arrow_ipc_base64) differs from that of {shards} whose "
        f"bytes are as written (their crc32c is the manifest's), the first {those[0].url} "
        f"({first}): the manifest's schema is damaged, not the shards; "
        f"{repair_advice(manifest)}"
    ]


def _replaced(snapshot: Snapshot) -> int | None:
    """The version that replaced ``snapshot``'s since it was opened, if one did (a verify
    that met the shards gc removed with it called an intact snapshot damaged, "run the same
    snap create again")."""
    try:
        now = versions.read(snapshot.fs, storage.join(snapshot.root, MANIFEST_NAME))
    except SnapError:  # (damaged, or not there: said by the checks of its files)
        return None
    mine = snapshot.manifest
    if now is None or (now.fingerprint, now.run) == (mine.fingerprint, mine.run):
        return None
    return now.version


def _checked_all(
    pool: ThreadPoolExecutor,
    run: Callable[[ShardEntry], ShardCheck],
    shards: Sequence[ShardEntry],
    ahead: int,
) -> list[ShardCheck]:
    """Every shard's check, in the manifest's order; a StorageError instead where every
    shard (the only one too), or :data:`STOP_AFTER` in a row, failed alike: one line. Checks
    are handed out ``ahead`` at a time: all at once, each wait looked at every check still
    pending (25,600 shards: 69-103 s, 13-16 s so)."""
    queue, submitted = iter(enumerate(shards)), 0
    pending: dict[Future[ShardCheck], int] = {}
    results: dict[int, ShardCheck] = {}
    streak: list[ShardCheck] = []
    while True:
        for i, entry in itertools.islice(queue, ahead - len(pending)):
            pending[pool.submit(run, entry)] = i
            submitted += 1
        if not pending:
            break
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=pending.__getitem__):  # (a run: in the manifest's order)
            check = results[pending.pop(future)] = future.result()
            if not check.unreadable or (streak and check.cause != streak[0].cause):
                streak = []  # (a shard read, or another failure: no run of one)
            if check.unreadable:
                streak.append(check)
            if len(streak) >= STOP_AFTER and len(shards) > STOP_AFTER:
                unchecked = sum(not f.done() for f in pending) + len(shards) - submitted
                raise StorageError(
                    f"{streak[0].problem} (and the {len(streak) - 1} shards checked next failed "
                    f"alike: verify stopped, {unchecked} of {len(shards)} shards not checked)"
                )
    checks = [results[i] for i in range(len(shards))]
    if checks and all(c.unreadable and c.cause == checks[0].cause for c in checks):
        others = f" (and every other shard failed alike: none of the {len(checks)} could be read)"
        raise StorageError(f"{checks[0].problem}{others * (len(checks) > 1)}")
    return checks


def _fast_check(
    fs: Any, root: str, entry: ShardEntry, schema: pa.Schema, local: bool
) -> ShardCheck:
    path = storage.join(root, entry.path)
    result = ShardCheck(entry.path, storage.to_url(fs, path), entry.bytes, entry.records, "size")

    def problem() -> str | None:
        if local and (wrong := storage.local_file_problem(root, path)):
            return Refused(wrong)  # (a link out of the snapshot, a FIFO: what the loader refuses)
        size, crc = storage.stored_checksum(fs, path)
        if size != entry.bytes:
            return _size_problem(size, entry)
        if crc is None:
            return None
        result.check = "storage-crc32c"
        if crc != entry.crc32c:
            return f"crc32c {crc} (reported by the storage), the manifest says {entry.crc32c}"
        return None

    return _checked(result, problem)


def _full_check(
    fs: Any, root: str, entry: ShardEntry, schema: pa.Schema, local: bool
) -> ShardCheck:
    path = storage.join(root, entry.path)
    result = ShardCheck(entry.path, storage.to_url(fs, path), entry.bytes, entry.records, "full")
    return _checked(
        result,
        lambda: _refused(root, path, local) or _problem(fs, path, entry, schema, local),
    )


def _refused(root: str, path: str, local: bool) -> Refused | None:
    problem = storage.local_file_problem(root, path) if local else None
    return None if problem is None else Refused(problem)


def _size_problem(size: int, entry: ShardEntry) -> Lost:
    return Lost(f"has {size} bytes, the manifest says {entry.bytes}")


def _checked(result: ShardCheck, problem: Callable[[], str | None]) -> ShardCheck:
    """``result`` with the problem ``problem()`` finds; a missing or undecodable shard is a
    problem too. A failing storage is not: the shard is unreadable, with the answer every
    reader gives (the process's own shortage raises it: it stops verify)."""
    try:
        result.problem = problem()
    except FileNotFoundError:
        result.problem = MISSING
    except (OSError, SnapError, MemoryError, pa.ArrowException) as err:  # (Arrow's: a thread)
        said = _storage_fault(err, result.url)
        if said is None:
            result.problem = f"cannot be read: {err}"
            return result
        code = next(filter(None, (getattr(c, "errno", None) for c in retry.causes(err))), None)
        if isinstance(said, OutOfMemoryError) or code in _PROCESS_WIDE:
            raise said from (said.__cause__ if said is err else err)
        root = list(retry.causes(err))[-1]
        result.problem, result.unreadable = str(said), True
        result.cause = errno.errorcode.get(code or 0) or type(root).__name__
    return result


def _storage_fault(err: BaseException, url: str) -> SnapError | None:
    """A read the storage fails (any OS error: EIO, ESTALE, EACCES, a time-out) as every
    reader says it, never the shard's damage (and its deletion); None: the bytes' fault."""
    if isinstance(err, (StorageError, OutOfMemoryError)):
        return err
    if (short := storage.out_of_memory(f"shard {url}", err)) is not None:
        return short
    if isinstance(err, OSError) and not isinstance(err, SnapError):
        return faults.fault(err, url, reading=True)
    return None


def _not_decoded(err: BaseException) -> None:
    """Re-raise what Arrow says of the machine or the storage, not of the bytes: a failed
    allocation or thread, an OS error with an errno (a read of the file: "Failed to open
    local file ... [errno 5]"). Without one (a codec's "ZSTD decompression failed"), the
    bytes are damaged."""
    if storage.out_of_memory("", err) is not None or getattr(err, "errno", None) is not None:
        raise err  # (_checked says which)


@contextlib.contextmanager
def _mapped(path: str) -> Iterator[memoryview]:
    """The local file's bytes, through a read-only memory map for as long as they are used.
    The size is the descriptor's: a failing stat is said with its own errno (mmap, left to
    learn it, maps 0 bytes: EINVAL)."""
    fd = limits.after_collecting(lambda: os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
    try:
        size = os.fstat(fd).st_size
        mapped = limits.map_read_only(fd, size) if size else None
    finally:
        limits.close_read_only(fd)
    view = memoryview(mapped if mapped is not None else b"")
    try:
        yield view
    finally:
        view.release()
        if mapped is not None:
            with contextlib.suppress(BufferError):  # (a view still held: freed with it)
                mapped.close()


def _bytes_problem(data: Any, entry: ShardEntry) -> str | None:
    """What is wrong with a shard's bytes (size, crc32c, the record batches' own), or None."""
    if len(data) != entry.bytes:
        return _size_problem(len(data), entry)
    crc = crc32c_buffer(data)
    if crc != entry.crc32c:
        return f"crc32c {crc}, the manifest says {entry.crc32c}"
    return block_problem(None, data, entry)


def _problem(fs: Any, path: str, entry: ShardEntry, schema: pa.Schema, local: bool) -> str | None:
    """What is wrong with one shard, or None. A local shard's bytes are checked through a map,
    unmapped before Arrow reads the file (decoding needs the room)."""
    if not local:
        data = storage.read_bytes(fs, path)
        if (problem := _bytes_problem(data, entry)) is not None:  # (in transit? read once more)
            problem = _bytes_problem(data := storage.read_bytes(fs, path), entry)
        return problem or _arrow_problem(pa.py_buffer(data), entry, schema)
    with _mapped(path) as view:
        if problem := _bytes_problem(view, entry):
            return problem
    source = pa.OSFile(os.fsencode(path), "r")  # (an OSError: the storage's)
    try:
        return _arrow_problem(source, entry, schema)
    finally:
        with contextlib.suppress(OSError):  # (closed here: Arrow's destructor prints its error)
            source.close()


def _arrow_problem(source: Any, entry: ShardEntry, schema: pa.Schema) -> str | None:
    """What is wrong with a shard as Arrow reads it from ``source``, or None."""
    try:
        reader = pa.ipc.open_file(source, options=ipc_layout.NO_THREADS)
    except (pa.ArrowException, OSError) as err:
        _not_decoded(err)
        return f"is not a readable Arrow file: {err}"
    expected = entry.batch_sizes()
    if (diff := schema_mod.difference(reader.schema, schema)) is not None:
        return Contradicted(diff)  # (its bytes were checked first: they are as written)
    problem = schema_mod.layout_problem(
        reader.schema, schema, reader.num_record_batches, len(expected)
    )
    if problem is not None:
        return problem
    for i, rows in enumerate(expected):
        try:
            batch = reader.get_batch(i)
            batch.validate(full=True)
        except (pa.ArrowException, OSError) as err:
            _not_decoded(err)
            return f"record batch {i} cannot be decoded: {err}"
        if batch.num_rows != rows:
            return f"record batch {i} has {batch.num_rows} records, the manifest says {rows}"
        problem = schema_mod.encoding_problem(batch)
        if problem is not None:
            return f"record batch {i}: {problem}"
    return None
