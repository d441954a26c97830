from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.units import MiB, parse_size
from snapshot_cli.writers.options import Compression, WriteOptions, plan_tasks


@pytest.mark.parametrize(
    ("text", "value"),
    [("256MiB", 256 * MiB), ("1GB", 10**9), ("4096", 4096), ("1.5KiB", 1536), (" 2 mib ", 2 * MiB)],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1MiB", "0", "12 parsecs"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_options_are_picklable() -> None:
    opts = WriteOptions(compression=Compression("lz4"), batch_rows=7)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="batch_rows must be a positive integer"):
        WriteOptions(batch_rows=0)
    with pytest.raises(ValueError, match="compression must be one of"):
        Compression("gzip")
    with pytest.raises(ValueError, match="zstd only"):
        Compression("lz4", 3)
    assert WriteOptions.from_json(WriteOptions().to_json()) == WriteOptions()


@given(st.lists(st.integers(0, 10**9), max_size=3000), st.one_of(st.none(), st.integers(1, 50)))
def test_plan_is_contiguous_complete_and_nonempty(sizes: list[int], per_task: int | None) -> None:
    plan = plan_tasks(sizes, per_task)
    if not sizes:
        assert plan == [range(0)]
        return
    assert plan[0].start == 0 and plan[-1].stop == len(sizes)
    assert all(a.stop == b.start for a, b in zip(plan, plan[1:], strict=False))
    assert all(len(r) > 0 for r in plan)
    if per_task is not None:
        assert max(len(r) for r in plan) <= per_task
    else:  # balanced: group sizes differ by at most one input
        assert max(len(r) for r in plan) - min(len(r) for r in plan) <= 1


def test_plan_gives_parallel_slack_and_bounded_tasks() -> None:
    assert len(plan_tasks([1000] * 200)) == 32
    assert len(plan_tasks([10] * 5)) == 5
    assert len(plan_tasks([0] * 1_000_000)) == 1_000_000 // 1024 + 1
    assert len(plan_tasks([1 << 30] * 100)) == 100  # 100 GiB: one input per task
