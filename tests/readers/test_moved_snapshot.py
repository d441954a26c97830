"""A snapshot moved, deleted or repointed while a loader reads it is said to be so.

The loader reads the shard files it opened by their path: a shard it opens after the
snapshot's directory moved is missing. It said "the snapshot is damaged ... running the same
snap create again computes the tasks of missing shards again" (nothing was damaged), and
through a link repointed at another snapshot, "it belongs to a version of the snapshot that
version 2 has replaced, and was removed (by snap gc ...)" (the other snapshot's version).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap


def records(i: int) -> Any:
    for j in range(50):
        yield {"i": i * 1000 + j, "x": np.full(256, j, np.float32)}


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    snap.create(records, str(a), inputs=list(range(40)), inputs_per_task=1, workers=0)
    snap.create(records, str(b), inputs=[100, 101], workers=0)
    snap.create(records, str(b), inputs=[100, 101, 102], workers=0)  # b at version 2
    return a, b


def read_after(path: Path, change: Any) -> str:
    """Read ``path`` in order, 100 records a window; ``change()`` after the first batch."""
    batches = iter(snap.open(str(path)).loader(50, shuffle=False, shuffle_buffer=100))
    next(batches)
    change()
    with pytest.raises(snap.CorruptShardError) as err:
        for _ in batches:
            pass
    return str(err.value)


def test_a_moved_snapshot_is_said_to_be_moved(two: tuple[Path, Path]) -> None:
    a, _ = two
    said = read_after(a, lambda: a.rename(a.with_name("moved")))
    assert f"{a} was moved or deleted while it was read" in said, said
    assert "damaged" not in said and "snap create" not in said


def test_a_link_repointed_is_said_to_lead_elsewhere(two: tuple[Path, Path]) -> None:
    a, b = two
    link = a.with_name("current")
    os.symlink(a, link)

    def repoint() -> None:  # atomically (mv -T): a reader never meets no link at all
        os.symlink(b, link.with_name("next"))
        os.replace(link.with_name("next"), link)

    said = read_after(link, repoint)
    assert f"{link} leads to {b} now, not to {a}, where this snapshot was opened" in said, said
    assert "gc" not in said and "version 2" not in said
