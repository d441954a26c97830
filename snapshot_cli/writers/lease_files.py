"""The lease files of ``_runs/`` as the storage holds them now (see :mod:`.lease`).

Every look here is fresh: gcsfs and s3fs keep a directory's listing until told otherwise,
and a lease decided from one listed before would miss a lease written since (by another
writer, or by this one's own create whose answer was lost): a writer then waited for good on
a lease it held itself. A lease file is read by its own name where its epoch is known.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, storage
from ..errors import StorageError


@dataclass(frozen=True)
class LeaseInfo:
    epoch: int
    holder: dict[str, Any]
    absent: bool = False  # the storage refused its create as existing, yet shows no file

    @property
    def heartbeat(self) -> float | None:
        """When the holder last wrote its lease (epoch seconds), if the file says."""
        return number(self.holder.get("heartbeat"))

    def describe(self) -> str:
        if self.absent:
            return f"no writer (the storage refused lease {self.epoch} as existing, yet has none)"
        h = self.holder
        heartbeat = self.heartbeat
        if not isinstance(h.get("host"), str) or heartbeat is None:  # being written (HDFS
            return f"an unknown writer (lease {self.epoch} is empty or unreadable)"  # shows it)
        run = h.get("run")  # (none until a create starts its run: planning, or snap gc)
        run_said = f"run {shown(run)}" if run else "no run started"
        who = f"{shown(h['host'])}:{shown(h.get('pid'))} ({run_said}"
        if h.get("released"):
            return f"{who}, released)"
        age = time.time() - heartbeat
        if age < -1:  # (its clock is ahead of this one's)
            return f"{who}, heartbeat stamped {-age:.0f}s ahead of this machine's clock)"
        return f"{who}, heartbeat {max(0.0, age):.0f}s ago)"


def shown(value: Any) -> str:
    """A lease field on one line: a hand-edited file's newlines and control characters
    escaped, an empty or missing one as ``?``."""
    text = "?" if value is None else str(value)
    return (text if text.isprintable() else repr(text)[1:-1]) or "?"


def number(value: Any) -> float | None:
    """A lease field as a finite number, or None (a hand-edited or damaged lease file)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    n = float(value)
    return n if math.isfinite(n) else None


def epochs(fs: AbstractFileSystem, root: str) -> list[int]:
    """The epochs of the lease files in ``_runs/`` now (a fresh listing)."""
    names = storage.list_names(fs, layout.runs_dir(root))
    return [e for n in names if (e := layout.lease_epoch(n)) is not None]


def read_at(fs: AbstractFileSystem, root: str, epoch: int) -> LeaseInfo | None:
    """The lease of ``epoch``, read by its name; None if there is none. A file that is not
    a JSON object (half-written by a writer that died) has an empty holder: dead."""
    path = layout.lease_path(root, epoch)
    try:
        holder = json.loads(storage.read_own(fs, root, path))
    except FileNotFoundError:
        return None
    except ValueError:
        holder = {}
    return LeaseInfo(epoch, holder if isinstance(holder, dict) else {})


def current(fs: AbstractFileSystem, root: str) -> LeaseInfo | None:
    """The lease with the highest epoch, or None if there never was one."""
    for epoch in sorted(epochs(fs, root), reverse=True):
        if (info := read_at(fs, root, epoch)) is not None:
            return info
    return None


def released(fs: AbstractFileSystem, root: str, epoch: int) -> bool:
    """Whether the lease of ``epoch`` says its writer let go of it (False if unreadable)."""
    try:
        info = read_at(fs, root, epoch)
    except OSError:
        return False
    return info is not None and info.holder.get("released") is True


def absent_error(fs: AbstractFileSystem, root: str, epoch: int, tries: int) -> StorageError:
    """What to say when the storage refused ``tries`` creates of the lease of ``epoch`` as
    existing while it shows no such file (waiting on it never ended)."""
    path = storage.to_url(fs, layout.lease_path(root, epoch))
    return StorageError(
        f"the storage refused to create {path}, answering that it exists ({tries} "
        f"{'try' if tries == 1 else 'tries'}), yet shows no such file: it does not answer as "
        "one store (a proxy or gateway in front of it, or a store that is not consistent); "
        "check it, then run the same command again"
    )
