"""Task boundaries (writers/chunking.py): contiguous, complete, and stable under insertions,
deletions and changes elsewhere in the input list."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot_cli.writers.chunking import MAX_ITEMS_PER_TASK, MIN_TASKS, Chunking, window_max


def names(n: int, prefix: str = "gs://b/raw/") -> list[str]:
    return [f"{prefix}{i:07d}.jpg" for i in range(n)]


def groups(
    chunking: Chunking, inputs: list[str], sizes: list[int] | None = None
) -> list[tuple[str, ...]]:
    sizes = sizes or [0] * len(inputs)
    return [tuple(inputs[j] for j in r) for r in chunking.plan(inputs, sizes)]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 3000),
    target=st.integers(1, 64),
    fixed=st.booleans(),
    nbytes=st.sampled_from([0, 1 << 20, 64 << 20]),
)
def test_the_plan_is_contiguous_complete_and_nonempty(
    n: int, target: int, fixed: bool, nbytes: int
) -> None:
    c = Chunking(target, 0 if fixed else nbytes, fixed)
    plan = c.plan(names(n), [1000] * n)
    if n == 0:
        assert plan == [range(0)]
        return
    assert plan[0].start == 0 and plan[-1].stop == n
    assert all(a.stop == b.start for a, b in zip(plan, plan[1:], strict=False))
    assert all(len(r) > 0 for r in plan)
    if fixed:
        assert max(len(r) for r in plan) <= target
    elif nbytes == 0:  # never shorter than w + 1 inputs (the last one: w)
        w = Chunking(target).window
        assert all(len(r) >= w + 1 for r in plan[:-1]) and len(plan[-1]) >= min(w, n)


def test_tasks_are_about_their_target_and_rarely_much_longer() -> None:
    for target in (4, 16, 64):
        c = Chunking(target, 0)
        sizes = [len(r) for r in c.plan([f"gs://b/{i:07d}.jpg" for i in range(50_000)],
                                         [0] * 50_000)]  # fmt: skip
        mean = np.mean(sizes)
        assert 0.7 * target <= mean <= 1.1 * target, (target, mean)
        assert np.percentile(sizes, 99) <= 2.5 * mean and max(sizes) <= 4 * mean


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(0, 40))
def test_window_max_is_the_max_of_each_window(values: list[int], w: int) -> None:
    h = np.asarray(values, np.uint64)
    want = [max(values[max(0, j - w) : j + w + 1]) for j in range(len(values))]
    assert window_max(h, w).tolist() == want


def test_a_large_input_is_a_task_of_its_own() -> None:
    sizes = [10] * 20
    sizes[7] = 100 << 20
    plan = Chunking(8).plan([f"f{i}" for i in range(20)], sizes)
    assert range(7, 8) in plan


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(50, 2000),
    target=st.sampled_from([1, 2, 4, 8, 16, 64]),
    edits=st.lists(st.tuples(st.sampled_from(["add", "remove", "change"]), st.floats(0, 1)),
                   min_size=1, max_size=3),
    seed=st.integers(0, 1000),
)  # fmt: skip
def test_an_edit_changes_at_most_two_tasks_per_edit(
    n: int, target: int, edits: list[tuple[str, float]], seed: int
) -> None:
    """Adding, removing or resizing one input changes the task that holds it, and the next
    one when it was (or becomes) a boundary; every other task keeps exactly its inputs."""
    c = Chunking(target, 1 << 20)
    inputs, sizes = names(n), [random.Random(seed + i).randrange(1 << 16) for i in range(n)]
    before = set(groups(c, inputs, sizes))
    for what, where in edits:
        j = min(len(inputs) - 1, int(where * len(inputs)))
        if what == "add":
            inputs.insert(j, inputs[j] + ".new")
            sizes.insert(j, 1000)
        elif what == "remove" and len(inputs) > 1:
            del inputs[j], sizes[j]
        else:
            sizes[j] += 1 << 18  # a changed file: bigger
    after = set(groups(c, inputs, sizes))
    assert len(after - before) <= 2 * len(edits) + 1  # +1: the last task, cut by the end
    assert len(before - after) <= 2 * len(edits) + 1


def test_the_targets_give_parallel_slack_and_bounded_tasks() -> None:
    def tasks(sizes: list[int]) -> int:
        c = Chunking.choose(sizes)
        return len(c.plan(names(len(sizes)), sizes))

    assert MIN_TASKS * 3 // 4 <= tasks([1000] * 2000) <= MIN_TASKS * 3  # 64-128 on average
    assert tasks([10] * 5) >= 3
    c = Chunking.choose([0] * 1_000_000)
    assert c.inputs <= MAX_ITEMS_PER_TASK
    assert 50 <= tasks([64 << 20] * 100) <= 100  # 6.4 GB: about one input per task
    assert Chunking.choose([1] * 3, inputs_per_task=2) == Chunking(2, 0, fixed=True)


def test_fixed_groups_are_exact() -> None:
    assert Chunking(3, 0, fixed=True).plan(names(8), [0] * 8) == [range(0, 3), range(3, 6),
                                                                  range(6, 8)]  # fmt: skip
    assert Chunking(1).plan(names(4), [0] * 4) == [range(i, i + 1) for i in range(4)]


@pytest.mark.parametrize(
    "bad",
    [None, [], {"inputs": 0, "bytes": 0, "fixed": False}, {"inputs": 2, "bytes": -1, "fixed": True},
     {"inputs": 2, "bytes": 0, "fixed": "yes"}, {"inputs": 2, "bytes": 0}],
)  # fmt: skip
def test_bad_chunking_is_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError):
        Chunking.from_json(bad)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 1500), more=st.integers(1, 100), target=st.sampled_from([2, 8, 32]))
def test_appended_inputs_change_only_the_last_task(n: int, more: int, target: int) -> None:
    """A new day of files sorts last: every task of the old list but its last is kept."""
    c = Chunking(target, 0)
    old = groups(c, names(n))
    new = groups(c, names(n + more))
    assert new[: len(old) - 1] == old[:-1]
