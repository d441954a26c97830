"""A commit never writes a manifest snap's readers refuse: each value of a manifest out of
the readers' range, however it came there, is refused before anything is committed, and
the committed version stays the one readers see."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

import snapshot_cli as snap
from snapshot_cli.writers.commit import commit

MAX_COUNT = 1 << 40  # the readers' limit of a manifest's counts (history.MAX_COUNT)


def records(n: int) -> Any:
    yield {"a": n}


@pytest.mark.parametrize(
    ("part", "key", "value"),
    [("chunking", "inputs", MAX_COUNT), ("chunking", "inputs", 0),
     ("chunking", "bytes", -1), ("changes", "tasks_computed", MAX_COUNT)],
)  # fmt: skip
def test_a_manifest_readers_would_refuse_is_not_committed(
    tmp_path: Path, part: str, key: str, value: int
) -> None:
    out = tmp_path / "s"
    snap.create(records, str(out), inputs=[1, 2], workers=0)
    before = (out / "manifest.json").read_bytes()
    now = snap.open(str(out)).manifest
    assert now.history is not None
    history = dataclasses.replace(now.history, **{part: {**getattr(now.history, part), key: value}})
    bad = dataclasses.replace(now, history=history, run="0" * len(now.run))
    with pytest.raises(snap.SnapError, match=rf"nothing was committed.*{part}\.{key}"):
        commit(LocalFileSystem(), str(out), bad, replaces=now)
    assert (out / "manifest.json").read_bytes() == before
    assert snap.open(str(out)).num_records == 2


@pytest.mark.parametrize("first", [True, False], ids=["first version", "grow"])
@pytest.mark.parametrize("damage", ["removed", "cut short"])
def test_a_shard_removed_while_the_create_ran_is_not_committed(
    tmp_path: Path, first: bool, damage: str
) -> None:
    """A shard of the run removed before its commit (a ``snap gc`` that saw another writer
    hold the lease took a later writer's shards: on GCS that writer committed a version with
    18 of its 120 shards missing; locally it failed on "its parent directory does not
    exist"). Nothing is committed, the error says why, and the same create again computes
    those tasks and commits every record."""
    out, flag = tmp_path / "s", tmp_path / "sabotage"
    inputs = list(range(6))

    def made(n: int) -> Any:  # (the same code both times: a file says when to sabotage)
        if n == 5 and flag.exists():  # the last task: the others' shards are written
            victim = max((out / "shards").iterdir(), key=lambda p: p.stat().st_mtime_ns)
            if flag.read_text() == "removed":
                victim.unlink()
            else:
                victim.write_bytes(victim.read_bytes()[:-8])
        yield {"a": n}

    if not first:
        snap.create(made, str(out), inputs=inputs[:3], workers=0, inputs_per_task=1)
    before = None if first else (out / "manifest.json").read_bytes()
    flag.write_text(damage)
    with pytest.raises(snap.StorageError, match=r"nothing was committed: 1 shard of the "
                       r"version this create made is gone or cut short \(shards/"):  # fmt: skip
        snap.create(made, str(out), inputs=inputs, workers=0, inputs_per_task=1)
    if first:
        assert not (out / "manifest.json").exists()
    else:
        assert (out / "manifest.json").read_bytes() == before
    flag.unlink()
    info = snap.create(made, str(out), inputs=inputs, workers=0, inputs_per_task=1)
    assert info.tasks - info.tasks_reused >= 1
    assert sorted(int(a) for b in snap.open(str(out)).loader(6) for a in b["a"]) == inputs
