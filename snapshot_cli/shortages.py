"""A process short of memory, threads, open files, disk or file size, said as such: no damage.

A failed allocation (Arrow's, numpy's, a memory map's ENOMEM) or a thread that could not be
started (Linux's EAGAIN from pthread_create, under a memory or pids limit) is the machine's,
not the data's: verify called healthy shards damaged under a memory limit, and advised
deleting them. :mod:`snapshot_cli.faults` re-exports these. And a thread an interrupt
stopped in its start, forgotten (:func:`forget_unstarted`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading

from .errors import OutOfMemoryError, SnapError, StorageError
from .progress import human_bytes


def out_of_memory(where: str, err: BaseException) -> OutOfMemoryError | None:
    """``err`` as an OutOfMemoryError if it is a failed allocation (Arrow's, numpy's, a memory
    map's ENOMEM), else None: the shard is not damaged (verify called healthy shards
    damaged under a memory limit, and advised deleting them)."""
    if no_thread(err):
        return thread_limit(
            f"{where} could not be read", err, " (the shard is not damaged)", READ_FEWER
        )
    if not isinstance(err, MemoryError) and getattr(err, "errno", None) != errno.ENOMEM:
        return None
    asked = _asked_bytes(str(err))
    if type(err).__name__ == "ArrowMemoryError" and asked is None:
        return None  # ("capacity too large": a size no allocator takes, read from damage)
    if asked is not None and asked > _physical_memory():
        return None  # more than the machine has: a length read from damaged bytes
    return OutOfMemoryError(
        f"{where} could not be read: out of memory ({' '.join(str(err).split())}); the shard "
        "is not damaged: give this process more memory (ulimit -v, a container's or a job's "
        f"limit), or {READ_LESS}"
    )


# What to lower, in the loader's keywords (a command says its own: snapshot_cli.cli_words)
READ_LESS = "read less at once (a smaller shuffle_buffer, fewer num_parallel_reads)"


def no_thread(err: BaseException) -> bool:
    """``err`` is a thread that could not be started: Arrow's pool ("Failed to launch worker
    thread: Resource temporarily unavailable") or Python's ("can't start new thread").
    Linux's EAGAIN from pthread_create: no memory for its stack under a memory limit, or the
    process or container at its thread limit; never a statement about the data."""
    text = str(err)
    if isinstance(err, SnapError):  # (a PipelineError: the user's code, said as such)
        return False
    if type(err).__module__.startswith("pyarrow"):  # (ArrowException: Arrow's UnknownError)
        return "Failed to launch worker thread" in text
    return isinstance(err, RuntimeError) and text.startswith("can't start new thread")


READ_FEWER = "read with fewer threads (a smaller num_parallel_reads, no processes=)"


def thread_limit(
    what: str, err: BaseException, note: str = "", fewer: str = ""
) -> OutOfMemoryError:
    """A thread that could not be started (:func:`no_thread`) as one line: ``what`` failed,
    why, and what to change (``fewer``: the option that asks for fewer threads)."""
    return OutOfMemoryError(
        f"{what}: no thread could be started ({' '.join(str(err).split())}){note}; this process "
        "is at its memory or thread limit: give it more (ulimit -v, ulimit -u, a container's or "
        f"a job's memory or pids limit){f', or {fewer}' if fewer else ''}"
    )


def threads_said(what: str, err: BaseException, fewer: str = READ_FEWER) -> BaseException:
    """``err``, or the :func:`thread_limit` it is (caused by ``err``)."""
    if not no_thread(err):
        return err
    said = thread_limit(what, err, fewer=fewer)
    said.__cause__ = err
    return said


def raise_no_thread(what: str, err: BaseException, fewer: str = READ_FEWER) -> None:
    """Raise the :func:`thread_limit` ``err`` is, if it is one (Python's threads and pools
    start theirs as work comes: any call may be the one)."""
    if no_thread(err):
        raise thread_limit(what, err, fewer=fewer) from err


def short_of_memory(err: BaseException) -> OutOfMemoryError | None:
    """A failed allocation or thread start no layer named (a command's last resort)."""
    if no_thread(err):
        return thread_limit("snap", err)
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, ImportError) and _NO_ROOM_TO_LOAD.search(text):
        return memory_limit("", err, f"a library could not be loaded: {text}")  # (dlopen's)
    return memory_limit("", err) if isinstance(err, MemoryError) else None


WRITE_LESS = "write smaller record batches (--batch-bytes, batch_bytes=) or records"


def memory_limit(
    what: str, err: BaseException, text: str = "", less: str = "ask for less at once"
) -> OutOfMemoryError:
    """A failed allocation (``err``, said as ``text`` if given) as one line: ``what`` failed
    (none: said alone), and what to change (``less``: what asks for less memory)."""
    text = text or " ".join(str(err).split()) or type(err).__name__
    return OutOfMemoryError(
        f"{f'{what}: ' if what else ''}out of memory ({text}); give this process more memory "
        f"(ulimit -v, a container's or a job's limit), or {less}, then run the same command "
        "again"
    )


# What the dynamic loader says when it has no room to map a library (ENOMEM), not when the
# library is missing or another version ("static TLS block" is a loader limit, not memory's)
_NO_ROOM_TO_LOAD = re.compile(
    r"failed to map segment|cannot map zero-fill pages|cannot allocate memory(?! in static TLS)",
    re.IGNORECASE,
)

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
          "EiB": 1 << 60}  # fmt: skip


def _asked_bytes(text: str) -> int | None:
    """The size a failed allocation asked for, by its message: Arrow's "malloc of size N
    failed", numpy's "Unable to allocate 86.0 TiB ..."; None if it names none."""
    if found := re.search(r"alloc\w* of size (\d+)", text):
        return int(found.group(1))
    if found := re.search(r"allocate ([\d.]+) ([KMGTPE]?i?B)\b", text):
        return int(float(found.group(1)) * _UNITS.get(found.group(2), 1))
    return None


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # (not Linux: no allocation is too large)
        return 1 << 62


def file_size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``, RLIMIT_FSIZE), None if none."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY:
            return soft
    return None


def size_limit_said(limit: int) -> str:
    """``"this process's file-size limit (1.0 MiB: ulimit -f 1024)"``."""
    blocks = f" {limit >> 10}" if limit % 1024 == 0 else ""  # (bash counts KiB)
    return f"this process's file-size limit ({human_bytes(limit)}: ulimit -f{blocks})"


def no_room(err: BaseException) -> tuple[str, str] | None:
    """What the storage error ``err`` (a StorageError whose cause is an OSError) says of a
    disk out of room, and its errno's name: ("the disk is full", "ENOSPC") or ("the disk
    quota is used up", "EDQUOT"); None for any other failure."""
    cause = err.__cause__
    if not isinstance(cause, OSError) or cause.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    if cause.errno == errno.ENOSPC:
        return "the disk is full", "ENOSPC"
    return "the disk quota is used up", "EDQUOT"


def too_many_open_files(where: str, code: int, shuffled: bool = False) -> StorageError:
    """Out of file descriptors: which limit, what holds them, what to change (limits.py)."""
    limit = " (the system's limit: fs.file-max)" if code == errno.ENFILE else ""
    try:
        import resource

        if code == errno.EMFILE:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            limit = f" (this process may have {soft:,} open; its hard limit is {hard:,})"
    except (ImportError, ValueError, OSError):
        pass
    unshuffled = f"; an unshuffled pass {UNSHUFFLED}"
    return StorageError(
        f"{where} could not be opened: too many open files{limit}. The loader keeps a file "
        f"open for each shard its {'shuffle ' if shuffled else ''}window reads from: raise the "
        "limit (ulimit -n 65536, or LimitNOFILE for a service), or write fewer, larger shards "
        f"(snap create --inputs-per-task){unshuffled if shuffled else ''}{_shards_held()}"
    )


UNSHUFFLED = (
    "(shuffle=False) opens the fewest (a smaller shuffle_buffer does not: small windows are "
    "read in units of up to 32 MiB)"
)


class OpenShards:
    """How many shard files this process holds open now (:class:`.readers.limits.Descriptor`
    counts them; no look at /proc then, which itself needs a descriptor)."""

    count = 0


_MAPPED = " (and their maps, before Python 3.13: a descriptor each)" * (sys.version_info < (3, 13))


def _shards_held() -> str:
    """What holds the descriptors, where shards do (a sweep's loaders kept alive, each
    holding its window's: a later trial ran out)."""
    if OpenShards.count <= 0:
        return ""
    return f". This process holds {OpenShards.count:,} shard files open{_MAPPED}{LOADERS_HELD}"


# What lowers a loader window's memory (readers/window.py says it)
WINDOW_FIX = (
    "a window holds the larger of batch_size and shuffle_buffer in records (at most an "
    "epoch's): lower them, read fewer columns (columns=[...]), or free memory; in the global "
    'order (global_batch_size=, a mixture) shuffle_buffer="auto" is 256 MiB of records (32 MiB '
    "with shuffle=False) whatever the memory, as every rank must draw the same order: give "
    "shuffle_buffer= explicitly, as a number of records, the same on every rank"
)

LOADERS_HELD = (
    ": a loader holds its own until it is closed (close(), with) or collected; close those you "
    "are done with (a sweep's earlier trials, one a kept exception's traceback holds)"
)


def forget_unstarted(thread: threading.Thread) -> None:
    """Forget ``thread`` if an interrupt in its ``start`` came before its OS thread was
    made: CPython's ``Thread.start`` enters it in ``threading._limbo`` first and takes it
    out again on an ``Exception`` only, so a Ctrl-C there left it listed by
    ``threading.enumerate()`` for good. Only 3.13's thread handle tells a thread never made
    from one starting (on 3.10-3.12 it stays listed; its target holds its pass weakly:
    :func:`.readers.prefetch.weak_thread`)."""
    handle = getattr(thread, "_handle", None)
    limbo, lock = getattr(threading, "_limbo", None), getattr(threading, "_active_limbo_lock", None)
    if getattr(handle, "ident", None) == 0 and isinstance(limbo, dict) and lock is not None:
        with lock:
            limbo.pop(thread, None)
