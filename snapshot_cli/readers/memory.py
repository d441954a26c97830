"""The memory the loader may ask for, and what it says when it cannot have it.

A window holds the larger of ``batch_size`` and ``shuffle_buffer`` records (at most an
epoch's), in one slab per fixed-width column, and batches of a gathered epoch get buffers of
their own: a large batch of large records asks for gigabytes at once. An allocation that
fails (``MemoryError``, or ``ENOMEM`` from a memory map) becomes an
:class:`~snapshot_cli.errors.OutOfMemoryError` saying how much was asked, for what, and what
to lower. Shared memory for decode processes (``memfd``) is not reserved when it is made, so
a slab larger than the machine could never hold would not fail there but kill the process
once filled: :func:`check` refuses any request larger than the memory this process may use
(physical memory, or its cgroup's limit if lower) before it is made.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

from ..errors import OutOfMemoryError
from ..progress import human_bytes

# cgroup v2, then v1: where a container's memory limit is (the host's when not in one)
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def limit() -> int:
    """Bytes of memory this process may use at most: physical memory, or less under a
    cgroup limit (unlimited: a very large number)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): no limit known
        total = 1 << 62
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check(nbytes: int, what: str, fix: str) -> None:
    """Refuse a request for more than :func:`limit` bytes before it is made."""
    if nbytes > limit():
        raise OutOfMemoryError(
            f"{what} needs {human_bytes(nbytes)}, more than the {human_bytes(limit())} of "
            f"memory this process may use; {fix}"
        )


def failed(err: BaseException, what: str, nbytes: int, fix: str) -> BaseException:
    """``err`` as an :class:`OutOfMemoryError` naming ``what`` (``nbytes`` long) and ``fix``
    if it is a failed allocation; else ``err`` itself, to be raised unchanged."""
    if not isinstance(err, MemoryError) and getattr(err, "errno", None) != errno.ENOMEM:
        return err
    return OutOfMemoryError(
        f"out of memory: could not allocate {human_bytes(nbytes)} for {what}; {fix}"
    )
