"""Arrays in memory another process can map: what decode processes (:mod:`.procs`) write
windows into.

Each array is a memfd (an anonymous file, Linux): the owning process maps it, and a decode
process gets its descriptor over a Unix socket and maps the same pages. The memory is freed
once the owning array (every view of it) is garbage-collected *and* the decode processes have
unmapped it: :data:`listeners` hear of each array dropped, to tell them.
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import faults
from ..errors import OutOfMemoryError
from ..progress import human_bytes

AVAILABLE = hasattr(os, "memfd_create")


@dataclass(frozen=True)
class Handle:
    """How another process maps an array: the memfd's id here, descriptor and size."""

    id: int
    fd: int
    nbytes: int


_lock = threading.RLock()  # re-entrant: a finalizer (_release) may run during GC anywhere
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_lock=threading.RLock()))
_ids = itertools.count(1)
_handles: dict[int, Handle] = {}  # id() of a live owning array → its handle
# Called with a handle's id once its array is dropped (the decode processes then unmap it).
listeners: list[Callable[[int], None]] = []


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A page-aligned array in shared memory (see the module docstring)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = max(1, nbytes)
    fd = os.memfd_create("snap-window", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        memory = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    except OSError as err:
        os.close(fd)
        if err.errno == errno.EFBIG and (most := faults.file_size_limit()) is not None:
            raise OutOfMemoryError(
                f"the decode processes' shared memory ({human_bytes(size)} for a loader "
                f"window's column, a file in memory) is over {faults.size_limit_said(most)}: "
                "raise it (ulimit -f unlimited), or use processes=0"
            ) from err
        raise
    except BaseException:
        os.close(fd)
        raise
    owner = np.frombuffer(memory, np.uint8, nbytes)
    handle = Handle(next(_ids), fd, size)
    with _lock:
        _handles[id(owner)] = handle
    weakref.finalize(owner, _release, id(owner), handle)
    return owner.view(dtype).reshape(shape)


def _release(key: int, handle: Handle) -> None:
    with _lock:
        if _handles.get(key) is handle:
            del _handles[key]
    os.close(handle.fd)
    for listener in listeners:
        listener(handle.id)


def handle_of(a: np.ndarray) -> Handle | None:
    """The handle of the shared array ``a`` is (a view of), or None if it is not one."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    with _lock:
        return _handles.get(id(a))


def attach(fd: int, nbytes: int) -> mmap.mmap:
    """In a decode process: map a descriptor received from the owner (and close it)."""
    try:
        return mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)
