"""A writer paused in its commit (a stopped job, a suspended VM) while another takes its lease
and commits: when it goes on, it commits nothing, and the other's version stays whole.

A probe stopped writer A (strace's SIGSTOP) just before it wrote ``manifest.json``; writer B
waited out the lease, committed version 2 and tidied (removing A's run and shards); resumed,
A wrote its manifest over B's, naming shards B had removed: readers failed, B's records were
gone. Here the pause is a fault injected between the steps of A's commit: B's real commit
runs there, and A's lease is found lost (``held``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.errors import LeaseError, SnapshotExistsError
from snapshot_cli.manifest import Manifest
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers import commit as commit_mod


def preprocess(i: int, *, per: int = 1) -> Any:
    for k in range(per):
        yield {"id": np.int64(i * 10 + k)}


def _version_2(root: Path, copy: Path, inputs: int, **kw: Any) -> Manifest:
    """A version 2 made in a copy of ``root`` (version 1), its shards copied back into
    ``root``: a commit of it there finds every shard it names."""
    shutil.copytree(root, copy)
    snap.create(preprocess, str(copy), inputs=range(inputs), workers=0, inputs_per_task=1, **kw)
    for shard in (copy / "shards").iterdir():
        if not (root / "shards" / shard.name).exists():
            shutil.copy2(shard, root / "shards" / shard.name)
    made = snap.open(str(copy)).manifest
    assert made.version == 2
    return made


@pytest.fixture
def two_writers(tmp_path: Path) -> tuple[Path, Manifest, Manifest, Manifest]:
    root = tmp_path / "s"
    snap.create(preprocess, str(root), inputs=range(3), workers=0, inputs_per_task=1)
    first = snap.open(str(root)).manifest
    a = _version_2(root, tmp_path / "a", 5)  # (a grow)
    b = _version_2(root, tmp_path / "b", 3, params={"per": 2}, overwrite=True)
    return root, first, a, b


def _paused_before_archiving(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """Run ``then`` (the other writer's whole commit) once, when A's commit, past its first
    look at the committed version, keeps the replaced version's copy: the pause."""
    real, done = commit_mod._archive, []

    def archive(fs: Any, root: str, m: Manifest, check: bool = True) -> None:
        if not done:
            done.append(1)
            then()  # (its own archives pass through: done)
        real(fs, root, m, check)

    monkeypatch.setattr(commit_mod, "_archive", archive)


def test_a_writer_paused_before_its_manifest_commits_nothing_over_another(
    two_writers: tuple[Path, Manifest, Manifest, Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, first, a, b = two_writers
    fs, path = storage.resolve(str(root))
    _paused_before_archiving(monkeypatch, lambda: commit_mod.commit(fs, path, b, first))
    with pytest.raises(SnapshotExistsError, match="replaced by another writer meanwhile"):
        commit_mod.commit(fs, path, a, replaces=first, held=lambda: None)
    now = snap.open(str(root))
    assert (now.manifest.fingerprint, now.manifest.run) == (b.fingerprint, b.run)
    kept = snap.open(str(root), version=2).manifest  # (A's copy, written over B's: B's again)
    assert (kept.fingerprint, kept.run) == (b.fingerprint, b.run)
    ids = sorted(int(i) for batch in now.loader(4) for i in batch["id"])
    assert ids == [i * 10 + k for i in range(3) for k in range(2)]
    assert verify(snap.open(str(root))).ok


def test_a_writer_whose_lease_was_taken_commits_nothing(
    two_writers: tuple[Path, Manifest, Manifest, Manifest],
) -> None:
    """The taker has not committed yet: the version is still the one A replaces, but A's
    lease is gone (it would have written over the taker's run): A stops, saying why."""
    root, first, a, _ = two_writers
    fs, path = storage.resolve(str(root))
    calls: list[int] = []

    def lost() -> None:
        calls.append(1)
        if len(calls) > 1:  # (held at the start of the commit, lost by its last step)
            raise LeaseError("this writer lost the lease: taken over by vm:1")

    with pytest.raises(LeaseError, match="taken over"):
        commit_mod.commit(fs, path, a, replaces=first, held=lost)
    assert len(calls) == 2
    now = snap.open(str(root)).manifest
    assert (now.fingerprint, now.run) == (first.fingerprint, first.run)
