"""The global order (readers/elastic.py): the same global batches for every world size, exact
resume across world sizes, mixtures in their proportions. Properties over random layouts."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from snapshot_cli.readers import interleave
from snapshot_cli.readers.elastic import GlobalOptions, GlobalPlan, apportion
from snapshot_cli.readers.plan import Blocks

from .test_plan import blocks_from

layouts = st.lists(st.lists(st.integers(1, 25), min_size=1, max_size=3), min_size=1, max_size=4)


def positions(plan: GlobalPlan) -> list[np.ndarray]:
    """Every record the plan's rank yields, step by step, as ``(source, record)`` pairs encoded
    ``source * 2**40 + record`` (the record's index in the source's written order)."""
    out = []
    for k in range(plan.num_windows):
        segments, record, _ = plan.layout(k)
        ids = []
        for seg in segments:
            stream = next(
                s for s in plan.streams
                if s.first_block <= seg.block < s.first_block + len(s.blocks)
            )  # fmt: skip
            block = seg.block - stream.first_block
            start = int(np.concatenate([[0], np.cumsum(stream.blocks.rows)])[block])
            ids.append(stream.source * (1 << 40) + start + np.arange(seg.start, seg.stop))
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        out.extend(list(flat[plan.permutation(k, record)].reshape(-1, plan.batch_size)))
    return out


def steps_of(
    sources: list[Blocks], counts: list[int], g: int, w: int, rank: int, epoch: int, **kw: object
) -> list[np.ndarray]:
    options = GlobalOptions(g, tuple(counts), rank=rank, world_size=w, **kw)  # type: ignore[arg-type]
    return positions(GlobalPlan(sources, options, epoch))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def test_floor_sum_and_counts_against_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(3000):
        n, m, a, b = (
            rng.randint(0, 60),
            rng.randint(1, 50),
            rng.randint(0, 200),
            rng.randint(0, 200),
        )
        assert interleave.floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))
    for _ in range(200):
        q, bound = rng.randint(0, 5000), rng.randint(0, interleave.M)
        assert interleave.count_below(bound, q) == int((interleave.keys(0, q) < bound).sum())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=6).filter(lambda c: sum(c) > 0))
def test_interleave_deals_exactly_the_counts(counts: list[int]) -> None:
    bounds = interleave.interleave_bounds(counts)
    labels = np.searchsorted(np.asarray(bounds[1:-1], np.uint64), interleave.keys(0, sum(counts)),
                             side="right")  # fmt: skip
    assert np.bincount(labels, minlength=len(counts)).tolist() == counts
    # every stretch holds the sources in proportion, within a few records
    total = sum(counts)
    for start in range(0, total, max(1, total // 7)):
        stop = min(total, start + max(1, total // 5))
        got = np.bincount(labels[start:stop], minlength=len(counts))
        want = np.asarray(counts) * (stop - start) / total
        assert (np.abs(got - want) <= 4 + 0.02 * (stop - start)).all(), (got, want)


@settings(max_examples=150, deadline=None)
@given(
    layout=st.lists(layouts, min_size=1, max_size=3),
    g=st.sampled_from([1, 2, 4, 6, 8, 12]),
    window=st.integers(1, 80),
    first=st.integers(0, 80),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 50),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    scale=st.sampled_from([None, 0.5, 1.7]),
)
@example(layout=[[[5, 5]]], g=4, window=4, first=0, seed=0, epoch=0, shuffle=True,
         drop_last=False, scale=None)  # fmt: skip
def test_every_world_size_sees_the_same_global_batches(
    layout: list[list[list[int]]],
    g: int,
    window: int,
    first: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    drop_last: bool,
    scale: float | None,
) -> None:
    sources = [blocks_from(s) for s in layout]
    sizes = [b.num_rows for b in sources]
    counts = sizes if scale is None else [max(1, round(n * scale)) for n in sizes]
    kw = {"shuffle": shuffle, "seed": seed, "drop_last": drop_last, "window_rows": window,
          "first_window_rows": first}  # fmt: skip
    if drop_last and sum(counts) < g:
        plan = GlobalPlan(sources, GlobalOptions(g, tuple(counts), **kw), epoch)  # type: ignore[arg-type]
        assert plan.num_batches == 0
        return
    whole = steps_of(sources, counts, g, 1, 0, epoch, **kw)
    for w in divisors(g)[1:]:
        ranks = [steps_of(sources, counts, g, w, r, epoch, **kw) for r in range(w)]
        assert {len(r) for r in ranks} == {len(whole)}  # every rank: the same number of steps
        for t, batch in enumerate(whole):  # the same records; shuffled, each rank's slice
            joined = np.concatenate([r[t] for r in ranks])  # in an order of its own
            if shuffle:
                joined, batch = np.sort(joined), np.sort(batch)
            assert np.array_equal(joined, batch), (w, t)
    if sum(counts) >= g and all(c <= n for n, c in zip(sizes, counts, strict=True)):
        # (No record drawn twice, an epoch of a global batch at least, as the loader asks.)
        # The fill-up is in the last global batch, and no batch holds a record twice (it was
        # spread over the last window's batches, and a batch could hold one twice).
        assert all(len(set(b.tolist())) == g for b in whole)
        before_last = np.concatenate(whole[:-1]) if len(whole) > 1 else np.zeros(0, np.int64)
        assert len(set(before_last.tolist())) == len(before_last)
    ids = np.concatenate(whole) if whole else np.zeros(0, np.int64)
    total = sum(counts)
    steps = total // g if drop_last else -(-total // g)
    assert len(ids) == steps * g
    extra = max(0, steps * g - total)  # padding: positions past the end wrap to the start
    for i, (n, c) in enumerate(zip(sizes, counts, strict=True)):
        mine = collections.Counter((ids[(ids >> 40) == i] & ((1 << 40) - 1)).tolist())
        got = sum(mine.values())
        assert set(mine) <= set(range(n))
        if drop_last:
            assert got <= c
            if c <= n:
                assert max(mine.values(), default=1) == 1  # a subset: no record twice
            continue
        assert c <= got <= c + extra  # exactly its share, and perhaps some of the padding
        if c >= n:  # every record, each c // n or c // n + 1 times (and the padding)
            assert set(mine) == set(range(n))
            assert max(mine.values()) <= -(-c // n) + extra
            assert sum(v - c // n for v in mine.values()) <= c - (c // n) * n + extra
        else:  # a random subset: each record once (but the padding)
            assert sum(v - 1 for v in mine.values()) <= extra


@settings(max_examples=150, deadline=None)
@given(
    layout=layouts,
    g=st.sampled_from([4, 6, 12]),
    old=st.sampled_from([1, 2, 3, 4, 6, 12]),
    new=st.sampled_from([1, 2, 3, 4, 6, 12]),
    cut=st.floats(0, 1),
    seed=st.integers(0, 2**30),
    epoch=st.integers(0, 9),
)
def test_a_resume_on_another_world_size_delivers_the_rest_exactly_once(
    layout: list[list[int]], g: int, old: int, new: int, cut: float, seed: int, epoch: int
) -> None:
    if g % old or g % new:
        return
    sources = [blocks_from(layout)]
    n = sources[0].num_rows
    kw = {"seed": seed, "window_rows": g * 3, "first_window_rows": g}
    before = [steps_of(sources, [n], g, old, r, epoch, **kw) for r in range(old)]
    steps = len(before[0])
    c = int(cut * steps)
    seen = [x for r in before for step in r[:c] for x in step.tolist()]
    after = [steps_of(sources, [n], g, new, r, epoch, **kw) for r in range(new)]
    rest = [x for r in after for step in r[c:] for x in step.tolist()]
    everything = collections.Counter(seen + rest)
    assert set(everything) == set(range(n))  # every record of the epoch
    assert sum(everything.values()) == steps * g  # once, plus fewer than g of padding
    assert sum(v - 1 for v in everything.values()) == steps * g - n


def test_a_batch_samples_the_whole_window() -> None:
    """On a snapshot written in class order, each global batch mixes classes like a random
    sample: its records come from as many places of the window as it has records."""
    sources = [blocks_from([[50] * 4] * 50)]  # 10,000 records in blocks of 50
    plan = GlobalPlan(sources, GlobalOptions(100, (10_000,), window_rows=5000), 0)
    classes = [len(set((step // 100).tolist())) for step in positions(plan)]
    # a uniform sample of 100 of 100 classes holds 63.4 distinct ones on average
    assert np.mean(classes) > 55, np.mean(classes)


@pytest.mark.parametrize("world", [1, 4])
def test_neighbours_in_a_batch_are_apart_in_the_window(world: int) -> None:
    """Global batch ``t`` takes one record of each atom, and neighbouring atoms are
    neighbouring stretches of the window: in atom order, 61 % of a batch's neighbours on a
    class-sorted snapshot shared their class (random order: 1 %), and every micro-batch cut
    from a batch (gradient accumulation, a device's share) held a few classes. Each rank's
    slice is in an order of its own, drawn for (seed, epoch, step, slice)."""
    sources = [blocks_from([[100] * 10] * 10)]  # 10,000 records, 100 classes of 100 in order
    g = 200
    ranks = [steps_of(sources, [10_000], g, world, r, 0, window_rows=10_000) for r in range(world)]
    same = [np.mean(step[1:] // 100 == step[:-1] // 100) for rank in ranks for step in rank]
    assert np.mean(same) < 0.05, np.mean(same)  # (uniform: 0.01)
    micro = [len(set((step[i : i + 10] // 100).tolist())) for rank in ranks for step in rank
             for i in range(0, len(step), 10)]  # fmt: skip
    assert np.mean(micro) > 9.0, np.mean(micro)  # 10 records of 100 classes: 9.56 on average
    unshuffled = steps_of(sources, [10_000], g, world, 0, 0, window_rows=10_000, shuffle=False)
    assert all(np.all(np.diff(step) > 0) for step in unshuffled)  # (without shuffle: in order)


@pytest.mark.parametrize(
    ("total", "weights", "caps", "want"),
    [
        (10, [1, 1], None, [5, 5]),
        (10, [1, 2], None, [3, 7]),
        (7, [1, 1, 1], None, [3, 2, 2]),
        (5, [1, 0, 1], None, [3, 0, 2]),
        (9, [0.5, 0.5], [4, 100], [4, 5]),
    ],
)
def test_apportion(
    total: int, weights: list[float], caps: list[int] | None, want: list[int]
) -> None:
    assert apportion(total, weights, caps) == want
    assert sum(want) == total


def test_a_global_batch_that_world_size_does_not_divide_is_refused() -> None:
    with pytest.raises(ValueError, match="global_batch_size=12 is not divisible by world_size=5"):
        GlobalOptions(12, (100,), world_size=5)


@pytest.mark.parametrize("seed", [None, -1, True, 1.5])
def test_a_seed_that_is_not_an_integer_is_refused_and_none_says_why(seed: object) -> None:
    """seed=None (HF datasets' and torch's "a random one") was refused with no reason: an order
    drawn by each rank would deliver records twice across ranks."""
    with pytest.raises(ValueError, match=f"seed must be an integer >= 0, got {seed!r}") as no:
        GlobalOptions(12, (100,), seed=seed)  # type: ignore[arg-type]
    assert ("the same on every rank" in str(no.value)) == (seed is None)


@settings(max_examples=300, deadline=None)
@given(
    layout=st.lists(layouts, min_size=1, max_size=3),
    g=st.integers(1, 12),
    windows=st.lists(st.tuples(st.integers(1, 400), st.integers(0, 200)), min_size=2, max_size=2),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_windows_that_cut_the_epoch_alike_make_the_same_global_order(
    layout: list[list[list[int]]], g: int, windows: list[tuple[int, int]], seed: int,
    shuffle: bool, drop_last: bool,
) -> None:  # fmt: skip
    """What a global state's comparison relies on to resume with another window (another
    shuffle_buffer in bytes over other columns; a probe was refused where both windows held
    the epoch): where :func:`same_windows` says two configs cut the epoch alike, their plans
    give the same global batches; and windows that both hold the epoch cut it alike."""
    from snapshot_cli.readers.elastic import same_windows

    sources = [blocks_from(s) for s in layout]
    counts = [b.num_rows for b in sources]
    if drop_last and sum(counts) < g:
        return
    configs = [{"records_per_epoch": counts, "global_batch_size": g, "drop_last": drop_last,
                "window_rows": w, "first_window_rows": f} for w, f in windows]  # fmt: skip
    kw = {"shuffle": shuffle, "seed": seed, "drop_last": drop_last}
    plans = [steps_of(sources, counts, g, 1, 0, 1, window_rows=w, first_window_rows=f, **kw)
             for w, f in windows]  # fmt: skip
    same = same_windows(configs[0], configs[1])
    if same:
        assert len(plans[0]) == len(plans[1])
        assert all(np.array_equal(a, b) for a, b in zip(*plans, strict=True))
    steps = sum(counts) // g if drop_last else -(-sum(counts) // g)
    if all(w // g >= steps and (f == 0 or f >= w) for w, f in windows):  # (one window each)
        assert same
