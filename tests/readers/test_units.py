"""Small windows read together in units: every batch the same as window by window, in the
same order (plans of one and of several sources, resumed anywhere), fewer windows made, and no
unit larger than memory allows."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import memory, units
from snapshot_cli.readers.elastic import GlobalOptions, GlobalPlan
from snapshot_cli.readers.plan import Blocks, EpochPlan, PlanOptions

from .conftest import numbered_snapshot, same_batches
from .test_plan import blocks_from, layouts

pytestmark = pytest.mark.units


def served(plan: Any, blocks: list[Blocks]) -> list[list[tuple[int, int]]]:
    """Each batch of ``plan`` as (source, record) pairs, worked out from what a loader uses:
    each window's segments and slots, and where each batch is in its window."""
    starts = [np.concatenate([[0], np.cumsum(b.rows)[:-1]]) for b in blocks]
    firsts = np.cumsum([0] + [len(b) for b in blocks])
    windows: dict[int, list[tuple[int, int]]] = {}
    out = []
    for i in range(plan.num_batches):
        k, a, b = plan.batch_bounds(i)
        if k not in windows:
            segments, slots, _ = plan.load_slots(k)
            records = []
            for seg in segments:
                source = int(np.searchsorted(firsts, seg.block, side="right") - 1)
                block = seg.block - firsts[source]
                base = int(starts[source][block])
                records += [(source, base + r) for r in range(seg.start, seg.stop)]
            order = list(range(len(records))) if slots is None else np.argsort(slots).tolist()
            windows[k] = [records[j] for j in order]
        out.append(windows[k][a:b])
    return out


@settings(max_examples=150, deadline=None)
@given(
    layout=layouts,
    world=st.integers(1, 4),
    batch=st.integers(1, 17),
    window=st.integers(1, 90),
    first=st.integers(0, 90),
    per_unit=st.integers(2, 7),
    seed=st.integers(0, 2**40),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_units_serve_every_batch_of_the_plan(
    layout: list[list[int]],
    world: int,
    batch: int,
    window: int,
    first: int,
    per_unit: int,
    seed: int,
    shuffle: bool,
    drop_last: bool,
) -> None:
    blocks = blocks_from(layout)
    for rank in range(world):
        options = PlanOptions(batch, shuffle, seed, rank, world, drop_last, window, first)
        plan = EpochPlan(blocks, options, epoch=3)
        grouped = units.Units(plan, per_unit)
        assert grouped.num_batches == plan.num_batches
        assert served(grouped, [blocks]) == served(plan, [blocks])
        # each unit is its windows, and a ramp window is a unit of its own
        ks = [k for u in range(grouped.num_windows) for k in grouped.windows(u)]
        assert ks == list(range(plan.num_windows))
        assert grouped.num_windows <= plan.num_windows
        if plan.num_windows > per_unit + grouped.ramp:
            assert grouped.num_windows < plan.num_windows


@settings(max_examples=30, deadline=None)
@given(
    sources=st.lists(layouts, min_size=1, max_size=3),
    per_rank=st.integers(1, 6),
    world=st.sampled_from([1, 2, 3]),
    window=st.integers(1, 120),
    first=st.integers(0, 60),
    per_unit=st.integers(2, 5),
    seed=st.integers(0, 2**32),
)
def test_units_serve_every_batch_of_the_global_order(
    sources: list[list[list[int]]],
    per_rank: int,
    world: int,
    window: int,
    first: int,
    per_unit: int,
    seed: int,
) -> None:
    parts = [blocks_from(layout) for layout in sources]
    counts = tuple(p.num_rows for p in parts)
    for rank in range(world):
        options = GlobalOptions(per_rank * world, counts, seed=seed, rank=rank, world_size=world,
                                window_rows=window, first_window_rows=first)  # fmt: skip
        plan = GlobalPlan(parts, options, epoch=1)
        grouped = units.Units(plan, per_unit)
        assert served(grouped, parts) == served(plan, parts)
        if len(parts) > 1:  # each slot's source, unit by unit as window by window
            for u in range(grouped.num_windows):
                ks = grouped.windows(u)
                alone = np.concatenate([plan.load_slots(k)[2] for k in ks])
                assert np.array_equal(grouped.load_slots(u)[2], alone)


def test_windows_as_large_as_a_unit_or_a_memory_too_small_are_read_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = blocks_from([[1000] * 20])
    plan = EpochPlan(blocks, PlanOptions(100, window_rows=1000), 0)
    unit = units.grouped(plan, bytes_per_row=1000)  # windows of 1 MB: 33 in a unit
    assert isinstance(unit, units.Units) and unit.per_unit == 33 and unit.num_windows == 1
    assert units.grouped(plan, bytes_per_row=units.UNIT_BYTES // 1000) is plan
    monkeypatch.setattr(memory, "limit", lambda: 16 * 1000 * 1000)  # a unit: 1 MB at most
    assert units.grouped(plan, bytes_per_row=1000) is plan
    monkeypatch.setattr(memory, "limit", lambda: 16 * 2000 * 1000)
    grouped = units.grouped(plan, bytes_per_row=1000)
    assert isinstance(grouped, units.Units) and grouped.per_unit == 2


def test_a_unit_holds_at_most_4096_windows() -> None:
    """Each window is planned in Python: 2**20 windows of one record (shuffle_buffer=1) in a
    unit made the first batch wait 43 s over 2M records (a scale probe)."""
    plan = EpochPlan(blocks_from([[1000] * 20]), PlanOptions(1, window_rows=1), 0)
    unit = units.grouped(plan, bytes_per_row=8)
    assert isinstance(unit, units.Units) and unit.per_unit == units.UNIT_WINDOWS == 4096
    assert unit.num_windows == -(-20_000 // 4096)
    assert served(unit, [plan.blocks]) == served(plan, [plan.blocks])


def _sized(i: int) -> Any:
    big = i == 0  # (the first task: 40 records of 1 MiB, more than a unit; others 40 of 100 B)
    for k in range(40):
        yield {"id": np.int64(i * 100 + k), "blob": np.zeros((1 << 20) if big else 100, np.uint8)}


def test_units_are_sized_by_the_shard_of_the_largest_records(tmp_path: Path) -> None:
    """Units were sized by the snapshot's average record: a few large records among many
    small ones (forty of 5 MiB written first, then 4,000 of 100 B) were all held at once, in
    the unit of a "4-record" window (645 records, 450 MiB of RSS; a probe). Sized by the
    shard of the largest, no unit holds more than :data:`units.UNIT_BYTES`."""
    from snapshot_cli.readers.options import LoaderOptions
    from snapshot_cli.readers.sources import resolve

    url = str(tmp_path / "s")
    snap.create(snap.ragged("blob")(_sized), url, inputs=range(60), workers=0,
                inputs_per_task=1, compression="none")  # fmt: skip
    s = snap.open(url)
    reading = resolve(s, LoaderOptions(shuffle=False))
    densest, average = reading.densest_row_bytes(), reading.bytes_per_row()
    assert densest >= 1 << 20 > 16 * average  # (the average: 17 KiB)
    sizes = np.concatenate([np.where(b["id"] < 100, 1 << 20, 100) for b in s.iter_batches()])
    plan = EpochPlan(reading.blocks, PlanOptions(1, shuffle=False, window_rows=4), 0)

    def most_bytes(grouped: Any) -> int:  # (of any one unit: its records in written order)
        spans = [(plan.window_bounds(min(grouped.windows(u)))[0],
                  plan.window_bounds(max(grouped.windows(u)))[1])
                 for u in range(grouped.num_windows)]  # fmt: skip
        return max(int(sizes[a:b].sum()) for a, b in spans)

    assert most_bytes(units.grouped(plan, average)) >= 40 << 20  # every large record at once
    assert most_bytes(units.grouped(plan, densest)) <= units.UNIT_BYTES
    with s.loader(1, shuffle=False, shuffle_buffer=4, prefetch=1) as loader:
        assert loader._context.densest_row_bytes == densest
        ids = [int(b["id"][0]) for b in loader]
    assert ids == [i * 100 + k for i in range(60) for k in range(40)]
    # unshuffled, a window of a size is sized so too (its order is the written order,
    # whatever the size; a shuffle's is a function of it, and keeps the average)
    for shuffle, per_row in ((False, densest), (True, average)):
        window = s.loader(1, shuffle=shuffle, shuffle_buffer="8MiB").plan_options.window_rows
        assert window == (8 << 20) // per_row, (shuffle, window)


def test_a_window_of_one_record_is_served_as_a_generator_would_place_it() -> None:
    plan = EpochPlan(blocks_from([[7, 5]]), PlanOptions(1, window_rows=1, seed=3), 2)
    for k in range(plan.num_windows):  # (the only permutation, no generator made for it)
        slots = plan.slots(k)
        assert slots is not None and slots.dtype == np.int64 and slots.tolist() == [0]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("units")
    record = '{"label": np.int64(n), "x": np.full(6, n % 251, np.uint8), "name": str(n)}'
    return numbered_snapshot(root, 2400, record, "8KiB")


def batches(path: str, **kw: Any) -> tuple[list[dict[str, np.ndarray]], int]:
    loader = snap.open(path).loader(**kw)
    out = [dict(b) for b in loader]
    return out, loader.stats()["windows"]


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in order"])
def test_a_loader_reads_small_windows_in_units_and_yields_the_same_batches(
    small: str, shuffle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw: dict[str, Any] = {"batch_size": 32, "shuffle": shuffle, "seed": 5, "epochs": 2}
    kw["shuffle_buffer"] = 96
    grouped, made = batches(small, **kw)
    monkeypatch.setattr(units, "UNIT_BYTES", 0)
    alone, windows = batches(small, **kw)
    same_batches(grouped, alone)
    assert windows == 2 * 25 and made == 2  # an epoch of 25 windows of 96 is one unit


@pytest.mark.parametrize("size", ["batch_size", "global_batch_size"])
def test_a_loader_resumed_inside_a_unit_continues_with_the_same_batches(
    small: str, size: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw: dict[str, Any] = {size: 32, "seed": 9, "epochs": 2, "shuffle_buffer": 64}
    loader = snap.open(small).loader(**kw)
    per_row = loader._context.densest_row_bytes  # (what units are sized by)
    monkeypatch.setattr(units, "UNIT_BYTES", 130 * per_row)  # units of 2 windows of 64 records
    whole = [dict(b) for b in loader]
    assert loader.stats()["windows"] == 2 * 19  # 38 windows an epoch, 2 to a unit
    for stop in (1, 5, 80, 149):  # within a unit's first window, its second, the 2nd epoch
        first = snap.open(small).loader(**kw)
        it = iter(first)
        for _ in range(stop):
            next(it)
        state = first.state_dict()
        first.close()
        again = snap.open(small).loader(**kw)
        again.load_state_dict(state)
        rest = itertools.islice(again, len(whole) - stop)
        same_batches([dict(b) for b in rest], whole[stop:])


def test_a_mixture_of_small_windows_yields_the_same_batches_in_units(
    tmp_path: Path, small: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = numbered_snapshot(tmp_path, 800, '{"label": np.int64(-n), "x": np.zeros(6, np.uint8), '
                              '"name": "o"}', "8KiB")  # fmt: skip

    def mixed() -> tuple[list[dict[str, np.ndarray]], int]:
        mix = snap.mix([snap.open(small), snap.open(other)], weights=[3, 1])
        loader = mix.loader(batch_size=16, seed=1, shuffle_buffer=48, epochs=1)
        return [dict(b) for b in loader], loader.stats()["windows"]

    grouped, made = mixed()
    monkeypatch.setattr(units, "UNIT_BYTES", 0)
    alone, windows = mixed()
    same_batches(grouped, alone)
    assert made < windows


@settings(max_examples=12, deadline=None)
@given(
    batch=st.integers(1, 70),
    buffer=st.integers(1, 300),
    world=st.integers(1, 3),
    data=st.data(),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    global_order=st.booleans(),
)
def test_any_loader_yields_the_same_batches_in_units(
    small: str,
    batch: int,
    buffer: int,
    world: int,
    data: st.DataObject,
    drop_last: bool,
    shuffle: bool,
    global_order: bool,
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    kw: dict[str, Any] = {"seed": 3, "shuffle": shuffle, "shuffle_buffer": buffer,
                          "rank": rank, "world_size": world, "drop_last": drop_last}  # fmt: skip
    if global_order:
        kw["global_batch_size"] = batch * world
    else:
        kw["batch_size"] = batch
    grouped, _ = batches(small, **kw)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(units, "UNIT_BYTES", 0)
        alone, _ = batches(small, **kw)
    same_batches(grouped, alone)
    assert len(grouped) == len(snap.open(small).loader(**kw))
