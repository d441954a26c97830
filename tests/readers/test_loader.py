"""The loader on real snapshots: order, shuffle quality, ranks, resume, threads, errors."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import re
import threading
import traceback
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap

from .conftest import damaged_snapshot

N_CLASSES, PER_CLASS = 100, 1000


def class_sorted() -> Any:
    """100 classes x 1,000 records, written in class order (the worst case for shuffling)."""
    for c in range(N_CLASSES):
        ids = np.arange(c * PER_CLASS, (c + 1) * PER_CLASS)
        yield snap.Batch(
            label=np.full(PER_CLASS, c, np.int64),
            id=ids,
            x=(ids[:, None] * np.ones(4)).astype(np.float32),
            tokens=[np.arange(i % 7, dtype=np.int32) for i in ids],
            name=[f"r{i}" for i in ids],
        )


@pytest.fixture(scope="module")
def sorted_snap(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    path = tmp_path_factory.mktemp("snaps") / "sorted"
    snap.ragged("tokens")(class_sorted)
    snap.create(class_sorted, str(path), workers=0, shard_size="32KiB", batch_rows=512)
    s = snap.open(str(path))
    assert len(s.shards) >= 20
    return s


def ids(loader: snap.Loader) -> list[int]:
    return [int(i) for b in loader for i in b["id"]]


def snap_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("snap-")]


def test_no_shuffle_replays_written_order_with_types(sorted_snap: snap.Snapshot) -> None:
    batches = list(sorted_snap.loader(batch_size=300, shuffle=False))
    assert [len(b["id"]) for b in batches] == [300] * 333 + [100]
    first = batches[0]
    assert first["x"].dtype == np.float32 and first["x"].shape == (300, 4)
    assert first["tokens"][5].dtype == np.int32 and first["tokens"][5].tolist() == list(range(5))
    assert first["name"][3] == "r3"
    assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(100_000))
    assert snap_threads() == []


def test_shuffle_quality_on_class_sorted_data(sorted_snap: snap.Snapshot) -> None:
    """Distinct classes per batch of 256 must reach 90 % of a true uniform shuffle."""
    loader = sorted_snap.loader(batch_size=256, seed=3, drop_last=True)
    got = np.mean([len(np.unique(b["label"])) for b in loader])
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(N_CLASSES), PER_CLASS)
    uniform = np.mean(
        [
            len(np.unique(b))
            for _ in range(3)
            for b in rng.permutation(labels)[:99_840].reshape(-1, 256)
        ]
    )
    assert got >= 0.9 * uniform, (got, uniform)


def test_small_buffer_still_mixes_blocks(sorted_snap: snap.Snapshot) -> None:
    # A 4,096-record buffer holds 8 blocks from random places: far from sorted order.
    loader = sorted_snap.loader(batch_size=256, seed=3, shuffle_buffer=4096, drop_last=True)
    distinct = np.mean([len(np.unique(b["label"])) for b in loader])
    assert distinct > 8, distinct


def test_epochs_are_permutations_fresh_and_seeded(sorted_snap: snap.Snapshot) -> None:
    loader = sorted_snap.loader(batch_size=1000, seed=7, epochs=2)
    both = ids(loader)
    first, second = both[:100_000], both[100_000:]
    assert sorted(first) == sorted(second) == list(range(100_000))
    assert first != second
    assert ids(sorted_snap.loader(batch_size=1000, seed=7)) == first
    assert ids(sorted_snap.loader(batch_size=1000, seed=8)) != first
    # Each new pass continues the epoch counter: a fresh order again.
    loader = sorted_snap.loader(batch_size=1000, seed=7)
    assert ids(loader) == first and ids(loader) == second


@pytest.mark.parametrize("columns", [["id", "x"], ["id", "x", "tokens", "name"]])
def test_the_loader_serves_the_plans_order(sorted_snap: snap.Snapshot, columns: list[str]) -> None:
    """The batches are the plan's sequence exactly (each window's records put in the order
    its slots say), with fixed-width columns only and with columns kept as Arrow data (whose
    window works out the order from the slots), and every column of a record travels with
    it."""
    loader = sorted_snap.loader(batch_size=256, seed=11, shuffle_buffer=3000, columns=columns)
    want = loader._make_plan(0).positions()
    batches = list(loader)
    got = np.concatenate([b["id"] for b in batches])
    assert got.tolist() == want.tolist()
    for b in batches:
        assert (b["x"][:, 0] == b["id"]).all()
        if "tokens" in columns:
            for i, t, name in zip(b["id"].tolist(), b["tokens"], b["name"], strict=True):
                assert t.tolist() == list(range(i % 7)) and name == f"r{i}"


def test_order_does_not_depend_on_threads(sorted_snap: snap.Snapshot) -> None:
    base = ids(sorted_snap.loader(batch_size=500, seed=1, num_parallel_reads=1, prefetch=1))
    assert ids(sorted_snap.loader(batch_size=500, seed=1, num_parallel_reads=4, prefetch=8)) == base
    assert ids(sorted_snap.loader(batch_size=500, seed=1)) == base


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [3, 7])
def test_ranks(sorted_snap: snap.Snapshot, world: int, drop_last: bool) -> None:
    parts = [
        ids(
            sorted_snap.loader(
                batch_size=128, seed=2, rank=r, world_size=world, drop_last=drop_last
            )
        )
        for r in range(world)
    ]
    counts = {len(p) for p in parts}
    assert len(counts) == 1  # the same number of records (so of batches) on every rank
    every = [i for p in parts for i in p]
    if drop_last:
        assert len(every) == len(set(every))  # disjoint
        assert len(every) == (100_000 // world) // 128 * 128 * world
    else:
        assert set(every) == set(range(100_000))  # complete
        assert len(every) - 100_000 < world  # padded by fewer than world_size records


def test_rank_auto_reads_the_environment(
    sorted_snap: snap.Snapshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    auto = sorted_snap.loader(batch_size=100, rank="auto", world_size="auto")
    assert (auto.plan_options.rank, auto.plan_options.world_size) == (1, 4)
    assert ids(auto) == ids(sorted_snap.loader(batch_size=100, rank=1, world_size=4))


_full_runs: dict[int, list[np.ndarray]] = {}


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(0, 600), buffer=st.sampled_from([777, 5000, 100_000]))
def test_resume_at_any_point_is_bit_identical(
    sorted_snap: snap.Snapshot, cut: int, buffer: int
) -> None:
    opts: dict[str, Any] = {"batch_size": 400, "seed": 5, "epochs": 3, "shuffle_buffer": buffer}
    opts["columns"] = ["id", "x"]
    if buffer not in _full_runs:
        _full_runs[buffer] = [b["id"] for b in sorted_snap.loader(**opts)]
    full = _full_runs[buffer]
    assert len(full) == 750
    loader = sorted_snap.loader(**opts)
    it = iter(loader)
    head = [next(it)["id"] for _ in range(cut)]
    state = loader.state_dict()
    loader.close()
    assert set(state) == {"version", "epoch", "batch", "pass_end", "config"}
    fresh = sorted_snap.loader(**opts)
    fresh.load_state_dict(state)
    rest = [b["id"] for b in fresh]
    assert len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full, strict=True):
        assert np.array_equal(got, want)


def test_state_from_other_settings_is_refused(sorted_snap: snap.Snapshot) -> None:
    state = sorted_snap.loader(batch_size=100, seed=1).state_dict()
    with pytest.raises(snap.OptionError, match="other batch_size, seed"):
        sorted_snap.loader(batch_size=50, seed=2).load_state_dict(state)


@pytest.mark.parametrize("supersede", ["iter", "load_state_dict", "set_epoch", "close"])
def test_a_superseded_pass_hands_out_nothing_and_leaves_the_position_alone(
    sorted_snap: snap.Snapshot, supersede: str
) -> None:
    """Small batches reach the consumer in groups (up to 64 at a time): a pass superseded
    mid-group used to hand out the rest of its group and move the loader's position."""
    opts: dict[str, Any] = {"batch_size": 8, "seed": 1, "columns": ["id"]}
    full = [b["id"] for b in sorted_snap.loader(**opts)]
    loader = sorted_snap.loader(**opts)
    old = iter(loader)
    head = [next(old)["id"] for _ in range(2)]
    saved = loader.state_dict()
    if supersede == "iter":
        new = iter(loader)
        head += [next(new)["id"] for _ in range(3)]
    elif supersede == "load_state_dict":
        loader.load_state_dict(saved)
    elif supersede == "set_epoch":
        loader.set_epoch(0)
        head = []
    else:
        loader.close()
    position = loader.state_dict()
    if supersede == "close":
        assert next(old, None) is None  # a closed pass ends
    else:
        with pytest.raises(RuntimeError, match="superseded"):
            next(old)
    assert loader.state_dict() == position  # and did not move the loader
    rest = [b["id"] for b in (new if supersede == "iter" else loader)]
    assert len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full, strict=True):
        assert np.array_equal(got, want)
    assert snap_threads() == []


def test_a_pass_superseded_while_it_waits_for_a_batch_raises(tmp_path: Path) -> None:
    """A pass stopped by a newer one while it waited on its buffer ended as if its epoch
    were done: of two threads iterating one loader, one got 0 records and no error."""

    def preprocess(i: int) -> Any:
        yield {"i": i}

    snap.create(preprocess, tmp_path / "s", inputs=range(10), workers=0)
    loader = snap.open(tmp_path / "s").loader(10, shuffle=False)
    old = iter(loader)
    assert len(next(old)["i"]) == 10  # the epoch's one batch: next, old waits for more
    new = iter(loader)
    assert sorted(next(new)["i"].tolist()) == list(range(10))
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)
    assert next(new, None) is None  # the newer pass ends as usual
    loader.close()
    assert snap_threads() == []


@pytest.mark.parametrize("processes", [0, 2])
def test_two_threads_starting_passes_at_once_never_end_one_silently_empty(
    tmp_path: Path, processes: int
) -> None:
    """Two threads iterating one loader at the same moment: the newer pass (the one started
    last) gets the epoch and the older raises; one of them ended with 0 records and no
    error in 22 of 40 tries (a pass stopped before its superseder had counted itself)."""

    def preprocess(i: int) -> Any:
        yield snap.Batch(i=np.arange(100 * i, 100 * i + 100))

    snap.create(preprocess, tmp_path / "s", inputs=range(20), workers=0)
    snapshot = snap.open(tmp_path / "s")
    for _ in range(15 if processes else 30):
        loader = snapshot.loader(100, seed=1, processes=processes)
        start = threading.Barrier(2)
        ends: list[str] = []

        def consume(
            loader: snap.Loader = loader, start: threading.Barrier = start, ends: list = ends
        ) -> None:
            start.wait()
            try:
                got = sorted(i for batch in loader for i in batch["i"].tolist())
            except RuntimeError as err:
                assert "superseded" in str(err)
                ends.append("superseded")
            else:
                assert got == list(range(2000)), len(got)
                ends.append("epoch")

        threads = [threading.Thread(target=consume) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert "epoch" in ends and len(ends) == 2, ends
        loader.close()
    assert snap_threads() == []


def test_map_runs_in_threads_with_a_reproducible_rng(sorted_snap: snap.Snapshot) -> None:
    seen: set[str] = set()

    def flip(batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
        seen.add(threading.current_thread().name)
        flipped = rng.random(len(batch["x"])) < 0.5
        x = batch["x"].copy()
        x[flipped] = -x[flipped]
        return {**batch, "x": x}

    a = [b["x"] for b in sorted_snap.loader(batch_size=1000, seed=4, map=flip)]
    b = [b["x"] for b in sorted_snap.loader(batch_size=1000, seed=4, map=flip)]
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    negative = np.mean([np.mean(x[:, 0] < 0) for x in a])
    assert 0.4 < negative < 0.6
    assert seen and all(name.startswith("snap-map") for name in seen)


@pytest.mark.parametrize(
    ("fn", "gets_rng"),
    [
        (lambda batch: batch, False),
        (lambda batch, rng: batch, True),
        (lambda batch, rng=None: batch, True),
        (lambda batch, p=0.5: batch, False),  # p keeps its default, not a Generator
        (lambda batch, *rest: batch, True),
        (lambda batch, *, scale=2: batch, False),
    ],
)
def test_map_gets_the_rng_only_where_it_asks_for_it(
    sorted_snap: snap.Snapshot, fn: Any, gets_rng: bool
) -> None:
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> Any:
        calls.append(args)
        return args[0]

    spy.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    next(iter(sorted_snap.loader(batch_size=10, map=spy)))
    assert {len(args) for args in calls} == {2 if gets_rng else 1}
    if gets_rng:
        assert all(isinstance(args[1], np.random.Generator) for args in calls)


@pytest.mark.parametrize("fn", [lambda: {}, lambda batch, rng, extra: batch])
def test_a_map_that_takes_neither_form_is_refused_when_the_loader_is_made(
    sorted_snap: snap.Snapshot, fn: Any
) -> None:
    with pytest.raises(snap.OptionError, match=r"map must take \(batch\) or \(batch, rng\)"):
        sorted_snap.loader(batch_size=10, map=fn)


def test_errors_in_threads_reach_the_consumer_with_traceback(sorted_snap: snap.Snapshot) -> None:
    def broken(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise KeyError("augmentation went wrong")

    with pytest.raises(KeyError, match="augmentation went wrong") as exc:
        list(sorted_snap.loader(batch_size=100, map=broken))
    frames = [f.name for f in exc.traceback]
    assert "broken" in frames  # the original frame, raised in a snap-map thread
    assert snap_threads() == []


def test_a_map_that_returns_no_dict_is_told_so(sorted_snap: snap.Snapshot) -> None:
    def in_place(batch: dict[str, np.ndarray]) -> None:  # forgot `return batch`
        batch["x"] *= 2

    with pytest.raises(TypeError, match=r"returned NoneType \(a map that changes the batch in pl"):
        next(iter(sorted_snap.loader(batch_size=100, map=in_place)))
    with pytest.raises(TypeError, match=r"returned list \(name its columns: return \{'x'"):
        next(iter(sorted_snap.loader(batch_size=100, map=lambda batch: [batch])))
    # keys that are no column names (every adapter too: tests/readers/test_map_errors.py)
    for keys in ([1], [("a",)], ["x", b"y"]):
        loader = sorted_snap.loader(batch_size=100, map=lambda b: dict.fromkeys(keys, b["x"]))  # noqa: B023
        with pytest.raises(TypeError, match=r"map must return a dict keyed by column names"):
            next(iter(loader))
    # an Arrow batch or table (a DataFrame: tests/readers/test_adapters.py, where pandas is)
    import pyarrow as pa

    for make in (pa.record_batch, pa.table):
        assert_map_advice_works(sorted_snap, make)


def assert_map_advice_works(s: snap.Snapshot, make: Any) -> None:
    """A map returning ``make(batch)`` is told what to return, and that is what it takes."""
    with pytest.raises(TypeError) as err:
        next(iter(s.loader(batch_size=100, columns=["id"], map=lambda b: make(b))))
    assert f"returned {type(make({'id': [1]})).__name__} (a " in str(err.value)
    advice = re.search(r"return (\{.*\})\)$", str(err.value)).group(1)  # type: ignore[union-attr]
    var = "df" if "df[" in advice else "t"
    fn = eval(f"lambda b, make=make: (lambda {var}: {advice})(make(b))")  # noqa: S307
    got = next(iter(s.loader(100, shuffle=False, columns=["id"], map=fn)))
    assert got["id"].tolist() == list(range(100))


def test_a_map_raising_stopiteration_says_so(sorted_snap: snap.Snapshot) -> None:
    def exhausted(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        next(iter([]))  # a next() on an exhausted iterator
        return batch

    with pytest.raises(RuntimeError, match=r"^map raised StopIteration \(a next\(\) on an exh"):
        next(iter(sorted_snap.loader(batch_size=100, map=exhausted)))


@pytest.mark.parametrize(
    "first",
    [
        lambda b: len(b["id"]),
        lambda b: np.int64(len(b["id"])),
        lambda b: np.array(3.5),
        lambda b: "run-1",
        None,
    ],
    ids=["int", "numpy scalar", "0-d array", "str", "no column"],
)
def test_a_map_may_put_any_value_first_or_return_no_column(
    sorted_snap: snap.Snapshot, first: Any
) -> None:
    # the loader counted records by len() of the first column: a number there raised
    # "object of type 'int' has no len()" from inside snap, and {} StopIteration
    def fn(batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return {} if first is None else {"n": first(batch), "id": batch["id"]}

    loader = sorted_snap.loader(batch_size=400, map=fn)
    batches = list(loader)
    assert len(batches) == 250
    assert loader.stats()["records"] == (0 if first is None else 100_000)


def test_threads_stop_on_break_close_and_gc(sorted_snap: snap.Snapshot) -> None:
    loader = sorted_snap.loader(batch_size=100)
    for _ in loader:
        assert snap_threads()
        break
    assert snap_threads() == []
    with sorted_snap.loader(batch_size=100) as loader2:
        next(iter(loader2))
    assert snap_threads() == []
    it = iter(sorted_snap.loader(batch_size=100))
    next(it)
    del it
    gc.collect()
    assert snap_threads() == []


@pytest.mark.parametrize("processes", [0, 2])
def test_a_dropped_loader_frees_its_memory_without_the_cyclic_collector(
    sorted_snap: snap.Snapshot, processes: int
) -> None:
    """A loader's run and its context were in reference cycles (the run's server held a
    method of the run; the context a method of the loader): a loader dropped mid-epoch kept
    its windows and shard maps (360 MiB for 586 MiB of records) until ``gc.collect()``, and
    a sweep or a notebook making loader after loader grew by that much each time."""
    gc.collect()
    gc.disable()
    try:
        loader = sorted_snap.loader(
            batch_size=100, processes=processes, shuffle_buffer=5_000, columns=["id", "x"]
        )
        for _ in loader:
            break
        alive = [weakref.ref(o) for o in (loader, loader._context, loader._context.windows)]
        del loader, _
        assert [ref() for ref in alive] == [None, None, None]
    finally:
        gc.enable()


class MapFailed(Exception):
    pass


def failing_map(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if batch["id"][0] >= 2_000:
        raise MapFailed("a bug in the augmentation")
    return batch


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.parametrize("gather_threads", [False, True], ids=["one-batch", "gathered"])
def test_a_loader_whose_map_raised_is_freed_when_dropped(
    sorted_snap: snap.Snapshot, processes: int, gather_threads: bool
) -> None:
    """The map's error, raised from the future that ran it, kept in its traceback the frame
    that waited on that future, which held the future, which held the error: the loader's
    windows, shard files and shared memory stayed until ``gc.collect()`` (a sweep whose
    trials fail in their map grew by two windows a trial)."""
    gc.collect()
    gc.disable()
    try:
        loader = sorted_snap.loader(batch_size=100 if gather_threads else 2_000,
                                    processes=processes, map=failing_map,
                                    shuffle_buffer=5_000, columns=["id", "x"])  # fmt: skip
        with pytest.raises(MapFailed) as caught:
            for _ in loader:
                pass
        frames = [f for f, _ in traceback.walk_tb(caught.value.__traceback__)]
        user = [f for f in frames if f.f_code.co_name == "failing_map"]
        assert user and "batch" in user[0].f_locals  # (a debugger still sees the map's locals)
        alive = [weakref.ref(o) for o in (loader, loader._context, loader._context.windows)]
        del loader, caught, frames, user
        assert [ref() for ref in alive] == [None, None, None]
    finally:
        gc.enable()


def test_close_lets_go_of_the_memory_kept_for_the_next_pass(sorted_snap: snap.Snapshot) -> None:
    """A new pass reuses the windows' slabs and the open shards of the last; ``close()``
    lets go of them (a loader kept, as an adapter or a trainer holds it, kept them all), and
    a pass after it reads on from where the loader was."""
    loader = sorted_snap.loader(batch_size=100, seed=4, shuffle_buffer=5_000)
    it = iter(loader)
    first = [next(it)["id"].tolist() for _ in range(3)]
    pool, readers = loader._context.windows, loader._context.readers
    assert pool._slabs and readers._open  # kept for the next pass
    del it
    loader.close()
    assert not pool._slabs and not pool._leaving and not readers._open
    rest = [b["id"].tolist() for b in loader]
    fresh = [b["id"].tolist() for b in sorted_snap.loader(batch_size=100, seed=4,
                                                            shuffle_buffer=5_000)]  # fmt: skip
    assert first + rest == fresh


def test_stats_report_rates_and_settings(sorted_snap: snap.Snapshot) -> None:
    loader = sorted_snap.loader(batch_size=1000)
    n = sum(len(b["id"]) for b in loader)
    s = loader.stats()
    assert s["records"] == n == 100_000 and s["batches"] == 100
    assert s["records_per_s"] > 0 and s["bytes_per_s"] > 0
    assert 0 <= s["input_bound_pct"] <= 100
    assert s["stage_seconds"]["read_decode"] > 0 and s["windows"] >= 1
    assert s["settings"]["parallel_reads"] >= 1 and s["settings"]["prefetch"] >= 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": 8, "rank": 3, "world_size": 3}, "rank must be in"),
        ({"batch_size": 8, "columns": ["nope"]}, r"unknown columns \['nope'\]"),
        ({"batch_size": 8, "num_parallel_reads": 0}, "num_parallel_reads must be 'auto' or an"),
        (  # (it said "'auto' or an integer >= 1", and takes a size too)
            {"batch_size": 8, "shuffle_buffer": 0},
            r"shuffle_buffer must be 'auto', a number of records >= 1, or a size \('64MiB'\), "
            "got 0",
        ),
        ({"batch_size": 8, "epochs": 0}, "epochs must be None"),
    ],
)
def test_bad_options(sorted_snap: snap.Snapshot, kwargs: dict, message: str) -> None:
    with pytest.raises(snap.OptionError, match=message):
        sorted_snap.loader(**kwargs)


@pytest.mark.parametrize("world", [1, 3, 7])
def test_drop_last_with_a_batch_larger_than_a_ranks_part_is_refused(
    sorted_snap: snap.Snapshot, world: int
) -> None:
    """Every epoch would be empty (and ``epochs=None`` would end at once): said when made.
    One record fewer per batch reads one batch an epoch."""
    part = 100_000 // world
    loader = sorted_snap.loader(part, drop_last=True, rank=world - 1, world_size=world)
    assert len(loader) == 1
    assert len(ids(loader)) == part
    with pytest.raises(snap.OptionError, match=rf"holds no batch of {part + 1}: with drop_last"):
        sorted_snap.loader(part + 1, drop_last=True, rank=0, world_size=world, epochs=None)
    assert len(sorted_snap.loader(part + 1, rank=0, world_size=world)) == 1  # one short batch


@pytest.mark.parametrize(("records", "world"), [(1, 2), (3, 4), (3, 8), (5, 7)])
def test_drop_last_with_fewer_records_than_ranks_is_refused(
    tmp_path: Path, records: int, world: int
) -> None:
    """Every rank's part is 0 records: every rank got an empty epoch without a word (the
    check exempted a part of 0, meant for an empty snapshot only). Without drop_last each
    rank repeats records to fill its part of one."""

    def f(i: int) -> Any:
        yield {"id": np.int64(i)}

    snap.create(f, str(tmp_path / "s"), inputs=list(range(records)), workers=0)
    s = snap.open(str(tmp_path / "s"))
    for rank in range(world):
        with pytest.raises(snap.OptionError, match=r"drop_last=False .* or fewer ranks"):
            s.loader(1, drop_last=True, rank=rank, world_size=world)
    seen = [ids(s.loader(1, rank=rank, world_size=world)) for rank in range(world)]
    assert all(len(part) == 1 for part in seen)
    assert sorted({i for part in seen for i in part}) == list(range(records))


def test_snapshot_stats(sorted_snap: snap.Snapshot) -> None:
    stats = sorted_snap.stats()
    assert stats["records"] == 100_000 and stats["shards"] == len(sorted_snap.shards)
    assert stats["compression"]["codec"] == "zstd" and stats["ratio"] > 1


def test_columns_subset(sorted_snap: snap.Snapshot) -> None:
    batch = next(iter(sorted_snap.loader(batch_size=10, columns=["label"])))
    assert list(batch) == ["label"]
    # names from a numpy array (np.str_) key the batch as plain str, as everywhere else
    batch = next(iter(sorted_snap.loader(batch_size=10, columns=np.array(["id", "label"]))))
    assert [type(k) for k in batch] == [str, str] and list(batch) == ["id", "label"]


def test_a_loader_shows_what_it_reads_and_where_it_is(sorted_snap: snap.Snapshot) -> None:
    loader = sorted_snap.loader(batch_size=10, seed=4)
    batches = iter(loader)
    next(batches), next(batches)
    shown = repr(loader)  # was <snapshot_cli.readers.loader.Loader object at 0x...>
    assert shown.startswith(f"Loader({sorted_snap!r}, batch_size=10, shuffle=True, seed=4, ")
    assert shown.endswith("rank=0/1, at epoch 0 batch 2)")
    for bad in (-1, "3", True, 2.0):  # head(-1) was [], head("3") a TypeError from a compare
        with pytest.raises(snap.OptionError, match=r"n must be an integer >= 0"):
            sorted_snap.head(bad)


BAD_COLUMNS = [
    ("label", r"must be a list of column names, got 'label': for one column, columns=\['label'\]"),
    (3, "must be a list of column names, got 3"),
    ([], r"columns=\[\] selects no column; the snapshot has \['label', 'id'"),
    (["label", "label"], r"columns name \['label'\] more than once"),
    (["label", "nope"], r"unknown columns \['nope'\]"),  # (a mixture's too: in none of them)
]


@pytest.mark.parametrize(("columns", "message"), BAD_COLUMNS)
@pytest.mark.parametrize("where", ["loader", "mixture", "head", "iter_batches"])
def test_bad_columns_are_refused_everywhere(
    sorted_snap: snap.Snapshot, where: str, columns: Any, message: str
) -> None:
    # a str used to be read as a list of one-letter columns ("unknown columns ['l', 'a', ...");
    # a column named twice was read once, and an int was a TypeError from list()
    calls = {
        "loader": lambda: sorted_snap.loader(batch_size=8, columns=columns),
        "mixture": lambda: snap.mix([sorted_snap, sorted_snap]).loader(8, columns=columns),
        "head": lambda: sorted_snap.head(2, columns=columns),
        "iter_batches": lambda: next(sorted_snap.iter_batches(columns=columns)),
    }
    with pytest.raises(snap.OptionError, match=message):
        calls[where]()


def _small(tmp_path: Path) -> str:
    def gen() -> Any:
        for i in range(50):
            yield {"v": np.full(1000, i, np.int32)}

    path = str(tmp_path / "s")
    snap.create(gen, path, workers=0, shard_size="16KiB", batch_rows=8, compression="none")
    return path


def test_corrupt_shard_is_named(tmp_path: Path) -> None:
    path = _small(tmp_path)
    s = snap.open(path)
    victim = Path(path) / s.shards[2].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    damaged = f"shard .*{victim.name} is damaged: record batch 0 has crc32c"
    with pytest.raises(snap.CorruptShardError, match=damaged):
        list(s.loader(batch_size=10, shuffle=False))
    assert snap_threads() == []


def test_missing_or_truncated_shard_is_named(tmp_path: Path) -> None:
    path = _small(tmp_path)
    s = snap.open(path)
    (Path(path) / s.shards[1].path).unlink()
    with pytest.raises(snap.CorruptShardError, match="is missing: the snapshot is damaged"):
        list(s.loader(batch_size=10, shuffle=False))
    victim = Path(path) / s.shards[0].path
    victim.write_bytes(victim.read_bytes()[:-10])
    with pytest.raises(snap.CorruptShardError, match="bytes, the manifest says"):
        list(s.loader(batch_size=10, shuffle=False, verify=False))


def test_a_shard_gc_removed_from_a_replaced_version_says_so(tmp_path: Path) -> None:
    """A training run reads the version it opened; when a create replaces it and ``snap gc``
    (retention 0) removes its shards, the error says that and what to do, not "damaged"."""
    from snapshot_cli.writers.gc import gc

    path = _small(tmp_path)
    s = snap.open(path)
    snap.create(lambda: iter([{"v": np.zeros(1000, np.int32)}]), path, workers=0,
                overwrite=True)  # fmt: skip
    assert gc(path, retention=0).garbage
    with pytest.raises(snap.CorruptShardError) as exc:
        list(s.loader(batch_size=10))
    assert "is missing, and the snapshot's version now, 2, does not list it" in str(exc.value)
    assert str(exc.value).endswith("open the snapshot again to read version 2")
    assert len(list(snap.open(path).loader(batch_size=10))) == 1


def test_a_shard_of_a_kept_version_deleted_by_hand_is_not_blamed_on_gc(tmp_path: Path) -> None:
    """A shard only a kept older version lists, deleted by hand (as verify's advice for a
    damaged one says), was said to be "removed by snap gc": gc removes none that a kept
    version lists."""
    path = _small(tmp_path)
    s = snap.open(path)
    snap.create(lambda: iter([{"v": np.zeros(1000, np.int32)}]), path, workers=0,
                overwrite=True)  # fmt: skip
    (Path(path) / s.shards[1].path).unlink()
    with pytest.raises(snap.CorruptShardError) as exc:
        list(s.loader(batch_size=10))
    message = str(exc.value)
    assert "but the kept version 1 does: it was deleted by hand or lost, not removed" in message
    assert message.endswith("open the snapshot again to read version 2")


def test_read_shard_names_a_shard_that_is_not_there(tmp_path: Path) -> None:
    s = snap.open(_small(tmp_path))
    n = len(s.shards)
    for bad in (n, -n - 1, "1", 1.0, True):  # n was IndexError "tuple index out of range"
        with pytest.raises(snap.OptionError, match=rf"no shard .*: the snapshot has {n} \(0 to"):
            s.read_shard(bad)
    assert s.read_shard(np.int64(n - 1)).equals(s.read_shard(-1))
    snap.create(lambda: iter(()), str(tmp_path / "empty"), workers=0)
    with pytest.raises(snap.OptionError, match=r"^no shard 0: the snapshot has none$"):
        snap.open(str(tmp_path / "empty")).read_shard(0)  # it said "has 0 (0 to -1)"


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(snap.ManifestError, match="nothing does not exist: check the path"):
        snap.open(str(tmp_path / "nothing"))
    path = _small(tmp_path)
    manifest = Path(path) / "manifest.json"
    text = re.sub(r'"format_version": \d+', '"format_version": 9', manifest.read_text())
    manifest.write_text(text)
    with pytest.raises(snap.ManifestError, match="format_version 9.*upgrade snap"):
        snap.open(path)


def test_memory_filesystem(memfs: object) -> None:
    def gen() -> Any:
        yield snap.Batch(v=np.arange(5000, dtype=np.int64))

    snap.create(gen, "memory://s", workers=0, batch_rows=100, shard_size="4KiB")
    got = sorted(int(v) for b in snap.open("memory://s").loader(batch_size=64) for v in b["v"])
    assert got == list(range(5000))


def test_snapshot_materialises_once_then_reuses(tmp_path: Path) -> None:
    calls = tmp_path / "calls"  # not a list it appends to: that would change its identity

    def gen() -> Any:
        with open(calls, "a") as f:
            f.write("called\n")
        yield snap.Batch(v=np.arange(10))

    s = snap.snapshot(gen, str(tmp_path / "s"), workers=0)
    s2 = snap.snapshot(gen, str(tmp_path / "s"), workers=0)
    assert calls.read_text() == "called\n" and s.num_records == s2.num_records == 10
    assert sorted(int(v) for b in s2.loader(batch_size=3) for v in b["v"]) == list(range(10))
    # as tf.data's snapshot() is a dataset, loader options are a natural thing to pass here:
    # they were "create() got an unexpected keyword argument 'batch_size'"
    said = r"got loader options \(batch_size=..., seed=...\): it returns a Snapshot; pass them"
    with pytest.raises(TypeError, match=said):
        snap.snapshot(gen, str(tmp_path / "s"), workers=0, batch_size=3, seed=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shardsize'"):
        snap.snapshot(gen, str(tmp_path / "s"), workers=0, shardsize=3)
    assert calls.read_text() == "called\n"  # neither ran anything


@pytest.mark.parametrize("overwrite", [True, False], ids=["other params", "other inputs"])
def test_snapshot_opens_the_version_its_own_create_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    """Two sweep trials at once: another process committed between this call's create and
    its open, and snap.snapshot() returned the other trial's records (a concurrency probe:
    tag 'y' records for a trial of tag 'x')."""
    from snapshot_cli import facade

    out = str(tmp_path / "s")

    def tagged(i: int, tag: str = "x") -> Any:
        yield {"i": i, "tag": tag}

    real = facade.create

    def then_another_trial_commits(*args: Any, **kwargs: Any) -> Any:
        info = real(*args, **kwargs)
        other = {"params": {"tag": "y"}, "overwrite": True} if overwrite else {}
        real(tagged, out, inputs=list(range(8)), workers=0, **other)
        return info

    monkeypatch.setattr(facade, "create", then_another_trial_commits)
    s = snap.snapshot(tagged, out, inputs=list(range(4)), workers=0)
    assert (s.version, snap.open(out).version) == (1, 2)
    batches = list(s.loader(8, shuffle=False))
    rows = [(int(i), str(t)) for b in batches for i, t in zip(b["i"], b["tag"], strict=True)]
    assert rows == [(i, "x") for i in range(4)]


def test_empty_snapshot_yields_nothing(tmp_path: Path) -> None:
    def nothing() -> Any:
        return iter(())

    info = snap.create(nothing, str(tmp_path / "s"), workers=0)
    assert info.num_records == 0 and info.num_shards == 0
    loader = snap.open(str(tmp_path / "s")).loader(batch_size=4)
    assert list(loader) == [] and len(loader) == 0


@pytest.mark.parametrize("epochs", [1000, 10**12, None])
def test_an_empty_snapshot_is_planned_once_however_many_epochs(
    tmp_path: Path, epochs: int | None
) -> None:
    """Every epoch is as empty as the first: epochs=10**9 planned empty epochs for hours,
    where epochs=None ended at once (a probe)."""
    snap.create(lambda: iter(()), str(tmp_path / "s"), workers=0)
    loader = snap.open(str(tmp_path / "s")).loader(batch_size=4, epochs=epochs)
    planned: list[int] = []
    real = loader._context.make_plan

    def counted(epoch: int) -> Any:
        planned.append(epoch)
        return real(epoch)

    loader._context = dataclasses.replace(loader._context, make_plan=counted)
    assert list(loader) == [] and planned == [0], planned[:5]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("width", [64, 6000])  # 6000: read straight to the records' slots
def test_a_damaged_shard_met_mid_window_yields_none_of_its_records(
    tmp_path: Path, shuffle: bool, width: int
) -> None:
    """No record whose bytes fail their checksum reaches the consumer, even when they decode
    and the damaged record batch (here the shard's only one) is met in the middle of a window:
    a window is served only once every read of it has been checked."""
    out, victim = damaged_snapshot(tmp_path, width)
    with snap.open(out).loader(10, shuffle=shuffle, shuffle_buffer=60) as loader:
        seen: list[int] = []
        damaged = f"{victim} is damaged: record batch 0 has crc32c"
        with pytest.raises(snap.CorruptShardError, match=damaged):
            for batch in loader:
                seen.extend(int(v) for v in batch["label"])
    owner = {label // 50 for label in seen}
    assert 2 not in owner, sorted(owner)
    assert snap_threads() == []


def test_an_endless_loader_has_no_length_and_says_what_has(sorted_snap: snap.Snapshot) -> None:
    endless = sorted_snap.loader(batch_size=1000, epochs=None)
    with pytest.raises(TypeError, match=r"loader.batches_per_epoch\(\) is an epoch's batches"):
        len(endless)
    assert endless.batches_per_epoch() == len(sorted_snap.loader(batch_size=1000))


def test_an_unknown_column_names_the_one_meant_and_a_wide_list_is_cut() -> None:
    """`--columns Text` of a column `text` said only "unknown columns" (a CLI probe); a
    table of 20,000 columns was listed whole in the message."""
    from snapshot_cli.readers.options import SHOWN_COLUMNS, checked_columns

    with pytest.raises(snap.OptionError) as caught:
        checked_columns(["Text"], ["image", "text"])
    assert str(caught.value) == (
        "unknown columns ['Text']; the snapshot has ['image', 'text']; did you mean 'text'?"
    )
    with pytest.raises(snap.OptionError) as caught:
        checked_columns(["lables", "zzz", "IMAGE"], ["image", "labels"])
    assert str(caught.value).endswith("; did you mean 'labels' for 'lables', 'image' for 'IMAGE'?")
    wide = [f"f{i}" for i in range(20_000)]
    with pytest.raises(snap.OptionError) as caught:
        checked_columns(["nope"], wide)
    said = str(caught.value)
    assert len(said) < 600 and "(20,000 in all)]" in said and f"'f{SHOWN_COLUMNS - 1}'" in said
