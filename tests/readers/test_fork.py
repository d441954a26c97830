"""A snapshot opened in a parent replays in a forked child (torch DataLoader workers fork):
the child gets its own filesystem client and its own fetch threads."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import fetch


def _child(snapshot: snap.Snapshot, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    labels = np.concatenate([b["label"] for b in snapshot.loader(16, seed=3)])
    out.put(sorted(labels.tolist()))


def test_forked_child_replays_a_remote_snapshot(
    write_pipeline, memfs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    pipeline = write_pipeline(
        """
        import numpy as np
        def preprocess(path):
            with open(path) as f:
                i = int(f.read())
            for k in range(50):
                yield {"label": np.int64(i * 50 + k), "x": np.random.default_rng(k).random(256)}
        """
    )
    (tmp_path / "in").mkdir()
    for i in range(4):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    url = "memory://forked/snap"
    snap.create(pipeline, url, inputs=[str(tmp_path / "in" / "*.txt")], workers=0)
    # Small ranges, so every shard goes through the fetch pool's threads (in both processes).
    monkeypatch.setattr(fetch, "DEFAULT_CHUNK", 4096)
    monkeypatch.setattr(fetch, "DEFAULT_STREAMS", 2)
    monkeypatch.setattr(fetch, "_shared", None)
    snapshot = snap.open(url)
    loader = snapshot.loader(16, seed=3)
    parent = sorted(np.concatenate([b["label"] for b in loader]).tolist())
    assert parent == list(range(200))
    assert fetch.shared_fetcher().requests > 4  # the parent's pool has threads now
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child, args=(snapshot, out))
    child.start()
    try:
        got = out.get(timeout=20)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert got == parent
