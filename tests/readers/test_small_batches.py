"""Small batches (batch_size 1-64): their fixed cost per batch, and what must not change.

A batch of 1 or 7 records mostly starts off a 64-byte boundary of its window, so its columns
are copied to aligned places: one buffer per column group took ~65 % of such a batch's time
(12 us against numpy's 2 for a take). A batch's copies now share one buffer, and a map's rng
is drawn from the same seed words without numpy's coercion of a list (the same values).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import window
from snapshot_cli.readers.plan import EpochPlan

RECORDS = 3_000


def root(a: np.ndarray) -> object:
    """The object that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base if a.base is not None else a


def test_a_batch_s_copies_are_carved_out_of_one_buffer() -> None:
    """Columns of three dtypes and shapes (three groups): one allocation, not three."""
    sources = [
        np.zeros((9, 5), np.uint8)[1:2],
        np.arange(9, dtype=np.int64)[1:2],
        np.arange(9, dtype=np.float32)[1:2],
        np.arange(9, dtype=np.float32)[2:3],
    ]
    copies = window.aligned_copies(sources)
    assert len({id(root(c)) for c in copies}) == 1
    for copy, source in zip(copies, sources, strict=True):
        assert np.array_equal(copy, source) and copy.dtype == source.dtype
        assert copy.__array_interface__["data"][0] % window.ALIGN == 0
    assert not any(np.shares_memory(a, b) for i, a in enumerate(copies) for b in copies[i + 1 :])


def test_a_large_batch_s_groups_keep_buffers_of_their_own() -> None:
    """Past SHARED_COPIES, a column kept from every batch (labels collected for a metric)
    must not keep the batch's images alive: a buffer a dtype and shape, as before."""
    images = [np.zeros((9, 128, 128, 3), np.uint8)[i : i + 1] for i in (1, 2)]
    label = np.arange(9, dtype=np.int64)[1:2]
    copies = window.aligned_copies([*images, label])
    assert images[0].nbytes * 2 > window.SHARED_COPIES
    assert root(copies[0]) is root(copies[1]) and root(copies[2]) is not root(copies[0])
    assert root(copies[2]).nbytes < 4096  # (the label's own: a few aligned bytes)
    for copy, source in zip(copies, [*images, label], strict=True):
        assert np.array_equal(copy, source) and copy.__array_interface__["data"][0] % 64 == 0


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**70),
    st.integers(0, 2**40),
    st.integers(0, 2**34),
    st.integers(0, 2**36),
)
def test_a_map_s_rng_is_the_documented_one(seed: int, epoch: int, rank: int, index: int) -> None:
    """``default_rng([seed, epoch, rank, batch, 0x6D6170])``, as before, for every size of
    number (those of more than 32 bits are several words of numpy's own splitting)."""
    from snapshot_cli.readers.map_outputs import map_rng  # (here: the snap before had none)

    want = np.random.default_rng([seed, epoch, rank, index, 0x6D6170]).integers(0, 2**63, 4)
    assert np.array_equal(map_rng(seed, epoch, rank, index).integers(0, 2**63, 4), want)
    small = [v % 2**32 for v in (seed, epoch, rank, index)]
    want = np.random.default_rng([*small, 0x6D6170]).random(3)
    assert np.array_equal(map_rng(*small).random(3), want)


def records(i: int) -> object:
    ids = np.arange(i * RECORDS // 2, (i + 1) * RECORDS // 2)
    yield snap.Batch(
        i=ids,
        f=ids.astype(np.float32),
        img=(ids[:, None] + np.arange(12)).astype(np.uint8).reshape(-1, 3, 4),
        b=ids % 3 == 0,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("small") / "s")
    snap.create(records, out, inputs=range(2), workers=0, inputs_per_task=1, compression="lz4")
    return out


@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_small_batches_are_aligned_writable_contiguous_and_the_plan_s(
    made: str, batch_size: int
) -> None:
    """Every batch of a kept epoch (small windows: many batches off a 64-byte boundary) has
    the records of the plan, each column 64-byte aligned, writable, contiguous, and in
    memory of its own (no column shares memory with another column or batch)."""
    loader = snap.open(made).loader(batch_size, seed=4, shuffle_buffer=500)
    kept = list(loader)
    want = EpochPlan(loader.blocks, loader.plan_options, 0).positions()
    got = np.concatenate([b["i"] for b in kept])
    assert np.array_equal(got, want)
    for b in kept:
        assert np.array_equal(b["f"], b["i"].astype(np.float32))
        assert np.array_equal(b["b"], b["i"] % 3 == 0)
        img = (b["i"][:, None] + np.arange(12)).astype(np.uint8).reshape(-1, 3, 4)
        assert np.array_equal(b["img"], img)
        for v in b.values():
            assert v.flags.writeable and v.flags.c_contiguous
            assert v.__array_interface__["data"][0] % window.ALIGN == 0
        columns = list(b.values())
        assert not any(
            np.shares_memory(x, y) for i, x in enumerate(columns) for y in columns[i + 1 :]
        )
    for b, later in zip(kept[:50], kept[1:51], strict=False):  # (each with the next)
        assert not any(np.shares_memory(b[k], later[k]) for k in b)
    loader.close()


def test_a_map_gets_the_documented_rng_per_batch(made: str) -> None:
    """What a map draws from its rng is a function of (seed, epoch, rank, batch) as documented."""

    def draw(batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"i": batch["i"], "r": rng.integers(0, 2**62, 2)}

    loader = snap.open(made).loader(7, seed=9, map=draw, epochs=2)
    for n, b in enumerate(loader):
        epoch, index = divmod(n, loader.batches_per_epoch())
        want = np.random.default_rng([9, epoch, 0, index, 0x6D6170]).integers(0, 2**62, 2)
        assert np.array_equal(b["r"], want)
    loader.close()
