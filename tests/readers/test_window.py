"""Shuffle windows: records scattered to their slots as they are decoded, batches served as
views of recycled slabs. Held batches must never change, every decode path must give the same
records, and the slabs must go round when the consumer drops its batches.

Uncompressed snapshots are read through gathered windows instead (:mod:`.gather`, tested in
test_gather.py): every test here runs with slot windows, as a loader without the compiled
gather, or reading a compressed snapshot, does."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import subprocess
import sys
import threading
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import direct, gather, slabs, window

N = 6000


@pytest.fixture(autouse=True)
def slot_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gather, "ENABLED", False)


def records() -> Any:
    rng = np.random.default_rng(5)
    for start in range(0, N, 500):
        ids = np.arange(start, start + 500)
        yield snap.Batch(
            id=ids,
            image=rng.integers(0, 256, (500, 3, 8, 8), dtype=np.uint8),
            f=(ids * 0.5).astype(np.float32),
            small=(ids % 251).astype(np.uint8),  # one byte per record: no reshaping may hide
            pair=np.stack([ids, -ids], axis=1).astype(np.int16),
        )


@pytest.fixture(scope="module", params=["zstd", "lz4", "none"])
def made(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("win") / request.param
    snap.create(records, str(out), workers=0, shard_size="96KiB", batch_rows=100,
                compression=request.param)  # fmt: skip
    return str(out)


def expected() -> dict[int, tuple[np.ndarray, float]]:
    rows: dict[int, tuple[np.ndarray, float]] = {}
    for b in records():
        for i, img, f in zip(b["id"], b["image"], b["f"], strict=True):
            rows[int(i)] = (img, float(f))
    return rows


def check(batches: list[dict[str, np.ndarray]], want: dict[int, tuple[np.ndarray, float]]) -> None:
    ids = [int(i) for b in batches for i in b["id"]]
    assert sorted(ids) == list(range(N))
    for b in batches:
        assert b["small"].dtype == np.uint8 and b["pair"].dtype == np.int16
        assert b["small"].shape == b["id"].shape and b["pair"].shape == (len(b["id"]), 2)
        assert (b["small"] == b["id"] % 251).all()
        assert (b["pair"][:, 0] == b["id"].astype(np.int16)).all()
        assert (b["pair"][:, 1] == (-b["id"]).astype(np.int16)).all()
        for i, img, f in zip(b["id"], b["image"], b["f"], strict=True):
            assert np.array_equal(img, want[int(i)][0]) and f == want[int(i)][1]


@pytest.mark.parametrize("batch_size", [64, 100, 7])
def test_held_batches_never_change_and_records_are_right(made: str, batch_size: int) -> None:
    """A consumer that keeps every batch of two epochs (many windows, slabs that would be
    reused) still holds the right records at the end; batches are owned, writable and
    contiguous, and 64-byte aligned (a column whose place in the slab is not, is copied)."""
    s = snap.open(made)
    loader = s.loader(batch_size, seed=2, shuffle_buffer=700, epochs=2)
    kept = list(loader)
    want = expected()
    check(kept[: len(kept) // 2], want)
    check(kept[len(kept) // 2 :], want)
    for b in kept:
        for v in b.values():
            assert v.flags.writeable and v.flags.c_contiguous
            assert v.ctypes.data % window.ALIGN == 0
    kept[0]["image"][:] = 0  # the consumer's to change: nothing else sees it
    assert not any(np.shares_memory(kept[0]["image"], b["image"]) for b in kept[1:])


def test_direct_decode_gives_what_arrow_gives(made: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seed gives the same batches whether record batches are decoded by snap
    (straight to their slots) or by Arrow."""
    placed = []
    real_place, real_regions = direct.place, direct.regions

    def counting_place(*args: Any) -> bool:
        placed.append(1)
        return real_place(*args)

    def counting_regions(*args: Any) -> dict[str, tuple[int, int]]:
        placed.append(1)  # the uncompressed path scatters the file's bytes itself
        return real_regions(*args)

    monkeypatch.setattr(direct, "place", counting_place)
    monkeypatch.setattr(direct, "regions", counting_regions)
    ours = list(snap.open(made).loader(64, seed=4, shuffle_buffer=900))
    assert placed  # the first pass decoded record batches itself
    placed.clear()
    monkeypatch.setattr(direct.Placement, "of", classmethod(lambda cls, schema, columns: None))
    arrow = list(snap.open(made).loader(64, seed=4, shuffle_buffer=900))
    assert not placed  # the second pass really went through Arrow
    assert len(ours) == len(arrow)
    for a, b in zip(ours, arrow, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k])


def test_slabs_go_round_when_batches_are_dropped(made: str) -> None:
    """A consumer that drops each batch makes the loader reuse a few slabs for an epoch of
    many windows, instead of allocating one per window."""
    s = snap.open(made)
    loader = s.loader(50, seed=1, shuffle_buffer=500, epochs=3, prefetch=2)
    for _ in loader:
        pass
    pool = loader._context.windows
    windows = 3 * -(-N // 500)
    assert 1 <= pool.allocated <= 5 < windows, (pool.allocated, windows)


@pytest.mark.parametrize("processes", [0, 2])
def test_a_consumer_that_drops_its_batches_needs_two_slabs(made: str, processes: int) -> None:
    """One slab is served while the next window is read into the other: the window after
    waits for the first slab to come free (the consumer moves on) instead of a third slab,
    a window's memory more, being made."""
    s = snap.open(made)
    loader = s.loader(50, seed=1, shuffle_buffer=500, epochs=3, processes=processes)
    ids = [int(i) for b in loader for i in b["id"]]
    assert sorted(ids) == sorted(list(range(N)) * 3)
    assert loader._context.windows.allocated == 2
    assert not loader._context.windows.kept


@pytest.mark.parametrize("keep", ["all", "one per window", "first ten"])
def test_a_consumer_that_keeps_batches_gets_new_slabs_and_right_records(
    made: str, keep: str
) -> None:
    """A consumer that keeps batches (all, one in a while, or only at the start) never waits
    for a slab it holds: the loader makes another, and every kept batch stays right."""
    s = snap.open(made)
    loader = s.loader(50, seed=1, shuffle_buffer=500, epochs=2)
    kept, seen = [], []
    for i, b in enumerate(loader):
        seen += b["id"].tolist()
        if (
            keep == "all"
            or (keep == "one per window" and i % 10 == 3)
            or (keep == "first ten" and i < 10)
        ):
            kept.append((b, b["id"].copy(), b["image"].copy()))
    assert sorted(seen) == sorted(list(range(N)) * 2)
    for b, ids, image in kept:
        assert np.array_equal(b["id"], ids) and np.array_equal(b["image"], image)
    pool = loader._context.windows
    assert pool.kept and pool.allocated >= 3


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch_size=st.sampled_from([7, 50, 256]),
    shuffle_buffer=st.sampled_from([60, 500, 2000]),
    prefetch=st.sampled_from([1, 3, 64]),
    keep=st.sampled_from([0.0, 0.02, 0.3, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_any_consumer_gets_every_record_and_its_kept_batches_unchanged(
    made: str, batch_size: int, shuffle_buffer: int, prefetch: int, keep: float, seed: int
) -> None:
    """Whatever the consumer keeps, and however many batches a window has against the
    prefetch depth, waiting for a slab to come free never hangs the loader, every record
    arrives once an epoch, and what was kept stays as it was. A consumer that keeps nothing
    needs two slabs."""
    rng = np.random.default_rng(seed)
    loader = snap.open(made).loader(
        batch_size, seed=seed, shuffle_buffer=shuffle_buffer, prefetch=prefetch, epochs=2
    )
    seen: list[int] = []
    kept: list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]] = []

    def consume() -> None:
        for b in loader:
            seen.extend(b["id"].tolist())
            if rng.random() < keep:
                kept.append((b, b["id"].copy(), b["image"].copy()))

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(120)  # a failure detector, not synchronisation: a hang fails here
    assert not thread.is_alive(), "the loader hung"
    assert sorted(seen) == sorted(list(range(N)) * 2)
    for b, ids, image in kept:
        assert np.array_equal(b["id"], ids) and np.array_equal(b["image"], image)
    if keep == 0.0:
        assert loader._context.windows.allocated <= 2


def test_a_kept_batch_pins_its_slab(tmp_path: Path) -> None:
    """The pool never hands out a slab a batch still refers to."""
    schema = snap.open(_tiny(tmp_path)).schema
    pool = slabs.WindowPool(schema, ["id"], rows=10)
    first = pool.get(10, np.arange(10)[::-1].copy())
    first.scatter(0, {"id": np.arange(10)})
    held = first.take(0, 5)
    del first
    second = pool.get(10, None)
    assert not np.shares_memory(second.fixed["id"], held["id"])
    assert held["id"].tolist() == [9, 8, 7, 6, 5]
    del second, held
    third = pool.get(10, None)
    assert len(pool._slabs) == 2 and any(
        np.shares_memory(third.fixed["id"], s.storage["id"]) for s in pool._slabs
    )


def _tiny(tmp_path: Path) -> str:
    def gen() -> Any:
        yield snap.Batch(id=np.arange(10))

    out = str(tmp_path / "tiny")
    snap.create(gen, out, workers=0)
    return out


def test_keeping_batches_of_many_windows_warns_once(
    made: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches pin their window's slab: a consumer that keeps batches of many windows (here
    with the 1 GiB floor of the warning lowered) is told what that costs and what to do, once."""
    monkeypatch.setattr(slabs, "PINNED_WARNING_BYTES", 0)
    s = snap.open(made)
    pinned = r"batches you keep hold \d+ loader windows' memory"
    with pytest.warns(RuntimeWarning, match=pinned) as seen:
        kept = [b["image"] for b in s.loader(50, seed=1, shuffle_buffer=300)]
    assert len([w for w in seen if "loader windows" in str(w.message)]) == 1
    assert sum(len(k) for k in kept) == N
    # and a user sees it: Python's default filters (it was a ResourceWarning, which they hide)
    script = (
        "import sys; import snapshot_cli as snap; from snapshot_cli.readers import slabs, units; "
        "slabs.PINNED_WARNING_BYTES = 0; units.UNIT_BYTES = 0; "
        "kept = [b['image'] for b in snap.open(sys.argv[1]).loader(50, seed=1, shuffle_buffer=300)]"
    )
    err = subprocess.run([sys.executable, "-c", script, made], capture_output=True, text=True,
                         check=True).stderr  # fmt: skip
    assert "RuntimeWarning: batches you keep hold" in err


def test_slabs_in_memory_of_their_own_behave_the_same(
    made: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large slabs are anonymous maps (small pages): held batches stay right, dropped ones
    let the slabs go round, and every batch is still a writable aligned array."""
    monkeypatch.setattr(window, "SLAB_MMAP_MIN", 0)
    s = snap.open(made)
    loader = s.loader(64, seed=2, shuffle_buffer=700, epochs=2)
    kept = list(loader)
    check(kept[: len(kept) // 2], expected())
    assert all(b["image"].flags.writeable and b["image"].ctypes.data % 64 == 0 for b in kept)
    loader = s.loader(50, seed=1, shuffle_buffer=500, epochs=3, prefetch=2)
    for _ in loader:
        pass
    assert loader._context.windows.allocated <= 5


def test_columns_the_window_keeps_as_arrow_data_are_not_placed(tmp_path: Path) -> None:
    """A plain fixed-size list column (Arrow data to snap, not a tensor) beside fixed-width
    ones: the loader decodes such batches through Arrow, shuffled or not, and every record
    arrives once with its values."""

    def gen() -> Any:
        for i in range(4):
            ids = np.arange(i * 500, (i + 1) * 500)
            flat = pa.array(np.stack([ids, ids + 1], axis=1).reshape(-1).astype(np.float32))
            yield snap.Batch(v=pa.FixedSizeListArray.from_arrays(flat, 2), id=ids)

    out = str(tmp_path / "fsl")
    snap.create(gen, out, workers=0, batch_rows=100)
    for shuffle in (True, False):
        got = {}
        for b in snap.open(out).loader(64, seed=1, shuffle=shuffle):
            for i, v in zip(b["id"], b["v"], strict=True):
                got[int(i)] = [float(x) for x in v]
        assert got == {i: [float(i), float(i + 1)] for i in range(2000)}


def test_a_record_batchs_regions_are_remembered_per_column_selection(made: str) -> None:
    """A shard file remembers where each record batch's columns are (a later epoch skips
    working it out again), for the column selection it was worked out for: reading the same
    record batches for other columns, then the first ones again, gives each its own values."""
    from snapshot_cli import storage
    from snapshot_cli.readers.blocks import BlockFile

    s = snap.open(made)
    entry = s.manifest.shards[0]
    f = BlockFile(storage.join(made, entry.path), entry, s.schema, entry.path)
    selections = [["image", "f"], ["small", "pair", "id"], ["image", "f"]]
    for columns in selections:
        placement = direct.Placement.of(s.schema, columns)
        assert placement is not None
        for i, rows in enumerate(entry.batch_sizes()):
            got = f.read_values(i, True, rows, placement)
            assert got is not None and list(got) == columns
            want = f.read(i, False)
            for name in columns:
                arrow = want.column(name)
                if name == "image":
                    flat = arrow.storage.flatten().to_numpy()
                    assert np.array_equal(got[name].reshape(-1), flat)
                elif name == "pair":
                    assert np.array_equal(
                        got[name], arrow.storage.flatten().to_numpy().reshape(-1, 2)
                    )
                else:
                    assert np.array_equal(got[name], arrow.to_numpy())


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_large_records_read_straight_to_their_slots_match_arrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, compiled: bool, verify: bool
) -> None:
    """Without the compiled decode, records of 4 KiB or more of an uncompressed snapshot are
    read from the file straight to their shuffled slots by preadv (a small column beside them
    is staged, then scattered); with it, the compiled call puts them there, checked or not
    (faster, measured). The batches are those Arrow's decoder gives, first epoch (checked
    where ``verify``) and second, and a compressed snapshot never takes the preadv path."""
    monkeypatch.setattr(direct, "AVAILABLE", compiled)
    rng = np.random.default_rng(3)

    def gen() -> Any:
        for start in range(0, 900, 300):
            ids = np.arange(start, start + 300)
            yield snap.Batch(
                id=ids,
                image=rng.integers(0, 256, (300, 5, 30, 30), dtype=np.uint8),  # 4,500 bytes
                tag=(ids % 7).astype(np.int16),
            )

    out = str(tmp_path / codec)
    snap.create(gen, out, workers=0, batch_rows=64, shard_size="600KiB", compression=codec)
    pieces = []
    real = window.SlotTarget.buffers

    def counting(self: window.SlotTarget) -> list[np.ndarray]:
        got = real(self)
        pieces.append(len(got))
        return got

    monkeypatch.setattr(window.SlotTarget, "buffers", counting)

    def two_epochs() -> list[dict[str, np.ndarray]]:
        loader = snap.open(out).loader(50, seed=9, shuffle_buffer=400, epochs=2, verify=verify)
        return [{k: v.copy() for k, v in b.items()} for b in loader]

    ours = two_epochs()
    if codec == "none" and not compiled:
        assert max(pieces) == 64 and 1 in pieces  # image: one piece per record; tag: staged
    else:
        assert not pieces
    pieces.clear()
    monkeypatch.setattr(direct.Placement, "of", classmethod(lambda cls, schema, columns: None))
    arrow = two_epochs()
    assert not pieces
    assert len(ours) == len(arrow) == 2 * 18
    for a, b in zip(ours, arrow, strict=True):
        for k in ("id", "image", "tag"):
            assert np.array_equal(a[k], b[k])
        assert (a["tag"] == a["id"] % 7).all()
    ids = np.concatenate([b["id"] for b in ours[:18]])
    assert sorted(ids.tolist()) == list(range(900))


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_window_of_no_records_can_be_made_and_served(shuffled: bool) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.fixed_shape_tensor(pa.float32(), [2, 4]))])
    w = window.Window(schema, ["id", "x"], 0, order=np.arange(0) if shuffled else None)
    w.finish()
    batch = w.take(0, 0)
    assert batch["id"].shape == (0,) and batch["x"].shape == (0, 2, 4)


def resident_pages(address: int, pages: int) -> int | None:
    """Pages of ``[address, address + pages)`` in memory (mincore), None once unmapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    vec = (ctypes.c_ubyte * pages)()
    size = ctypes.c_size_t(pages * mmap.PAGESIZE)
    if libc.mincore(ctypes.c_void_p(address), size, vec) != 0:
        assert ctypes.get_errno() == errno.ENOMEM, os.strerror(ctypes.get_errno())
        return None
    return sum(v & 1 for v in vec)


class Inline(Executor):
    """Runs what is submitted at once, in the calling thread."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore, MADV_DONTNEED")
def test_slabs_let_go_are_given_back_in_parts_once_no_batch_refers_to_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the windows gather, the first epoch's slabs are given back by a read thread after
    a hand-over, in parts of FREE_PART bytes (unmapped at once, 512 MiB held every map of the
    process up for ~50 ms), then unmapped; a slab a batch still refers to is left whole until
    the batch is dropped; at a pass's end one still held is let go, freed with its batch."""
    monkeypatch.setattr(window, "SLAB_MMAP_MIN", 0)  # slabs in maps of their own, any size
    pages = 16
    rows = pages * mmap.PAGESIZE // 8
    pool = slabs.WindowPool(pa.schema([("x", pa.int64())]), ["x"], rows)
    first, second = pool.get(rows), pool.get(rows)  # two slabs: both windows alive
    assert isinstance(first, window.Window) and isinstance(second, window.Window)
    first.storage["x"][:] = 1
    second.storage["x"][:] = 2
    at = [first.storage["x"].ctypes.data, second.storage["x"].ctypes.data]
    held = first.storage["x"][5:9]  # a batch the consumer still has
    del first, second
    assert [resident_pages(a, pages) for a in at] == [pages, pages]
    seen = []
    discard = gather.discard

    def noting(buffer: np.ndarray, start: int, length: int, part: int) -> bool:
        done = discard(buffer, start, length, part)
        seen.append((start, length, part, resident_pages(at[1], pages)))
        return bool(done)

    monkeypatch.setattr(gather, "discard", noting)
    pool.gathering()
    pool.between(Inline())
    assert seen == [(0, pages * mmap.PAGESIZE, slabs.FREE_PART, 0)]
    assert resident_pages(at[1], pages) is None  # every part given back: unmapped
    assert (held == 1).all()
    pool.between(Inline())  # still held: left alone
    assert len(seen) == 1 and resident_pages(at[0], pages) == pages
    pool.let_go()  # the pass ends
    assert (held == 1).all()
    del held  # freed with its last batch
    assert resident_pages(at[0], pages) is None
    assert len(seen) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["uint8", "int32", "float32", "int64", "float16", "bool"]),
            st.lists(st.integers(0, 5), min_size=1, max_size=3),  # (batch, *shape)
            st.integers(0, 7),  # where it starts in its source: most are misaligned
        ),
        min_size=1,
        max_size=8,
    )
)
def test_misaligned_columns_are_copied_each_to_an_aligned_place_of_its_own(
    specs: list[tuple[str, list[int], int]],
) -> None:
    """The columns of a batch whose place in the slab is not 64-byte aligned are copied
    together (columns of one dtype and shape into the rows of one block): each copy has the
    values, dtype and shape of its column, starts on a 64-byte boundary, is contiguous and
    writable, and shares memory with no source and no other copy."""
    sources = []
    for dtype, shape, skip in specs:
        flat = np.arange(skip + int(np.prod(shape)), dtype=np.int64).astype(dtype)
        sources.append(flat[skip:].reshape(shape))
    copies = window.aligned_copies(sources)
    assert len(copies) == len(sources)
    for i, (copy, source) in enumerate(zip(copies, sources, strict=True)):
        assert copy.dtype == source.dtype and copy.shape == source.shape
        assert np.array_equal(copy, source)
        assert copy.flags.c_contiguous and copy.flags.writeable
        if copy.nbytes:
            assert copy.ctypes.data % window.ALIGN == 0
        assert not np.shares_memory(copy, source)
        assert not any(np.shares_memory(copy, other) for other in copies[i + 1 :])


@pytest.mark.units  # (windows read together in units, as a loader reads them)
@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_batches_of_a_small_window_do_not_hold_whole_decoded_record_batches(
    tmp_path: Path, compression: str
) -> None:
    """A record batch of 40 MiB of ragged values read with ``shuffle_buffer=1``: each window
    kept a slice of its decoded record batch, which held all of it, and every batch served
    (the prefetched ones too) held its window's: 520 MiB of Arrow memory for 12 kept batches
    (lz4), 8.4 GB in a probe's snapshot of 242 MiB record batches."""
    out, mib = str(tmp_path / compression), 1 << 20

    @snap.ragged("blob")
    def big(i: int) -> Any:
        yield {"id": i, "blob": np.full(mib, i % 7, np.uint8)}

    snap.create(big, out, inputs=list(range(40)), workers=0, inputs_per_task=40,
                batch_bytes="64MiB", compression=compression)  # fmt: skip
    s = snap.open(out)
    assert [e.record_batches for e in s.shards] == [1]  # one record batch of 40 MiB
    kept, before = [], pa.total_allocated_bytes()
    with s.loader(1, shuffle_buffer=1, seed=0) as loader:
        for batch in loader:
            kept.append(batch)
            if len(kept) == 12:
                held = pa.total_allocated_bytes() - before
                break
    assert held < 4 * 40 * mib, held >> 20  # (the windows in flight; 12 x 40 MiB before)
    for batch in kept:
        (i,) = batch["id"]
        np.testing.assert_array_equal(batch["blob"][0], np.full(mib, i % 7, np.uint8))
