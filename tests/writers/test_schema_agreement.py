"""Tasks whose schemas disagree stop the run when the second of them finishes, not at commit.

Every task writes its own shards, and the snapshot's schema is the one they all share. A
column that changes type, other keys or the same keys in another order is an error naming
both tasks; it used to come only after every other task had run (hours of work, for a
mistake the second task showed), and is now raised as soon as the result disagreeing arrives.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

TASKS = 8


def _odd_one(kind: str) -> Callable[[int], dict[str, Any]]:
    """A record maker whose input 1 disagrees with the others in the way ``kind`` names."""

    def make(i: int) -> dict[str, Any]:
        odd = i == 1
        if kind == "type":
            return {"a": float(i) if odd else i, "b": 1}
        if kind == "keys":
            return {"a": i, "c": 1} if odd else {"a": i, "b": 1}
        if kind == "order":
            return {"b": 1, "a": i} if odd else {"a": i, "b": 1}
        if kind == "ragged":  # uniform arrays in each task, of another length in one
            return {"a": i, "b": np.zeros(3 if odd else 2, np.int32)}
        raise AssertionError(kind)

    return make


def _pipeline(
    kind: str, calls: Path, long_after: int | None = None
) -> Callable[[int], Iterator[dict[str, Any]]]:
    """Records of ``_odd_one(kind)``; the inputs from ``long_after`` on take long (a minute,
    never reached when the run stops as it should): the two that disagree always finish
    first, whichever worker takes which."""
    make = _odd_one(kind)

    def preprocess(i: int) -> Iterator[dict[str, Any]]:
        (calls / f"{i}").touch()  # which inputs were started (also from worker processes)
        if long_after is not None and i >= long_after:
            threading.Event().wait(60)
        (calls / f"{i}.done").touch()
        yield make(i)

    return preprocess


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["type", "keys", "order", "ragged"])
def test_a_task_that_disagrees_stops_the_run(tmp_path: Path, kind: str, workers: int) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    out = tmp_path / "s"
    started = time.monotonic()
    with pytest.raises(snap.SchemaMismatchError) as exc:
        snap.create(_pipeline(kind, calls, long_after=2), out, inputs=list(range(TASKS)),
                    workers=workers, inputs_per_task=1)  # fmt: skip
    message = str(exc.value)
    assert "task 1 (input 1)" in message, message
    finished = sorted(int(p.stem) for p in calls.glob("*.done"))
    # it stopped at the second result, with the long tasks that had started cut short (in
    # this process, tasks run in order: none of them started)
    assert finished == [0, 1], finished
    assert len(list(calls.glob("*[0-9]"))) <= 2 + workers
    assert time.monotonic() - started < 60  # (before the fix: a minute for each long task)
    assert not (out / "manifest.json").exists()


def test_another_order_names_both_and_the_fixed_order_to_build(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    with pytest.raises(snap.SchemaMismatchError) as exc:
        snap.create(_pipeline("order", calls), tmp_path / "s", inputs=[0, 1], workers=0,
                    inputs_per_task=1)  # fmt: skip
    message = str(exc.value)
    assert "wrote the same columns in another order: ['a', 'b'] vs ['b', 'a']" in message
    assert "{k: record[k] for k in ['a', 'b']}" in message
    assert "df[['a', 'b']]" in message

    def fixed(i: int) -> Iterator[dict[str, Any]]:  # the advice, followed
        record = _odd_one("order")(i)
        yield {k: record[k] for k in ["a", "b"]}

    snap.create(fixed, tmp_path / "s", inputs=[0, 1], workers=0, inputs_per_task=1)
    batch = next(iter(snap.open(tmp_path / "s").loader(batch_size=2, shuffle=False)))
    assert list(batch) == ["a", "b"]
    assert batch["a"].tolist() == [0, 1]


def test_a_resumed_run_checks_the_tasks_it_had_done(tmp_path: Path) -> None:
    """A run stopped by a disagreement keeps the tasks it finished; running it again with the
    same (unchanged) function stops at once, naming the same two tasks, computing nothing."""
    calls = tmp_path / "calls"
    calls.mkdir()
    out = tmp_path / "s"
    pipeline = _pipeline("type", calls)
    for _ in range(2):
        with pytest.raises(snap.SchemaMismatchError, match=r"task 0 \(input 0\)"):
            snap.create(pipeline, out, inputs=list(range(TASKS)), workers=0, inputs_per_task=1)
        ran = sorted(int(p.name) for p in calls.iterdir() if "." not in p.name)
        for p in calls.iterdir():
            os.unlink(p)
    assert ran == [], ran  # the second run computed nothing
