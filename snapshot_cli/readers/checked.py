"""Which record batches of each local shard file this process has checked (its crc32c per
record batch, format 2), so that a new loader of the same files (the next epoch, a sweep's
next trial) does not check them again.

One entry per file path, for one version of it (size, mtime, crc32c) as read by one schema (a
manifest edited since may give the same file another): a file rewritten since, or read by
another schema, is checked again, and its new version replaces the old one. So does each use of a
``cache_dir`` entry, which sets its mtime (least recently used first): those are checked
again at every open, and the table stays one entry per file (it grew by one per use: ~20 KB
an epoch of a 40-shard snapshot, for good).

Files this process read and that are gone (a sweep's trial that made its own snapshot and
deleted it: 64 entries, ~32 KiB, a trial, for good) leave the table whenever it has doubled
since it was last looked over, and it holds at most MAX_FILES, the least recently opened
going first (a file that left is only checked again if it is opened again).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

Version = tuple[int, int, str, int]  # size, mtime_ns, crc32c, the schema's hash
MAX_FILES = 65_536  # (~0.5 KiB each)
LOOK_OVER_MIN = 1024  # entries before the table is first looked over for files gone
_checked: dict[str, tuple[Version, np.ndarray]] = {}  # least recently opened first
_look_over_at = LOOK_OVER_MIN
_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_lock=threading.Lock()))


def schema_key(schema: Any) -> int:
    """``hash(schema)`` for a :data:`Version`, worked out once a schema object: a schema of
    30,000 columns takes 15 ms to hash, which every shard's open paid."""
    held = _keys.get(id(schema))
    if held is None or held[0] is not schema:
        if len(_keys) >= 64:  # (a sweep's snapshots: the table stays small)
            _keys.clear()
        held = _keys[id(schema)] = (schema, hash(schema))
    return held[1]


_keys: dict[int, tuple[Any, int]] = {}  # id(schema) -> (the schema, kept alive; its hash)


def seen(path: str, version: Version) -> bool:
    """Whether this version of the file was opened (and its schema checked) here before."""
    with _lock:
        held = _checked.get(path)
    return held is not None and held[0] == version


def record_batches(path: str, version: Version, count: int) -> np.ndarray:
    """The flags of this version's ``count`` record batches, True once one is checked (shared
    by every reader of it in this process; another version's replaced)."""
    global _look_over_at
    with _lock:
        held = _checked.pop(path, None)
        if held is None or held[0] != version or len(held[1]) != count:
            held = (version, np.zeros(count, bool))
        _checked[path] = held  # (the most recently opened, last)
        paths = list(_checked) if len(_checked) >= _look_over_at else None
        if paths is not None:
            _look_over_at = MAX_FILES + 1  # (one look at a time)
    if paths is not None:  # the files looked for without the lock (a slow mount's stats)
        _look_over([p for p in paths if not os.path.exists(p)])
    return held[1]


def _look_over(gone: list[str]) -> None:
    """Files gone (``gone``, looked for without the lock: a file made again since is only
    checked again) leave the table, then the least recently opened beyond MAX_FILES (down to
    3/4 of it, so that a table of files all still there is not looked over at every open)."""
    global _look_over_at
    with _lock:
        for path in gone:
            _checked.pop(path, None)
        if len(_checked) > MAX_FILES:
            for path in list(_checked)[: len(_checked) - MAX_FILES * 3 // 4]:
                del _checked[path]
        _look_over_at = min(max(LOOK_OVER_MIN, 2 * len(_checked)), MAX_FILES + 1)


def entries() -> int:
    """How many files the table holds (for tests)."""
    return len(_checked)
