"""How many CPUs this process may use: what snap's "one per core" defaults count.

``os.cpu_count()`` is the machine's: on a 128-core node where Slurm (a cpuset), ``taskset``
or ``docker --cpuset-cpus`` gave the job 4, one worker per core meant 128 worker processes.
The count is the CPUs the process may run on (its affinity), lowered to a CPU quota of its
cgroup (``docker --cpus``, Kubernetes' CPU limits), rounded up, never below 1.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cores() -> int:
    """The CPUs this process may use (cached: neither changes under a running job)."""
    return _cores(os.getpid())


@functools.lru_cache(maxsize=4)
def _cores(pid: int) -> int:  # (keyed by pid: a forked child with another affinity counts anew)
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (macOS, Windows; a sandbox that refuses the call)
        allowed = os.cpu_count() or 1
    quota = cgroup_quota(CGROUP_ROOT, _read("/proc/self/cgroup"))
    if quota is not None:
        allowed = min(allowed, max(1, math.ceil(quota)))
    return max(1, allowed)


def cgroup_quota(root: Path, membership: str | None) -> float | None:
    """The CPU quota (CPUs, may be fractional) of the cgroup in ``membership`` (the text of
    ``/proc/self/cgroup``) and of its ancestors, the lowest one; None if none is set or it
    cannot be read. cgroup v2 (``cpu.max``: "max 100000" or "200000 100000") and v1
    (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, -1 for none)."""
    found: list[float] = []
    for version, d in cgroup_dirs(root, membership, "cpu"):
        if version == 2:
            found += _v2(_read(d / "cpu.max"))
        else:
            found += _v1(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us"))
    return min(found) if found else None


def cgroup_dirs(root: Path, membership: str | None, controller: str) -> list[tuple[int, Path]]:
    """The directories of the cgroup in ``membership`` (the text of ``/proc/self/cgroup``)
    and of its ancestors for ``controller`` ("cpu", "memory"), each with its cgroup version:
    v2's one unified hierarchy, or v1's hierarchy of that controller."""
    dirs: list[tuple[int, Path]] = []
    for line in (membership or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one unified hierarchy
            dirs += [(2, d) for d in _ancestors(root, path)]
        elif controller in controllers.split(","):
            base = root / controllers if (root / controllers).is_dir() else root / controller
            dirs += [(1, d) for d in _ancestors(base, path)]
    return dirs


def _ancestors(base: Path, path: str) -> list[Path]:
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    # (inside a container the cgroup's own directory is the mount's root: base itself)
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _v2(text: str | None) -> list[float]:
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return []
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return []
    return [quota / period] if quota > 0 and period > 0 else []


def _v1(quota: str | None, period: str | None) -> list[float]:
    try:
        q, p = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return []
    return [q / p] if q > 0 and p > 0 else []


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
