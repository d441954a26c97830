"""The open files a loader needs, and what it says when it cannot have them.

The loader gathers a window's records from memory maps of the local shard files they are
in, and before Python 3.13 each ``mmap`` holds a file descriptor of its own (CPython
duplicates the file's). A snapshot of many small shards (a task per input of a few
records) puts thousands in one window: 3,000 shards failed with "Too many open files"
under Linux's usual soft limit of 1,024 (macOS's is 256) while the hard limit allowed far
more. So the first local shard a process opens raises its soft limit to its hard limit (up
to :data:`WANTED`), as Ray and other data tools do; where the hard limit itself is too low,
the error says what to change (:func:`snapshot_cli.faults.read_failure`). File descriptors
may then pass 1,023, which ``select.select`` cannot watch: snap waits on its sockets with
``poll`` (:func:`readable`).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import mmap
import os
import select
import socket
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from ..shortages import OpenShards

T = TypeVar("T")

WANTED = 65536  # enough for a window of 256 MiB of 4 KiB shards; no more is asked for
_raised = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_raised=threading.Lock()))
_done = False


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard limit (at most :data:`WANTED`), once
    per process; where it cannot be raised, leave it."""
    global _done
    with _raised:
        if _done:
            return
        _done = True
        try:
            import resource
        except ImportError:  # not a Unix
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        infinite = resource.RLIM_INFINITY
        target = WANTED if hard == infinite else min(hard, WANTED)
        if sys.platform == "darwin":
            target = min(target, 10240)  # OPEN_MAX: setrlimit refuses more there
        if soft != infinite and soft < target:
            # (a sandbox may forbid it: the error then says what to change)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def shards_kept_open() -> int:
    """How many local shard files one set of a loader's readers keeps open: a 64th of the
    open-files limit (raised first; each holds a descriptor, and before Python 3.13 its map
    another), at least 128 (65,536: 1,024), and at most a quarter of the descriptors this
    process may still open. A window is decoded shard by shard, so fewer cost an open per
    shard a window; an eighth of the limit made four live loaders, or a mixture of four
    snapshots, run out of descriptors where 128 each had not, and 128 ran out under ``ulimit
    -n 64``, or 128 with 100 held by the program, shuffled or not (a probe)."""
    raise_open_files_limit()
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):  # not a Unix
        return 128
    soft = WANTED if soft == resource.RLIM_INFINITY else soft
    return max(1, min(max(128, soft // 64), (soft - _open_now()) // 4))


def _open_now() -> int:
    """The file descriptors this process holds now (Linux's /proc; 0 where it cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # (not Linux; or no descriptor left to list them with)
        return 0


class Descriptor:
    """An open file, closed when the last reference to it goes, not when its shard is evicted
    from the open set: a thread may still be reading from it (its number must not be reused
    by another open meanwhile)."""

    fd = -1
    _close = staticmethod(os.close)  # (at interpreter exit, module globals may be None)
    _counted = OpenShards

    def __init__(self, path: str) -> None:
        raise_open_files_limit()  # (once per process) a window maps many of its files
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        self.fd = after_collecting(lambda: os.open(os.fsencode(path), flags))
        self._counted.count += 1  # (said where descriptors run out; approximate in threads)

    def __del__(self) -> None:
        if self.fd >= 0:
            self._counted.count -= 1
            self.fd, fd = -1, self.fd
            try:  # noqa: SIM105 - (no module global: contextlib may be None by then)
                self._close(fd)
            except OSError:  # (EIO, EINTR: see close_read_only)
                pass


def close_read_only(fd: int) -> None:
    """Close ``fd``, a file open for reading only, whatever close says: Linux releases the
    descriptor even when close fails (EIO, EINTR; a second close could close another
    file's), and nothing written can be lost, so its error is no one's to answer (from a
    ``__del__`` it was a traceback on stderr)."""
    with contextlib.suppress(OSError):
        os.close(fd)


# Python 3.13+: a map that holds no file descriptor of its own
_UNTRACKED: dict[str, bool] = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def map_read_only(fd: int, size: int | None = None) -> mmap.mmap:
    """A read-only map of the whole file open as ``fd`` (``size``: its size, if known). The
    size is asked for here: mmap, asked to learn it, ignores a failing fstat and maps 0
    bytes, whose EINVAL hid the storage's error (an EIO said as "Invalid argument")."""
    if size is None:
        size = os.fstat(fd).st_size
    return after_collecting(lambda: mmap.mmap(fd, size, access=mmap.ACCESS_READ, **_UNTRACKED))


def after_collecting(make: Callable[[], T]) -> T:
    """``make()``, made once more after a garbage collection where the descriptors ran out
    (EMFILE, ENFILE). Loaders that only a reference cycle keeps (a trainer whose method is
    the map, dropped) hold their shard files until the collector runs, which a sweep's
    numpy loop may seldom call for: one ran out at its 5th trial under ``ulimit -n 1024``
    (a probe; each trial's loader held 200 descriptors)."""
    try:
        return make()
    except OSError as err:
        if err.errno not in (errno.EMFILE, errno.ENFILE):
            raise
    # One thread collects at a time (another's gc.collect() meanwhile returns at once), and
    # the others wait a bounded time: the collection's finalizers may wait for one of them.
    if _collecting.acquire(timeout=CLOSE_WAIT_S):
        try:
            gc.collect()  # (their finalizers close their files, as the collector's would)
            here = threading.current_thread()
            for closer in [
                t for t in threading.enumerate() if t.name == "snap-close" and t is not here
            ]:
                closer.join(CLOSE_WAIT_S)  # (one collected in a snap thread closes there)
        finally:
            _collecting.release()
    return make()


CLOSE_WAIT_S = 10.0  # how long a loader out of descriptors waits for collected ones to close
_collecting = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_collecting=threading.Lock()))


def readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` is readable (or closed) within ``timeout`` seconds: ``poll``, as
    ``select`` cannot watch descriptors past 1,023, which a raised limit reaches."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))
