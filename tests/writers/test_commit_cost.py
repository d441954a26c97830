"""A commit's clean-up does not read the kept versions' manifests (each grow read them all:
a one-input grow took 1.5-1.9 s at 600 versions, nearly all of it here), yet still removes
what a dead writer of a run left, and never a shard a kept version names."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli import layout


def records(i: int) -> Iterator[dict[str, Any]]:
    yield {"i": i}


def test_a_grow_reads_no_older_versions_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "s"
    for n in (4, 5, 6):
        snap.create(records, out, inputs=list(range(n)), workers=0, inputs_per_task=1)
    # an old version's archived manifest, unreadable: a commit that reads it warns
    (out / layout.VERSIONS_DIR / "v00000001.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = snap.create(records, out, inputs=list(range(7)), workers=0, inputs_per_task=1)
    assert info.version == 4 and info.num_records == 7
    assert not [r for r in caplog.records if "removing what it no longer needs" in r.message]
    assert sorted(int(b["i"][0]) for b in snap.open(out).loader(1, shuffle=False)) == list(range(7))


def test_a_dead_writers_shard_goes_and_kept_versions_shards_stay(tmp_path: Path) -> None:
    out = tmp_path / "s"
    snap.create(records, out, inputs=list(range(3)), workers=0, inputs_per_task=1)
    # version 1's shards: kept, named by it
    snap.create(records, out, inputs=list(range(3)), workers=0, inputs_per_task=1, overwrite=True)
    kept = sorted(p.name for p in (out / "shards").iterdir())
    # a run a writer died in: its directory and a shard of it, then a grow resumes nothing
    # of it (other inputs) and commits
    (out / "_runs" / "abcdef01").mkdir(parents=True)
    stray = out / "shards" / "abcdef01-00000-0000-00000007.arrow"
    stray.write_bytes(b"partial")
    snap.create(records, out, inputs=list(range(4)), workers=0, inputs_per_task=1)
    names = {p.name for p in (out / "shards").iterdir()}
    assert not stray.exists() and set(kept) <= names
    assert not (out / "_runs" / "abcdef01").exists()
    assert snap.open(out, version=1).num_records == 3
    for version in (1, 2, 3):
        assert sum(1 for _ in snap.open(out, version=version).loader(1)) >= 3
