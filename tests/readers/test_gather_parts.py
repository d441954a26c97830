"""Large batches of a gathered window gathered in parts, by every gather thread at once
(:meth:`snapshot_cli.readers.gather.GatherWindow.take_parts`, ``serve.SPLIT_BYTES``).

Gathered whole, a batch of many MiB (records of several MiB: video clips, volumes) was copied
by one thread while the other waited, and a window kept in order holds only one such batch.
The parts must make exactly the batch a slot window serves, whichever thread runs which part,
and a part that fails must fail the pass.
"""

from __future__ import annotations

import functools
import logging
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import gather, serve

from .conftest import same_batches

ROWS = 600


def small_records() -> Any:
    rng = np.random.default_rng(3)
    for start in range(0, ROWS, 150):
        ids = np.arange(start, start + 150)
        yield snap.Batch(id=ids, image=rng.integers(0, 256, (150, 3, 16, 16), dtype=np.uint8))


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("parts") / "small")
    snap.create(small_records, out, workers=0, shard_size="64KiB", batch_rows=40,
                compression="none")  # fmt: skip
    return out


def batches(path: str, **options: Any) -> list[dict[str, np.ndarray]]:
    with snap.open(path).loader(**options) as loader:
        return [{k: v.copy() for k, v in b.items()} for b in loader]


def slot_batches(path: str, monkeypatch: pytest.MonkeyPatch, **options: Any) -> list[Any]:
    """What slot windows serve (no gathered window, so no parts)."""
    with monkeypatch.context() as m:
        m.setattr(gather, "ENABLED", False)
        return batches(path, **options)


def counting_parts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of parts of every batch gathered in parts, as they are made."""
    seen: list[int] = []
    take_parts = gather.GatherWindow.take_parts

    def noting(self: gather.GatherWindow, a: int, b: int, parts: int) -> Any:
        batch, jobs = take_parts(self, a, b, parts)
        seen.append(len(jobs))
        return batch, jobs

    monkeypatch.setattr(gather.GatherWindow, "take_parts", noting)
    return seen


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_size", [7, 64, 1000])
def test_batches_gathered_in_parts_are_the_slot_windows_batches(
    small: str, monkeypatch: pytest.MonkeyPatch, shuffle: bool, batch_size: int
) -> None:
    """Every batch of the gathered epochs split (the thresholds lowered to the test's small
    records), short last batches too: the very batches slot windows serve, in order."""
    options = {"batch_size": batch_size, "shuffle": shuffle, "seed": 4, "epochs": 3,
               "shuffle_buffer": 250}  # fmt: skip
    theirs = slot_batches(small, monkeypatch, **options)
    monkeypatch.setattr(gather, "GATHER_MIN_VALUE_BYTES", 0)
    monkeypatch.setattr(serve, "SPLIT_BYTES", 1)
    monkeypatch.setattr(serve, "GATHER_BYTES", 2048)  # a part: 2 KiB, 2-3 records
    parts = counting_parts(monkeypatch)
    ours = batches(small, **options)
    same_batches(ours, theirs)
    assert parts and max(parts) > 1  # the epochs after the first gathered in parts
    assert min(parts) >= 1 and sum(len(b["id"]) for b in ours) == 3 * ROWS


def large_records(i: int) -> Any:
    rng = np.random.default_rng(i)
    for k in range(8):
        yield {"clip": rng.integers(0, 256, (1024, 1024), dtype=np.uint8), "id": 8 * i + k}


def test_records_of_a_mib_in_batches_of_20_mib_are_gathered_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the default thresholds: 20 MiB batches of 1 MiB records go in parts of 8 MiB, kept
    in order and shuffled, and are the slot windows' batches."""
    out = str(tmp_path / "large")
    snap.create(large_records, out, inputs=list(range(5)), workers=0, compression="none")
    for shuffle in (False, True):
        options = {"batch_size": 20, "shuffle": shuffle, "seed": 1, "epochs": 2}
        theirs = slot_batches(out, monkeypatch, **options)
        with monkeypatch.context() as m:
            parts = counting_parts(m)
            ours = batches(out, **options)
        same_batches(ours, theirs)
        assert parts and set(parts) <= {3}, parts  # 20 records of 1 MiB in parts of 8 MiB
        assert sorted(i for b in ours for i in b["id"].tolist()) == sorted(list(range(40)) * 2)


def test_a_part_that_fails_fails_the_pass(small: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in any part of a batch reaches the training loop (the batch is never handed
    on half gathered), and the loader still closes."""
    monkeypatch.setattr(gather, "GATHER_MIN_VALUE_BYTES", 0)
    monkeypatch.setattr(serve, "SPLIT_BYTES", 1)
    monkeypatch.setattr(serve, "GATHER_BYTES", 2048)
    take_parts = gather.GatherWindow.take_parts

    def failing(self: gather.GatherWindow, a: int, b: int, parts: int) -> Any:
        batch, jobs = take_parts(self, a, b, parts)

        def broken() -> None:
            raise OSError(5, "part failed")

        return batch, [*jobs[:-1], broken]

    monkeypatch.setattr(gather.GatherWindow, "take_parts", failing)
    loader = snap.open(small).loader(64, seed=1, epochs=2)
    with pytest.raises(OSError, match="part failed"):
        for _ in loader:
            pass
    loader.close()


def test_parts_cancelled_with_their_pass_cancel_the_batch_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pass stopped (a break, close()) while parts of a batch are queued: the gather pool
    is shut down cancelling them, and the batch's future is cancelled with them, nothing
    logged (a part's callback that raised on a cancelled part was logged by concurrent.futures,
    a traceback per part, and the batch's future stayed pending). The first part is held
    running by an event, so that the others are queued when the pool is shut down."""
    running, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def first() -> None:
        running.set()
        release.wait()
        ran.append(0)

    jobs = [first, *(functools.partial(ran.append, k) for k in range(1, 6))]
    window = object.__new__(gather.GatherWindow)  # only its parts are asked for
    window.take_parts = lambda a, b, parts: ({"x": np.zeros(6)}, jobs)  # type: ignore[method-assign]
    pool = ThreadPoolExecutor(1)
    stand_in = types.SimpleNamespace(batch_bytes=serve.SPLIT_BYTES, gather_pool=pool)
    try:
        with caplog.at_level(logging.DEBUG, logger="concurrent.futures"):
            whole = serve.Server._take(stand_in, window, [(0, 0, 6)], lambda group: None)  # type: ignore[arg-type]
            assert running.wait(60)  # the first part taken by the pool's one thread
            pool.shutdown(wait=False, cancel_futures=True)
            release.set()
            pool.shutdown(wait=True)
    finally:
        release.set()
    assert whole.cancelled() and ran == [0]
    assert caplog.records == []
