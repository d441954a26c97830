"""The process-wide table of which record batches of each shard file were checked
(:mod:`snapshot_cli.readers.checked`) stays bounded over a long-lived process: files gone
leave it (a sweep whose trials each made and deleted a snapshot grew it by an entry a shard
for good: +19 MB RSS over 200 trials of 64 shards), and it holds at most ``MAX_FILES``, the
least recently opened going first. Entries of files still read keep their flags (not
checked again)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import checked


@pytest.fixture(autouse=True)
def _fresh_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checked, "_checked", {})
    monkeypatch.setattr(checked, "LOOK_OVER_MIN", 4)
    monkeypatch.setattr(checked, "_look_over_at", 4)


def opened(path: Path) -> np.ndarray:
    return checked.record_batches(str(path), (1, 2, "abcd"), 3)


def test_files_gone_leave_the_table_and_files_kept_keep_their_flags(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.write_bytes(b"x")
    flags = opened(kept)
    flags[1] = True  # checked
    for i in range(200):
        gone = tmp_path / f"gone-{i}"
        gone.write_bytes(b"x")
        opened(gone)
        gone.unlink()
    assert checked.entries() <= 8  # (gone ones since the last look)
    assert str(kept) in checked._checked
    assert opened(kept) is flags and flags[1]


def test_the_table_holds_at_most_max_files_the_least_recently_opened_going_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checked, "MAX_FILES", 16)
    files = [tmp_path / f"f{i}" for i in range(100)]
    for f in files:
        f.write_bytes(b"x")
    first = opened(files[0])
    for f in files[1:]:
        opened(f)
        assert opened(files[0]) is first  # opened often: never the least recent
        assert checked.entries() <= 16 + 1
    assert str(files[-1]) in checked._checked and str(files[1]) not in checked._checked


def test_a_sweep_making_and_deleting_a_snapshot_per_trial_keeps_the_table_bounded(
    tmp_path: Path,
) -> None:
    sizes = []
    for trial in range(6):
        path = tmp_path / f"trial-{trial}"
        snap.create(
            lambda i, trial=trial: [{"x": np.float32(i + trial)}], str(path), inputs=range(16),
            workers=0, inputs_per_task=1, params={"trial": trial}, progress=False,
        )  # fmt: skip
        assert sum(1 for _ in snap.open(str(path)).loader(4)) == 4
        shutil.rmtree(path)
        sizes.append(checked.entries())
    assert max(sizes) <= 2 * 16 + 4  # at most the last trial's shards and the one before


def test_files_are_looked_for_without_holding_up_other_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look over stats every file it holds: on a hung mount, a reader opening another
    shard meanwhile is not held up behind it (the table's lock is not held for the stats)."""
    import threading

    for i in range(3):
        opened(tmp_path / f"f{i}")  # (never made: gone at the look)
    stuck, release = threading.Event(), threading.Event()
    real = os.path.exists

    def hung(path: str) -> bool:
        if path.endswith("f0"):
            stuck.set()
            assert release.wait(30)
        return real(path)

    monkeypatch.setattr(checked.os.path, "exists", hung)
    looking = threading.Thread(target=opened, args=(tmp_path / "f3",))  # (the 4th: a look)
    looking.start()
    assert stuck.wait(30)
    other = threading.Thread(target=opened, args=(tmp_path / "other",))
    other.start()
    other.join(30)
    done = not other.is_alive()
    release.set()
    looking.join(30)
    assert done and not looking.is_alive()
    assert str(tmp_path / "f0") not in checked._checked


def test_a_schema_is_hashed_once_and_tells_schemas_apart() -> None:
    """The table's versions hold the schema's hash (a manifest edited since may give a file
    another schema); a wide schema's took 15 ms, once per schema object now."""
    import pyarrow as pa

    wide = pa.schema([(f"c{i}", pa.float32()) for i in range(100)])
    other = pa.schema([(f"c{i}", pa.float64()) for i in range(100)])
    first = checked.schema_key(wide)
    assert checked._keys[id(wide)] == (wide, first) and first == hash(wide)
    assert checked.schema_key(wide) == first
    assert checked.schema_key(other) != first
