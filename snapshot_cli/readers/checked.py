"""Which record batches of each local shard file this process has checked (its crc32c per
record batch, format 2), so that a new loader of the same files (the next epoch, a sweep's
next trial) does not check them again.

One entry per file path, for one version of it (size, mtime, crc32c): a file rewritten since
is checked again, and its new version replaces the old one. So does each use of a
``cache_dir`` entry, which sets its mtime (least recently used first): those are checked
again at every open, and the table stays one entry per file (it grew by one per use: ~20 KB
an epoch of a 40-shard snapshot, for good).
"""

from __future__ import annotations

import os
import threading

import numpy as np

Version = tuple[int, int, str]  # size, mtime_ns, crc32c
_checked: dict[str, tuple[Version, np.ndarray]] = {}
_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_lock=threading.Lock()))


def seen(path: str, version: Version) -> bool:
    """Whether this version of the file was opened (and its schema checked) here before."""
    with _lock:
        held = _checked.get(path)
    return held is not None and held[0] == version


def record_batches(path: str, version: Version, count: int) -> np.ndarray:
    """The flags of this version's ``count`` record batches, True once one is checked (shared
    by every reader of it in this process; another version's replaced)."""
    with _lock:
        held = _checked.get(path)
        if held is None or held[0] != version or len(held[1]) != count:
            held = _checked[path] = (version, np.zeros(count, bool))
        return held[1]


def entries() -> int:
    """How many files the table holds (for tests)."""
    return len(_checked)
