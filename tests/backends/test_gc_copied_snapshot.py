"""A snapshot copied without ``_versions/`` (its ``manifest.json`` and ``shards/`` only: what
"copy the data" often means) made ``snap gc`` refuse for good ("the listing of _versions
lacks the committed version ... snap verify the snapshot"), and verify said the copy was
fine. gc writes the committed version's copy again from ``manifest.json`` (the same bytes,
docs/format.md §3.1) and collects; a dry run says it would. On every storage backend."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers.gc import gc
from tests.backends.conftest import Backend


def _records(tag: int) -> Any:
    def preprocess() -> Any:
        for i in range(6):
            yield {"x": np.full(50, i, np.uint8), "i": i + 100 * tag}

    return preprocess


def _labels(url: str) -> list[int]:
    with snap.open(url).loader(batch_size=4, shuffle=False) as loader:
        return sorted(int(v) for b in loader for v in b["i"])


def test_gc_of_a_copy_without_versions_restores_the_committed_copy(backend: Backend) -> None:
    fs = backend.fs
    src, dst = backend.url("src"), backend.url("copy")
    snap.create(_records(0), src, workers=0)
    snap.create(_records(1), src, workers=0, overwrite=True)  # version 2, version 1's shards
    src_path, dst_path = backend.path(src), backend.path(dst)
    fs.makedirs(f"{dst_path}/shards", exist_ok=True)
    for name in fs.ls(f"{src_path}/shards", detail=False):
        fs.pipe_file(f"{dst_path}/shards/{name.rsplit('/', 1)[1]}", fs.cat_file(name))
    manifest = fs.cat_file(f"{src_path}/manifest.json")
    fs.pipe_file(f"{dst_path}/manifest.json", manifest)
    backend.refresh()
    version = json.loads(manifest)["history"]["version"]
    copy = f"{dst_path}/_versions/v{version:08d}.json"

    preview = gc(dst, dry_run=True, retention=0)
    assert preview.note is not None and preview.note.startswith("would write ")
    assert not fs.exists(copy)
    old = {g.path for g in preview.garbage}
    assert old and all(p.startswith("shards/") for p in old)  # version 1's, in no version

    done = gc(dst, retention=0)
    assert done.note is not None and done.note.startswith("wrote "), done.note
    backend.refresh()
    assert fs.cat_file(copy) == manifest
    assert {g.path for g in done.garbage} == old
    assert _labels(dst) == _labels(src) == list(range(100, 106))
    again = gc(dst, retention=0)
    assert again.note is None and not again.garbage


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_snapshot_with_its_copy_gets_no_note(backend: Backend) -> None:
    snap.create(_records(0), backend.url(), workers=0)
    report = gc(backend.url(), retention=0)
    assert report.note is None and not report.garbage


@pytest.mark.parametrize("backend", ["local", "gcs"], indirect=True)
def test_shards_of_versions_whose_copies_were_lost_are_kept_for_the_retention(
    backend: Backend,
) -> None:
    """`_versions/` lost in place (an rm -r, a lifecycle rule): gc restored the current copy
    and removed at once every shard only older versions had, "in no committed version",
    while a reader of the version replaced a minute before still read it. They are kept
    until the retention has passed since the current version replaced them, run after run."""
    url = backend.url()
    snap.create(_records(0), url, workers=0)
    old_reader = snap.open(url)
    snap.create(_records(1), url, workers=0, overwrite=True)
    backend.fs.rm(f"{backend.path(url)}/_versions", recursive=True)
    backend.refresh()
    for _ in range(2):  # (the second run finds the restored copy: the same answer)
        report = gc(url)  # (7 days)
        assert not report.garbage, report.garbage
    assert _labels_of(old_reader) == list(range(6))
    gone = gc(url, retention=0).garbage
    assert gone and all("older versions' copies are missing" in g.reason for g in gone)


def _labels_of(s: Any) -> list[int]:
    with s.loader(batch_size=4, shuffle=False) as loader:
        return sorted(int(v) for b in loader for v in b["i"])
