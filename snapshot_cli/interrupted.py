"""Local calls a signal interrupted (EINTR), tried again where that is safe.

Python tries again what a signal interrupts in open, read, write and fsync (PEP 475), not in
mkdir, rename, link, unlink, stat, the opening of a directory to list it, or close: on an NFS
mount with ``intr`` or a FUSE filesystem any of them may fail with EINTR though nothing is
wrong. :func:`again` calls one again, up to :data:`TRIES` times in all; a call that may have
happened before the signal is checked for on its retry (a rename's source gone, a link's name
taken by the same file). close is never called again (Linux releases the descriptor whatever
close says: a second close could close a file another thread opened meanwhile), so its EINTR
is done. Pure ``os`` calls, no filesystem objects: :mod:`snapshot_cli.storage` and
:mod:`snapshot_cli.durable` make them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
TRIES = 8  # (each a signal's: a storm of them fails the call, as before)
_CHUNK = 8 << 20


_within = threading.local()  # (an again() inside another: the outer one tries again)


def again(fn: Callable[[], T]) -> T:
    """``fn()``, called again while it raises InterruptedError: up to :data:`TRIES` times
    in all, then the last EINTR propagates. Only for calls that may be repeated as they are
    (reads, listings, a stat, a mkdir that lets the directory exist, an unlink that lets
    the file be gone). Inside another ``again`` (a storage call made of these), once."""
    if getattr(_within, "on", False):
        return fn()
    _within.on = True
    try:
        for _ in range(TRIES - 1):
            with contextlib.suppress(InterruptedError):
                return fn()
        return fn()
    finally:
        _within.on = False


def close(fd: int) -> None:
    """Close ``fd``; EINTR is done (the descriptor is released; see the module's doc)."""
    with contextlib.suppress(InterruptedError):
        os.close(fd)


def makedirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, EINTR tried again. Where mkdir says EEXIST and
    the look that follows fails (EIO, ENOMEM: ``os.makedirs`` then said "File exists"), that
    failure propagates; FileExistsError only where a file that is no directory is there,
    FileNotFoundError where a link to nothing is."""
    try:
        again(lambda: os.makedirs(path, exist_ok=True))
    except FileExistsError:
        if not stat.S_ISDIR(again(lambda: os.stat(path)).st_mode):
            raise


def unlink(path: str) -> None:
    """Remove the file ``path``, EINTR tried again; a file gone already is done."""
    with contextlib.suppress(FileNotFoundError):
        again(lambda: os.unlink(path))


def remove(path: str, recursive: bool = False) -> None:
    """Delete the local file ``path`` (``recursive``: a directory and all in it, links not
    followed), each call EINTR tried again; FileNotFoundError if nothing was there. Not
    ``shutil.rmtree``: it closes a descriptor again where close said EINTR (EBADF, or
    another thread's file closed)."""
    try:
        again(lambda: os.unlink(path))
        return
    except IsADirectoryError:
        if not recursive:
            raise
    for name, is_dir in again(lambda: _entries(path)):
        child = os.path.join(path, name)
        with contextlib.suppress(FileNotFoundError):  # (a listing's entry gone since)
            if is_dir:
                remove(child, True)
            else:
                again(functools.partial(os.unlink, child))
    again(lambda: os.rmdir(path))


def _entries(directory: str) -> list[tuple[str, bool]]:
    with os.scandir(directory) as listing:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]


def replace(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)`` of this process's own temporary file ``tmp``, EINTR tried
    again: ``tmp`` gone on a retry, and ``path`` there, is the interrupted try's rename."""
    _moved(
        lambda: os.replace(tmp, path),
        lambda err: isinstance(err, FileNotFoundError)
        and not os.path.lexists(tmp) and os.path.lexists(path),
    )  # fmt: skip


def link(tmp: str, path: str) -> None:
    """``os.link(tmp, path)``, EINTR tried again: EEXIST on a retry is the interrupted try's
    link where ``path`` is ``tmp``'s file (one inode), else another's (FileExistsError)."""
    _moved(
        lambda: os.link(tmp, path),
        lambda err: isinstance(err, FileExistsError)
        and again(lambda: os.path.samefile(tmp, path)),
    )  # fmt: skip


def _moved(call: Callable[[], None], done: Callable[[OSError], bool]) -> None:
    """``call()``, EINTR tried again up to :data:`TRIES` times; an error of a retry that
    ``done`` says the interrupted try's own doing is success."""
    for attempt in range(TRIES):
        try:
            call()
            return
        except InterruptedError:
            if attempt + 1 == TRIES:
                raise
        except OSError as err:
            if attempt == 0 or not done(err):
                raise
            return


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to the descriptor ``fd`` (a short write goes on), then synced."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def write_synced(path: str, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` (made, or emptied) and sync it: its bytes on
    disk before any name refers to them (a power loss)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        write_all(fd, data)
    finally:
        with contextlib.suppress(InterruptedError):  # (as close() does, without a call of
            os.close(fd)  # snap's, where a Ctrl-C raised would leave the descriptor open)


def read_file(path: str) -> bytes:
    """The bytes of the local file ``path``: plain reads, no seek (a failed lseek made
    Python's buffered file "not seekable", fsspec's read then said UnsupportedOperation,
    not the storage's error)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    chunks = []
    try:
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
    finally:
        with contextlib.suppress(InterruptedError):  # (as in write_synced)
            os.close(fd)
    return b"".join(chunks)
