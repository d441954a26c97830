"""Invariants of the read plan: disjoint, complete, balanced, deterministic, resumable."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot_cli.readers import plan as plan_mod
from snapshot_cli.readers.plan import Blocks, EpochPlan, PlanOptions


def blocks_from(sizes: list[list[int]]) -> Blocks:
    shard, batch, rows = [], [], []
    for s, batches in enumerate(sizes):
        for b, n in enumerate(batches):
            shard.append(s)
            batch.append(b)
            rows.append(n)
    return Blocks(np.array(shard, np.int64), np.array(batch, np.int64), np.array(rows, np.int64))


layouts = st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=6), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    layout=layouts,
    world=st.integers(1, 5),
    batch=st.integers(1, 17),
    window=st.integers(1, 90),
    first=st.integers(0, 90),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 1000),
    shuffle=st.booleans(),
)
def test_ranks_are_disjoint_complete_and_balanced(
    layout: list[list[int]],
    world: int,
    batch: int,
    window: int,
    first: int,
    seed: int,
    epoch: int,
    shuffle: bool,
) -> None:
    blocks = blocks_from(layout)
    n = blocks.num_rows
    parts = []
    for drop_last in (False, True):
        parts = [
            EpochPlan(
                blocks,
                PlanOptions(batch, shuffle, seed, r, world, drop_last, window, first),
                epoch,
            )
            for r in range(world)
        ]
        assert len({p.num_batches for p in parts}) == 1  # every rank: same number of batches
        for p in parts:  # windows tile the part; none but the last breaks a batch
            bounds = [p.window_bounds(k) for k in range(p.num_windows)]
            assert [a for a, _ in bounds] == [0, *[b for _, b in bounds[:-1]]][: len(bounds)]
            assert not bounds or bounds[-1][1] == p.num_rows
            assert all(b % batch == 0 for _, b in bounds[:-1])
            assert all(b - a <= p.window_rows for a, b in bounds)
            for i in range(p.num_batches):
                k, lo, hi = p.batch_bounds(i)
                a, b = p.window_bounds(k)
                assert a + lo == i * batch and 0 <= lo < hi <= b - a
        seqs = [p.positions() for p in parts]
        if drop_last:
            every = np.concatenate(seqs)
            assert len(every) == len(set(every.tolist()))  # disjoint
            assert all(len(s) == (n // world) // batch * batch for s in seqs)
        else:
            every = np.concatenate(seqs)
            assert set(every.tolist()) == set(range(n))  # complete
            assert len(every) == -(-n // world) * world  # padding: fewer than `world` repeats
            assert len(every) - n < world
    if world == 1:
        (only,) = parts
        seq = EpochPlan(blocks, PlanOptions(batch, shuffle, seed, 0, 1, False, window), epoch)
        assert sorted(seq.positions().tolist()) == list(range(n))  # a permutation
        if not shuffle:
            assert seq.positions().tolist() == list(range(n))  # written order


@settings(max_examples=60, deadline=None)
@given(
    layout=layouts, seed=st.integers(0, 2**31), batch=st.integers(1, 9), window=st.integers(1, 50)
)
def test_deterministic_and_fresh_per_epoch(
    layout: list[list[int]], seed: int, batch: int, window: int
) -> None:
    blocks = blocks_from(layout)
    opts = PlanOptions(batch, True, seed, 0, 1, False, window)
    a = EpochPlan(blocks, opts, 3).positions()
    assert np.array_equal(a, EpochPlan(blocks, opts, 3).positions())
    if len(blocks) >= 6:  # 720 block orders: four epochs agree by chance with odds 1 / 720**3
        others = [EpochPlan(blocks, opts, e).positions() for e in (4, 5, 6)]
        assert not all(np.array_equal(a, o) for o in others)


def test_an_epoch_starts_with_a_ramp_of_growing_windows() -> None:
    blocks = blocks_from([[10] * 100])
    plan = EpochPlan(blocks, PlanOptions(4, True, 0, 0, 1, False, 64, 9), 0)
    sizes = [b - a for a, b in (plan.window_bounds(k) for k in range(plan.num_windows))]
    assert sizes[:5] == [8, 16, 32, 64, 64] and sum(sizes) == 1000
    flat = EpochPlan(blocks, PlanOptions(4, True, 0, 0, 1, False, 64), 0)
    assert flat.num_windows == 16 and plan.num_windows == 18
    assert sorted(plan.positions().tolist()) == list(range(1000))


def test_batches_never_span_windows() -> None:
    blocks = blocks_from([[10] * 10])
    plan = EpochPlan(blocks, PlanOptions(7, True, 0, 0, 1, False, 20), 0)
    assert plan.window_rows == 14
    for i in range(plan.num_batches):
        k, a, b = plan.batch_bounds(i)
        wa, wb = plan.window_bounds(k)
        assert 0 <= a < b <= wb - wa


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": 4, "rank": 2, "world_size": 2}, r"rank must be in \[0, world_size=2\)"),
        ({"batch_size": 4, "world_size": 0}, "world_size must be a positive integer"),
        ({"batch_size": 4, "window_rows": 0}, "shuffle_buffer must be a positive integer"),
        ({"batch_size": 4, "seed": -1}, "seed must be an integer >= 0"),
        ({"batch_size": 4, "seed": True}, "seed must be an integer >= 0, got True"),
        (
            {"batch_size": 4, "seed": None},
            "got None: the order is drawn from it, the same on every",
        ),
    ],
)
def test_options_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlanOptions(**kwargs)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    n=st.one_of(st.integers(0, 40), st.integers(plan_mod.COMPILED_FROM - 2, 1 << 19)),
)
def test_the_compiled_shuffle_is_numpys(seed: int, n: int) -> None:
    """A window's order comes from the compiled shuffle for large windows: the same
    permutation as ``Generator.permutation`` (the order of a seed must not depend on whether
    the extension was built), and the generator left in the same state."""
    assert plan_mod._shuffle is not None  # built by `make test`'s install, never skipped
    mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
    got = plan_mod.random_permutation(mine, n)
    assert got.dtype == np.int64
    assert np.array_equal(got, theirs.permutation(n))
    assert mine.integers(0, 2**63) == theirs.integers(0, 2**63)
    if n >= 2:  # the compiled path itself, below its threshold too
        a = np.arange(n, dtype=np.int64)
        bits = np.random.default_rng(seed).bit_generator
        plan_mod._shuffle(bits, a)
        assert np.array_equal(a, np.random.default_rng(seed).permutation(n))


def test_the_compiled_shuffle_refuses_what_it_cannot_shuffle() -> None:
    bits = np.random.default_rng(1).bit_generator
    with pytest.raises(TypeError, match="8-byte items"):
        plan_mod._shuffle(bits, np.arange(8, dtype=np.int32))
    with pytest.raises(TypeError, match="1-d"):  # numpy shuffles a 2-d array's rows
        plan_mod._shuffle(bits, np.arange(12).reshape(6, 2))
    with pytest.raises(BufferError):
        plan_mod._shuffle(bits, b"\0" * 64)
    with pytest.raises(AttributeError):
        plan_mod._shuffle(object(), np.arange(8))
    with pytest.raises(ValueError):  # a capsule of another kind
        plan_mod._shuffle(type("Fake", (), {"capsule": object()})(), np.arange(8))


@pytest.mark.parametrize("kind", ["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"])
@pytest.mark.parametrize("n", [2, 3, 129, 70_001])
def test_the_compiled_shuffle_is_numpys_for_every_bit_generator(kind: str, n: int) -> None:
    """Whatever numpy bit generator: numpy's permutation, and the same state after."""
    mine = np.random.Generator(getattr(np.random, kind)(17))
    theirs = np.random.Generator(getattr(np.random, kind)(17))
    mine.integers(0, 2**32)  # a generator that has drawn before (a half-used 32-bit draw)
    theirs.integers(0, 2**32)
    a = np.arange(n, dtype=np.int64)
    plan_mod._shuffle(mine.bit_generator, a)
    assert np.array_equal(a, theirs.permutation(n))
    assert mine.integers(0, 2**63, size=5).tolist() == theirs.integers(0, 2**63, size=5).tolist()
    assert mine.integers(0, 7, size=5).tolist() == theirs.integers(0, 7, size=5).tolist()


@settings(max_examples=200, deadline=None)
@given(key=st.lists(st.integers(0, 2**70), min_size=1, max_size=4))
def test_a_keys_generator_is_numpys_default_rng_of_its_words(key: list[int]) -> None:
    """``_rng`` seeds numpy's generator from the key's 32-bit words (an array of them where
    they fit: the same seed as the list, which every order depends on)."""
    words = [k & 0xFFFFFFFF for k in key] + [k >> 32 for k in key]
    ours = plan_mod._rng(*key)
    numpys = np.random.default_rng(words)
    assert ours.bit_generator.state == numpys.bit_generator.state
    assert np.array_equal(ours.permutation(50), numpys.permutation(50))
