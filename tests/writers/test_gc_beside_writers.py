"""``snap gc`` while other writers come and go (:mod:`snapshot_cli.writers.gc_watch`), and
``_versions/`` read while a writer commits (:func:`snapshot_cli.versions.committed_after`):
found by a concurrency probe, made here at the moment each race needs, not by timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

import snapshot_cli as snap
from snapshot_cli import layout, versions
from snapshot_cli.writers import gc as gc_mod
from snapshot_cli.writers import gc_watch

A_RUN, B_RUN, DEAD_RUN = "a0a0a0a0a0", "b1b1b1b1b1", "c2c2c2c2c2"


def records(n: int) -> Any:
    yield {"n": n}


def lease(root: Path, epoch: int, run: str, released: bool = False) -> None:
    """A writer's lease of ``epoch`` (on another host: live by its heartbeat alone)."""
    holder = {"host": "elsewhere", "pid": 1, "id": f"w{epoch}", "ttl": 1e9, "heartbeat": 9e9,
              "run": run, "released": released}  # fmt: skip
    (root / "_runs" / f"lease-{epoch:08d}.json").write_text(json.dumps(holder))


def run_of(root: Path, run: str, writer: int) -> tuple[Path, Path]:
    """A run's state and one shard it wrote (as a writer of lease epoch ``writer``)."""
    (root / "_runs" / run).mkdir()
    (root / "_runs" / run / "run.json").write_text("{}")
    shard = root / "shards" / f"{run}-00000-0000-{writer:08d}.arrow"
    shard.write_bytes(b"x" * 100)
    return root / "_runs" / run, shard


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, int]:
    """A committed snapshot, a dead run's files in it, and a live writer A's lease."""
    root = tmp_path / "s"
    snap.create(records, str(root), inputs=list(range(4)), workers=0)
    epochs = [int(p.stem.split("-")[1]) for p in (root / "_runs").glob("lease-*.json")]
    a = max(epochs) + 1
    run_of(root, DEAD_RUN, a - 1)
    lease(root, a, A_RUN)
    return root, a


def test_gc_stops_where_another_writer_took_the_lease_while_it_ran(
    snapshot: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc saw writer A live (keeping A's run), then A let go and B took the lease and began
    its run before gc listed: gc removed B's run state and shards as "state of a dead run"
    and "in no committed version". It now spares B's shards (their names carry B's lease
    epoch) and stops before removing anything once the lease is another's."""
    root, a = snapshot
    real = gc_mod.find_garbage
    made: list[Path] = []

    def then_b_takes_over(*args: Any, **kwargs: Any) -> Any:
        lease(root, a, A_RUN, released=True)
        lease(root, a + 1, B_RUN)
        made.extend(run_of(root, B_RUN, a + 1))
        return real(*args, **kwargs)

    monkeypatch.setattr(gc_mod, "find_garbage", then_b_takes_over)
    report = gc_mod.gc(str(root), retention=0)
    assert report.garbage == []  # nothing removed
    assert gc_watch.STOPPED in (report.note or "")
    assert all(p.exists() for p in made)
    monkeypatch.setattr(gc_mod, "find_garbage", real)
    lease(root, a + 1, B_RUN, released=True)  # B done (it committed nothing)
    removed = {g.path for g in gc_mod.gc(str(root), retention=0).garbage}
    assert {f"_runs/{B_RUN}", f"_runs/{DEAD_RUN}"} <= removed  # the next gc judges them
    assert snap.open(str(root)).num_records == 4


def test_a_later_writer_s_shards_are_never_garbage_to_a_gc_beside_a_writer(
    snapshot: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even where the lease looks unchanged at each look (B took it and wrote between two
    looks), a shard named by a writer after the one gc saw is not listed."""
    root, a = snapshot
    _, b_shard = run_of(root, B_RUN, a + 1)
    _, dead_shard = run_of(root, "d3d3d3d3d3", a - 1)
    listed = {g.path for g in gc_mod.gc(str(root), dry_run=True, retention=0).garbage}
    assert f"shards/{b_shard.name}" not in listed
    assert f"shards/{dead_shard.name}" in listed
    assert layout.shard_writer(b_shard.name) == a + 1
    assert layout.shard_writer("0a1b2c3d4e-00001-0000.arrow") is None  # (names before epochs)


def test_a_commit_between_reading_the_manifest_and_listing_is_no_rollback(
    tmp_path: Path,
) -> None:
    """verify (or gc) read manifest.json (version 1), then a grow committed version 2 and
    removed its run, then ``_versions/`` and ``_runs/`` were listed: version 2 looked
    committed after the manifest read, and a healthy snapshot was "put back to an older
    copy" (exit 1, advice to delete version 2's copy). A manifest.json really put back is
    still found."""
    root = tmp_path / "s"
    fs = LocalFileSystem()
    snap.create(records, str(root), inputs=list(range(3)), workers=0)
    stale = snap.open(str(root)).manifest
    v1_text = (root / "manifest.json").read_text()
    snap.create(records, str(root), inputs=list(range(4)), workers=0)
    assert versions.committed_after(fs, str(root), stale) == []
    (root / "manifest.json").write_text(v1_text)  # put back by hand
    newer = versions.committed_after(fs, str(root), snap.open(str(root)).manifest)
    assert [m.version for m in newer] == [2]
