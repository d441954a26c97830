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


def test_versions_of_a_snapshot_moved_since_it_was_opened_says_so(
    two: tuple[Path, Path],
) -> None:
    """versions() listed the version opened as the current one of a snapshot deleted or
    moved since (the storage has none); head and the loader said it was moved."""
    _, b = two
    s = snap.open(str(b))
    assert [v["current"] for v in s.versions()] == [False, True]
    b.rename(b.with_name("moved"))
    with pytest.raises(snap.ManifestError, match="was moved or deleted since it was opened"):
        s.versions()


def test_a_snapshot_created_again_at_a_lower_version_is_not_said_to_replace(
    tmp_path: Path,
) -> None:
    """A reader of version 2 of a snapshot deleted and created again (version 1 now) was
    told its shard "belongs to a version that version 1 has replaced, and was removed by
    snap gc": neither happened."""
    import shutil

    path = tmp_path / "s"
    for inputs in ([0], [0, 1]):
        snap.create(records, str(path), inputs=inputs, inputs_per_task=1, workers=0)
    opened = snap.open(str(path))  # version 2 (made again before it is read: no loader
    shutil.rmtree(path)  # thread may meet the moment between, when it is nowhere)
    snap.create(records, str(path), inputs=[5], workers=0)
    with pytest.raises(snap.CorruptShardError) as err:
        list(opened.loader(50, shuffle=False))
    said = str(err.value)
    assert "the snapshot's version now, 1, does not list it" in said, said
    assert "or the snapshot was created again or restored from a copy since" in said


def test_versions_of_a_snapshot_that_lost_its_manifest_names_the_copy(
    two: tuple[Path, Path],
) -> None:
    """manifest.json lost in place (its `_versions/` still there): versions() said the
    snapshot was moved or deleted; snap.open names the copy to restore, and so does it."""
    _, b = two
    s = snap.open(str(b))
    (b / "manifest.json").unlink()
    with pytest.raises(snap.ManifestError, match="has lost its manifest.json") as err:
        s.versions()
    assert "v00000002.json" in str(err.value)
