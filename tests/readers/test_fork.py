"""A snapshot opened in a parent replays in a forked child (torch DataLoader workers fork):
the child gets its own filesystem client and its own fetch threads.

A loader forked in the middle of a pass (``multiprocessing``'s fork, ``os.fork``, after a
``next(iter(loader))`` to look at a batch) goes on in the child from the parent's position:
the parent's threads are not in the child, and a lock one of them held at the fork stays held
there for good (9 of 30 forked children of a probe hung on a shard's open gate). The tests
hold every lock of the loader and of snap's modules at the fork, so the child meets each
held, as it would by bad luck."""

from __future__ import annotations

import faulthandler
import functools
import gc
import multiprocessing
import os
import pickle
import random
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import fetch

# Forking a process with threads is what these tests do (Python 3.12+ warns of it).
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)


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


# --- a loader forked mid-pass --------------------------------------------------------------

LOCKS = (type(threading.Lock()), type(threading.RLock()))
FOLLOWED = (dict, list, tuple, set, frozenset, deque, threading.Condition, threading.Event)


def snaps_locks(*roots: object) -> list[Any]:
    """Every lock reachable from ``roots`` through snap's objects and containers, and every
    lock a module of snap's holds at module level."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    todo = list(roots)
    todo += [m.__dict__ for name, m in list(sys.modules.items()) if name.startswith("snapshot_cli")]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, LOCKS):
            found[id(obj)] = obj
        elif isinstance(obj, FOLLOWED) or type(obj).__module__.startswith("snapshot_cli"):
            todo.extend(gc.get_referents(obj))
    return list(found.values())


def forked(read: Any, hold: list[Any]) -> Any:
    """What ``read()`` returns in a child forked while the locks ``hold`` are held (each
    taken here, or held by a thread of the loader that waits on one taken here); None if the
    child failed (its traceback, after 60 s if it hangs, goes to stderr)."""
    taken = [lock for lock in hold if lock.acquire(timeout=0.2)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(r)
            faulthandler.dump_traceback_later(60, exit=True)
            with os.fdopen(w, "wb") as f:
                pickle.dump(read(), f)
        finally:
            os._exit(0)
    for lock in taken:
        lock.release()
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    return pickle.loads(data) if data and status == 0 else None


def records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(40):
        yield {"label": np.int64(40 * i + k), "x": np.full(512, k, np.float32)}


def labels(batches: Any) -> list[list[int]]:
    out = []
    for batch in batches:
        value = batch["label"]
        out.append((value.numpy() if hasattr(value, "numpy") else value).tolist())  # (torch's)
    return out


def read(how: str, loader: snap.Loader, it: Iterator[Any]) -> Any:
    """In the child: go on with the parent's pass, or start one."""
    if how == "state then a new pass":  # the child's loader is where the parent's is
        return loader.state_dict(), labels(loader)
    return labels(it if how in ("the same pass", "to_torch") else loader)


@pytest.mark.parametrize(
    ("how", "compression", "processes"),
    [
        ("the same pass", "zstd", 0),
        ("the same pass", "none", 0),
        ("a new pass", "lz4", 0),
        ("a new pass", "zstd", 2),
        ("to_torch", "zstd", 0),
        ("state then a new pass", "zstd", 0),
    ],
)
def test_a_loader_forked_mid_pass_goes_on_in_the_child(
    tmp_path: Path, how: str, compression: str, processes: int
) -> None:
    path = str(tmp_path / "s")
    snap.create(records, path, inputs=list(range(24)), workers=0, compression=compression,
                shard_size="64KiB")  # fmt: skip
    options = {"batch_size": 16, "seed": 5, "epochs": 2, "shuffle_buffer": 96,
               "processes": processes}  # fmt: skip
    rnd = random.Random(f"{how}{compression}")
    for trial in range(3):
        loader = snap.open(path).loader(**options)
        batches = loader.to_torch() if how == "to_torch" else loader
        it = iter(batches)
        for _ in range(rnd.randrange(1, len(loader) - 1)):
            next(it)
        state = batches.state_dict()
        reference = snap.open(path).loader(**options)
        reference.load_state_dict(state)
        expected = labels(reference)

        got = forked(functools.partial(read, how, loader, it), snaps_locks(loader, batches))
        if how == "state then a new pass":
            assert got == (state, expected), f"trial {trial}: the child's state or batches"
        else:
            assert got == expected, f"trial {trial}: the child's batches differ (or it failed)"
        assert labels(it) == expected  # the parent's pass, after the child, is its own
        loader.close()
