"""Ctrl-C in a training loop (a notebook's interrupt button, a SIGINT) loses no batch: the loop
run again, or a loader resumed from ``state_dict()`` taken after the interrupt, hands over
exactly the batches that were not handed over yet, and no thread is left behind.

A KeyboardInterrupt is raised at every other call of snap's code from ``next()`` in turn
(the other half in other runs of the suite: a share drawn for each run, :mod:`tests.interrupts`),
on every path a pass takes: decoded windows of a compressed snapshot, an uncompressed one's
first epoch and its gathered later ones, in order and shuffled, decode processes, the global
order and a mixture.
The loader moved its position before a few calls that followed it: an interrupt in one of
them lost the batch (258 of 1,033 points of a probe)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from tests.interrupts import InterruptAt, calls, interrupted

OPTIONS = {"batch_size": 16, "seed": 3, "epochs": 2, "shuffle_buffer": 64}


def records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(40):
        yield {"label": np.int64(40 * i + k), "x": np.full(6, 40 * i + k, np.float32)}


def label(batch: dict[str, Any]) -> np.ndarray:
    value = batch["label"]
    return value.numpy().copy() if hasattr(value, "numpy") else value.copy()  # (torch's)


def labels(loader: Any) -> list[np.ndarray]:
    return [label(batch) for batch in loader]


def interrupted_pass(loader: Any, k: int) -> tuple[list[np.ndarray], str]:
    """The batches a loop took before an interrupt at the k-th call ("" if none came)."""
    got: list[np.ndarray] = []
    it = iter(loader)
    trace = InterruptAt(k)
    while (batch := interrupted(lambda: next(it, None), trace)) is not None:
        got.append(label(batch))
    return got, trace.where


# An interrupt raised where a generator is closed when it is freed (as Python does at any
# point a signal is checked) is printed as "Exception ignored", not raised: the test does that
# too, and checks what matters, the batches and the threads.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    ("compression", "shuffle", "processes", "adapter"),
    [
        ("zstd", True, 0, ""),
        ("none", True, 0, ""),
        ("none", False, 0, ""),
        ("zstd", True, 2, ""),
        ("lz4", True, 0, "to_torch"),  # (to_jax's passes share the adapters' code)
        ("lz4", True, 0, "global order"),
        ("none", True, 0, "mixture"),
    ],
    ids=[
        "zstd-shuffled",
        "none-shuffled",
        "none-in-order",
        "zstd-decode-processes",
        "to_torch",
        "global-order",
        "mixture",
    ],
)
def test_an_interrupt_at_any_call_loses_no_batch(
    tmp_path: Path, compression: str, shuffle: bool, processes: int, adapter: str
) -> None:
    out = tmp_path / "snap"
    snap.create(records, out, inputs=list(range(6)), workers=0, compression=compression,
                shard_size="2KiB", progress=False)  # fmt: skip
    s = snap.open(out)
    options = {**OPTIONS, "shuffle": shuffle, "processes": processes}
    if adapter == "to_torch":  # (one epoch: its passes are the loader's, as above)
        options["epochs"] = 1

    def make() -> Any:  # an adapter converts batches taken ahead (prefetch=2)
        if adapter == "mixture":  # (a sample of each, every epoch another)
            mixed = snap.mix([out, out], weights=[2, 1], epoch_records=s.num_records // 2)
            return mixed.loader(**{**options, "global_batch_size": 16, "batch_size": None})
        if adapter == "global order":
            return s.loader(**{**options, "global_batch_size": 16, "batch_size": None})
        loader = s.loader(**options)
        return getattr(loader, adapter)(prefetch=2) if adapter else loader

    whole = labels(make())
    after = whole + labels(_next_pass(make()))  # what a pass after the last gives
    assert len(whole) == options["epochs"] * (15 if adapter != "mixture" else 8)
    threads = threading.active_count()
    interrupts = 0
    for k in calls(2):  # (every other call: the run's share, tests.interrupts)
        loader = make()
        got, where = interrupted_pass(loader, k)
        if not where:  # the pass called fewer than k functions: every point was tried
            assert _same(got, whole)
            break
        interrupts += 1
        state = loader.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        # all handed over before the interrupt: the same loop run again is the next pass, as
        # after a loop that ended (zip(range(n), loader) ends so at each epoch); else the
        # rest of this one. Resumed from the state, a pass under way (its end recorded, the
        # loop interrupted before it ended) ends where it would have: at once, after its last
        # batch (a run checkpointed there resumed with an extra epoch)
        expected = after if len(got) == len(whole) else whole
        assert _same(got + labels(loader), expected), where  # the same loop run again
        ended = len(got) == len(whole) and state["pass_end"] is None
        assert _same(got + labels(resumed), after if ended else whole), where
        loader.close()
        resumed.close()
        assert threading.active_count() == threads, where
    assert interrupts > 50  # every other call of a pass: its windows, batches and shutdown


def _next_pass(loader: Any) -> Any:
    for _ in loader:
        pass
    return loader


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
