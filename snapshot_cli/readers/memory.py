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

from ..cores import CGROUP_ROOT, _read, cgroup_dirs
from ..errors import OutOfMemoryError
from ..progress import human_bytes

# cgroup v2, then v1: where a container's memory limit is (the host's when not in one)
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def limit() -> int:
    """Bytes of memory this process may use at most: physical memory, or less under a
    cgroup limit (unlimited: a very large number): its own cgroup's or an ancestor's (a
    Slurm step's, a ``systemd-run -p MemoryMax=`` unit's: only the mount's root was read,
    a container's), the lowest."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): no limit known
        total = 1 << 62
    for path in CGROUP_LIMITS:
        text = (_read(path) or "").strip()
        if text.isdigit():
            total = min(total, int(text))
    found = cgroup_limit(CGROUP_ROOT, _read("/proc/self/cgroup"))
    return total if found is None else min(total, found)


def cgroup_limit(root: Path, membership: str | None) -> int | None:
    """The lowest memory limit of the cgroup in ``membership`` (``/proc/self/cgroup``'s
    text) and its ancestors under ``root``; None if none is set (v2 "max", v1's huge
    number is a limit above physical memory: harmless)."""
    found = []
    for version, d in cgroup_dirs(root, membership, "memory"):
        text = _read(d / ("memory.max" if version == 2 else "memory.limit_in_bytes")) or ""
        if text.strip().isdigit():
            found.append(int(text.strip()))
    return min(found) if found else None


def auto_window(target: int, capped: bool) -> tuple[int, int | None]:
    """The bytes of a ``shuffle_buffer="auto"`` window of ``target`` bytes, and the
    :func:`limit` where that made it smaller (else None). A rank's own order (``capped``)
    takes at most a quarter of the limit (two windows, half of it), so a small container
    still runs (its states say so: :func:`.resume.mismatch`). The global order's window is
    ``target`` whatever the memory: every rank must draw the same order, and ranks on
    machines with other limits cut other windows (a rank's records seen twice, others never);
    where two windows do not fit, :func:`check` refuses them, saying to give shuffle_buffer."""
    most = limit()
    if capped and most // 4 < target:
        return most // 4, most
    return target, None


def in_use() -> int:
    """Bytes of memory this process holds now and cannot give back: its resident anonymous
    and shared memory (decode processes' windows are memfd's), not the pages of files it
    maps (the page cache's, reclaimable); 0 where unknown."""
    total = 0
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith(("RssAnon:", "RssShmem:")):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                total += int(fields[1]) << 10  # kB
    return total


def check(nbytes: int, what: str, fix: str) -> None:
    """Refuse a request for more than the :func:`limit` leaves beside what the process
    holds already (two windows of 288 MiB passed under a limit of 600 MiB, and the process
    was killed once they were full) before it is made."""
    most, used = limit(), in_use()
    if nbytes + used > most:
        held = f" ({human_bytes(used)} of it in use already)" if used else ""
        raise OutOfMemoryError(
            f"{what} needs {human_bytes(nbytes)}, more than the {human_bytes(most)} of "
            f"memory this process may use{held}; {fix}"
        )


def failed(err: BaseException, what: str, nbytes: int, fix: str) -> BaseException:
    """``err`` as an :class:`OutOfMemoryError` naming ``what`` (``nbytes`` long) and ``fix``
    if it is a failed allocation; else ``err`` itself, to be raised unchanged."""
    if not isinstance(err, MemoryError) and getattr(err, "errno", None) != errno.ENOMEM:
        return err
    return OutOfMemoryError(
        f"out of memory: could not allocate {human_bytes(nbytes)} for {what}; {fix}"
    )
