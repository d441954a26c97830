"""Gathered windows (:mod:`snapshot_cli.readers.gather`): uncompressed record batches read
where they are in the page cache, each batch gathered once into a recycled aligned buffer.

The compiled gather is checked against a plain Python model (Hypothesis) and on every kind of
bad argument; the loader's gathered windows must give exactly the batches slot windows give
(the same order, shuffled or not, every batch size, resume, mixtures), keep batches a consumer
holds intact, leave no shard file mapped once a pass ends, and stop at a damaged record batch
before any of its records reach the consumer.
"""

from __future__ import annotations

import errno
import gc
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import _decode
from snapshot_cli.readers import gather
from snapshot_cli.readers.blocks import BlockFile
from snapshot_cli.readers.gather import GatherWindow

from .conftest import damaged_snapshot, same_batches

Sources = gather.Sources


@pytest.fixture(autouse=True)
def gather_any_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check how windows gather on small test records, whose values are smaller
    than a loader gathers by default (:data:`gather.GATHER_MIN_VALUE_BYTES`)."""
    monkeypatch.setattr(gather, "GATHER_MIN_VALUE_BYTES", 0)


def test_a_loader_gathers_values_large_enough_to_copy_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default only: shuffled, feature columns of 4-byte values read faster through slot
    windows (their read and scatter), images through gathered ones."""
    monkeypatch.undo()

    def preprocess(i: int) -> Any:
        yield snap.Batch(image=np.zeros((100, 3, 8, 8), np.uint8), label=np.arange(100) + i,
                         f=np.zeros((100, 1), np.float32))  # fmt: skip

    out = str(tmp_path / "s")
    snap.create(preprocess, out, inputs=[0, 100], workers=0, compression="none")
    for columns, gathers in ((None, True), (["label", "f"], False), (["image"], True)):
        with snap.open(out).loader(16, columns=columns) as loader:
            assert loader._context.windows.gather is gathers, columns
    with snap.open(out).loader(16, columns=["label", "f"], shuffle=False) as loader:
        assert loader._context.windows.gather  # kept in order: runs of records, copied whole


def test_the_compiled_gather_is_built() -> None:
    """`make test` builds the extension (`pip install -e .`): the gathered path is tested,
    never skipped for want of it."""
    assert gather.AVAILABLE and gather.ENABLED


# --- the compiled gather ----------------------------------------------------------------


@st.composite
def gathers(draw: st.DrawFn) -> dict[str, Any]:
    width = draw(st.sampled_from([1, 2, 4, 8]) | st.integers(1, 300))
    n_sources = draw(st.integers(1, 4))
    sizes = [draw(st.integers(width, width * 20 + 7)) for _ in range(n_sources)]
    n_seg = draw(st.integers(1, 6))
    seg_source, seg_base, seg_len = [], [], []
    for _ in range(n_seg):
        s = draw(st.integers(0, n_sources - 1))
        base = draw(st.integers(0, sizes[s] - width))
        seg_source.append(s)
        seg_base.append(base)
        seg_len.append((sizes[s] - base) // width)  # records that fit from base on
    count = draw(st.integers(0, 40))
    seg = [draw(st.integers(0, n_seg - 1)) for _ in range(count)]
    row = [draw(st.integers(0, seg_len[k] - 1)) for k in seg]
    batch_rows = draw(st.integers(0, 9))
    pad = draw(st.integers(0, 70))
    seed = draw(st.integers(0, 2**32 - 1))
    return {"width": width, "sizes": sizes, "seg_source": seg_source, "seg_base": seg_base,
            "seg": seg, "row": row, "batch_rows": batch_rows, "pad": pad, "seed": seed}  # fmt: skip


def model(case: dict[str, Any], sources: list[np.ndarray], out: np.ndarray) -> None:
    w, b = case["width"], case["batch_rows"] or max(1, len(case["seg"]))
    stride = b * w + (case["pad"] if case["batch_rows"] else 0)
    for i, (k, r) in enumerate(zip(case["seg"], case["row"], strict=True)):
        src = sources[case["seg_source"][k]]
        at = case["seg_base"][k] + r * w
        dest = (i // b) * stride + (i % b) * w
        out[dest : dest + w] = src[at : at + w]


@settings(max_examples=300, deadline=None)
@given(gathers())
def test_gather_copies_what_a_plain_loop_copies(case: dict[str, Any]) -> None:
    rng = np.random.default_rng(case["seed"])
    sources = [rng.integers(0, 256, n, dtype=np.uint8) for n in case["sizes"]]
    w, count = case["width"], len(case["seg"])
    b = case["batch_rows"] or max(1, count)
    stride = b * w + (case["pad"] if case["batch_rows"] else 0)
    size = (-(-count // b)) * stride if count else 0
    got, want = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    args = [np.array(case["seg_source"], np.int64), np.array(case["seg_base"], np.int64),
            np.array(case["seg"], np.int32), np.array(case["row"], np.int32)]  # fmt: skip
    extra = (case["batch_rows"], stride) if case["batch_rows"] else ()
    Sources(sources).gather(got, w, *args, *extra)
    model(case, sources, want)
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(gathers(), st.integers(1, 40))
def test_gather_columns_is_one_gather_per_column(case: dict[str, Any], other: int) -> None:
    """Several columns of the same records in one call: each as its own gather would do."""
    rng = np.random.default_rng(case["seed"])
    w, count = case["width"], len(case["seg"])
    b = case["batch_rows"] or max(1, count)
    seg, row = np.array(case["seg"], np.int32), np.array(case["row"], np.int32)
    # a second column, ``other`` bytes a record, its records at the same rows of sources of
    # its own
    sizes2 = [max(n // w, 1) * other for n in case["sizes"]]
    sources = [rng.integers(0, 256, n, dtype=np.uint8) for n in case["sizes"] + sizes2]
    n_src = len(case["sizes"])
    cols, want = [], []
    for width, offset, scale in ((w, 0, 1), (other, n_src, other / w)):
        src = np.array([s + offset for s in case["seg_source"]], np.int64)
        base = np.array([int(x * scale) // width * width for x in case["seg_base"]], np.int64)
        stride = b * width + (case["pad"] if case["batch_rows"] else 0)
        out = np.zeros(max(1, -(-count // b)) * stride, np.uint8)
        alone = out.copy()
        Sources(sources).gather(alone, width, src, base, seg, row, b, stride)
        cols.append((out, width, src, base, stride))
        want.append(alone)
    Sources(sources).gather_columns(cols, seg, row, b)
    for (got, *_), alone in zip(cols, want, strict=True):
        assert np.array_equal(got, alone)


def _args(seg_source: list[int], seg_base: list[int], seg: list[int], row: list[int]) -> list[Any]:
    return [np.array(seg_source, np.int64), np.array(seg_base, np.int64),
            np.array(seg, np.int32), np.array(row, np.int32)]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "error", "text"),
    [
        (_args([0], [0], [1], [0]), IndexError, "segment 1 of 1"),
        (_args([0], [0], [-1], [0]), IndexError, "segment -1"),
        (_args([2], [0], [0], [0]), IndexError, "source 2 of 2"),
        (_args([-1], [0], [0], [0]), IndexError, "source -1"),
        (_args([0], [0], [0], [25]), IndexError, "outside source 0 of 100 bytes"),
        (_args([0], [97], [0], [0]), IndexError, "outside source"),
        (_args([0], [-4], [0], [1]), IndexError, "outside source"),
        (_args([0], [0], [0], [-1]), IndexError, "outside source"),
        (_args([1], [0], [0], [0]), IndexError, "outside source 1 of 3 bytes"),
        (_args([0, 0], [0], [0], [0]), ValueError, "equal lengths"),
        (_args([0], [0], [0, 0], [0]), ValueError, "equal lengths"),
        (_args([0], [0], [0] * 5, [0] * 5), ValueError, "need 20"),
    ],
)
def test_gather_refuses_records_outside_their_sources(
    args: list[Any], error: type[Exception], text: str
) -> None:
    """Nothing is copied unless every record is inside its source and the output."""
    out = np.full(16, 7, np.uint8)
    with pytest.raises(error, match=text):
        Sources([np.zeros(100, np.uint8), b"abc"]).gather(out, 4, *args)
    assert (out == 7).all()


def test_gather_refuses_arguments_of_the_wrong_kind() -> None:
    s = Sources([np.zeros(100, np.uint8)])
    good = _args([0], [0], [0], [0])
    out = np.zeros(16, np.uint8)
    with pytest.raises(TypeError, match="seg must be an aligned buffer of int32"):
        s.gather(out, 4, good[0], good[1], good[2].astype(np.int64), good[3])
    with pytest.raises(TypeError, match="seg_base must be an aligned buffer of int64"):
        s.gather(out, 4, good[0], good[1].astype(np.float64), good[2], good[3])
    misaligned = np.frombuffer(bytes(9), np.int64, offset=1)  # int64 at an odd address
    with pytest.raises(TypeError, match="seg_source must be an aligned buffer"):
        s.gather(out, 4, misaligned, good[1], good[2], good[3])
    with pytest.raises(ValueError, match="width must be > 0"):
        s.gather(out, 0, *good)
    with pytest.raises(BufferError, match="not writable"):
        s.gather(b"\0" * 16, 4, *good)
    with pytest.raises(ValueError, match="cannot start 3 bytes apart"):
        s.gather(out, 4, *good, 1, 3)
    with pytest.raises(TypeError):
        Sources([object()])


HUGE = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31 - 1, -(2**31), 0, 1]))


def _reference(sources: list[bytes], out_len: int, width: int, seg_source: list[int],
               seg_base: list[int], seg: list[int], row: list[int], batch_rows: int,
               stride: int) -> bytearray | None:  # fmt: skip
    """What gather must do, in Python integers (no overflow): the output, or None where it
    must refuse (and copy nothing)."""
    count = len(seg)
    rows = batch_rows if batch_rows > 0 else max(count, 1)
    stride = stride if batch_rows > 0 and stride > 0 else rows * width
    if width <= 0 or rows * width >= 2**63 or stride < rows * width:
        return None  # (a batch of more than 2**63 bytes is refused, even an empty one)
    out = bytearray(out_len)
    for i, (k, r) in enumerate(zip(seg, row, strict=True)):
        if not 0 <= k < len(seg_source) or not 0 <= seg_source[k] < len(sources):
            return None
        data, base = sources[seg_source[k]], seg_base[k]
        if r < 0 or base < 0 or base + (r + 1) * width > len(data):
            return None
        at = (i // rows) * stride + (i % rows) * width
        if at + width > out_len:
            return None
        out[at : at + width] = data[base + r * width : base + (r + 1) * width]
    return out


@settings(max_examples=300, deadline=None)
@given(
    width=st.one_of(st.integers(-2, 9), st.sampled_from([2**40, 2**62, 2**63 - 1])),
    base=st.one_of(st.integers(-3, 40), st.sampled_from([2**62, 2**63 - 1, -(2**63)])),
    rows=st.lists(HUGE, max_size=6),
    batch_rows=st.one_of(st.integers(0, 4), st.sampled_from([2**61, 2**63 - 1])),
    stride=st.one_of(st.integers(0, 40), st.sampled_from([2**62 + 4, 2**63 - 1])),
)
def test_gather_refuses_every_out_of_range_argument_without_overflow(
    width: int, base: int, rows: list[int], batch_rows: int, stride: int
) -> None:
    """Any widths, byte offsets, rows and batch layouts, however large (sums and products
    that overflow 64 bits among them): the gather copies exactly what the Python reference
    does, or refuses with an exception and copies nothing; it never reads or writes outside
    its buffers."""
    data = bytes(range(64))
    out = np.full(48, 7, np.uint8)
    seg = [0] * len(rows)
    want = _reference([data], len(out), width, [0], [base], seg, rows, batch_rows, stride)
    try:
        Sources([data]).gather(out, width, *_args([0], [base], seg, rows), batch_rows, stride)
    except (IndexError, ValueError, OverflowError):
        assert want is None
        assert (out == 7).all()
        return
    assert want is not None
    mask = np.zeros(len(out), bool)
    n = max(batch_rows, 1) if batch_rows > 0 else max(len(rows), 1)
    step = stride if batch_rows > 0 and stride > 0 else n * width
    for i in range(len(rows)):
        at = (i // n) * step + (i % n) * width
        mask[at : at + width] = True
    # only the records' bytes are compared: the reference's other bytes are zeros
    assert np.array_equal(out[mask], np.frombuffer(bytes(want), np.uint8)[mask])
    assert (out[~mask] == 7).all()


def test_gather_refuses_outputs_that_overlap_what_it_reads() -> None:
    """The indices are read again while copying: an output over them (or over another
    column's output) is refused, not copied over what is still to be read."""
    s = Sources([np.zeros(4096, np.uint8)])
    seg, row = np.zeros(32, np.int32), np.arange(32, dtype=np.int32)
    with pytest.raises(ValueError, match="overlaps"):
        s.gather(seg.view(np.uint8)[4:], 4, *_args([0], [0], [], [])[:2], seg[:8], row[:8])
    base = np.zeros(1, np.int64)
    out = np.zeros(64, np.uint8)
    columns = [(base.view(np.uint8), 8, np.zeros(1, np.int64), np.zeros(1, np.int64), 0),
               (out, 8, np.zeros(1, np.int64), base, 0)]  # fmt: skip
    with pytest.raises(ValueError, match="overlaps"):
        s.gather_columns(columns, np.zeros(1, np.int32), np.zeros(1, np.int32), 0)
    slots = np.array([1, 0, 0, 0], np.int64)
    with pytest.raises(ValueError, match="overlaps"):
        gather.scatter(slots, [(slots.view(np.uint8), 8, b"\x7f" * 32)])
    assert slots.tolist() == [1, 0, 0, 0]


def test_gather_is_safe_from_python_code_run_by_its_arguments() -> None:
    """A width whose conversion runs Python code (``__index__``) that releases the sources or
    empties the list of columns: refused, or done on what was checked; never a crash."""
    s = Sources([np.arange(64, dtype=np.uint8)])
    out = np.zeros(8, np.uint8)
    ints = _args([0], [0], [0], [1])

    class Releases:
        def __index__(self) -> int:
            s.release()
            return 4

    with pytest.raises(ValueError, match="released"):
        s.gather_columns([(out, Releases(), ints[0], ints[1], 0)], ints[2], ints[3], 0)
    s = Sources([np.arange(64, dtype=np.uint8)])
    columns: list[Any] = []

    class Clears:
        def __index__(self) -> int:
            columns.clear()
            return 4

    other = np.zeros(8, np.uint8)
    columns += [(out, 4, ints[0], ints[1], 0), (other, Clears(), ints[0], ints[1], 0)]
    s.gather_columns(columns, ints[2], ints[3], 0)
    assert out[:4].tolist() == other[:4].tolist() == [4, 5, 6, 7]


def test_released_sources_let_their_maps_close() -> None:
    """A source's buffer is held (an mmap cannot be closed) until release(); after it no
    gather is possible."""
    m = mmap.mmap(-1, 4096)
    s = Sources([m])
    with pytest.raises(BufferError):
        m.close()
    s.release()
    m.close()
    assert s.held == 0
    with pytest.raises(ValueError, match="released"):
        s.gather(np.zeros(4, np.uint8), 4, *_args([0], [0], [0], [0]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=4),
    st.integers(0, 50),
    st.integers(0, 20),
    st.integers(0, 2**32 - 1),
)
def test_scatter_puts_each_record_in_its_slot(
    widths: list[int], count: int, spare: int, seed: int
) -> None:
    """The slot window's scatter, every column in one call: what numpy's fancy assignment
    does, column by column."""
    rng = np.random.default_rng(seed)
    slots = rng.permutation(count + spare)[:count].astype(np.int64)
    columns, wants = [], []
    for width in widths:
        src = rng.integers(0, 256, count * width, dtype=np.uint8)
        got = np.zeros((count + spare) * width, np.uint8)
        want = got.copy()
        want.reshape(-1, width)[slots] = src.reshape(-1, width)
        columns.append((got, width, src))
        wants.append(want)
    gather.scatter(slots, columns)
    for (got, _, _), want in zip(columns, wants, strict=True):
        assert np.array_equal(got, want)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([1024, 1088, 4096, 12288, 1040, 1000]), st.integers(1, 300),
       st.integers(0, 2**32 - 1))  # fmt: skip
def test_scatter_of_large_records_to_a_large_window_is_exact(
    width: int, count: int, seed: int
) -> None:
    """Records of 1 KiB or more bound for a buffer of 16 MiB or more are written past the
    CPU's caches (multiples of 64 bytes to a 16-byte aligned buffer; the others as before):
    every byte lands where numpy's assignment puts it, at any alignment of the buffer, and
    the rows not written keep their bytes; the same through the compiled decode."""
    rng = np.random.default_rng(seed)
    rows = (16 << 20) // width + 1  # just over the size from which stores stream
    slots = rng.choice(rows, count, replace=False).astype(np.int64)
    src = rng.integers(0, 256, count * width, dtype=np.uint8)
    backing = rng.integers(0, 256, rows * width + 128, dtype=np.uint8)
    aligned = -backing.ctypes.data % 64
    for shift in (0, 16, 8):  # streamed (when the width allows), streamed, not
        got = backing[aligned + shift : aligned + shift + rows * width]
        want = got.copy()
        want.reshape(-1, width)[slots] = src.reshape(-1, width)
        gather.scatter(slots, [(got, width, src)])
        assert np.array_equal(got, want)
    dest = np.zeros((rows, width), np.uint8)
    message = bytes(64) + src.tobytes()  # the values at byte 64
    columns = [(64, src.size, dest, width)]
    assert _decode.decode(message, -1, columns, slots, 0, count, count, -1) == -1
    assert np.array_equal(dest[slots], src.reshape(-1, width))
    assert not np.delete(dest, slots, axis=0).any()


def _place_in_numpy(n: int, slots: np.ndarray | None, lengths: list[int]) -> tuple[Any, Any]:
    seg, row = np.full(n, -7, np.int32), np.full(n, -7, np.int32)
    k = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    j = np.concatenate([np.arange(m, dtype=np.int32) for m in lengths] or [np.zeros(0, np.int32)])
    at = np.arange(len(k)) if slots is None else slots[: len(k)]
    seg[at], row[at] = k, j
    return seg, row


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=12), st.integers(0, 30), st.booleans(),
       st.integers(0, 2**32 - 1))  # fmt: skip
def test_place_notes_each_records_segment_and_row_at_its_slot(
    lengths: list[int], spare: int, shuffled: bool, seed: int
) -> None:
    """A gathered window's placement of every segment at once: what numpy's repeat and
    fancy assignments do, with or without slots, in a window with rows to spare."""
    n = sum(lengths) + spare
    slots = np.random.default_rng(seed).permutation(n) if shuffled else None
    seg, row = np.full(n, -7, np.int32), np.full(n, -7, np.int32)
    gather.place(seg, row, slots, np.array(lengths, np.int64))
    want_seg, want_row = _place_in_numpy(n, slots, lengths)
    assert np.array_equal(seg, want_seg)
    assert np.array_equal(row, want_row)


def test_a_window_places_its_segments_as_numpy_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """GatherWindow.add_all with the compiled place and with numpy: the same window."""
    forms = {"x": (np.dtype(np.float32), (2,))}
    lengths = np.array([3, 0, 5, 2], np.int64)
    slots = np.random.default_rng(3).permutation(12)
    got = GatherWindow(forms, 12, 4, slots, gather.BatchPool())
    got.add_all(lengths)
    monkeypatch.setattr(gather, "place", None)
    want = GatherWindow(forms, 12, 4, slots, gather.BatchPool())
    want.add_all(lengths)
    filled = slots[:10]
    assert np.array_equal(got.seg[filled], want.seg[filled])
    assert np.array_equal(got.row[filled], want.row[filled])


def test_place_refuses_what_does_not_fit() -> None:
    """Nothing is written unless every record fits and every slot is inside the window."""
    seg, row = np.full(8, -7, np.int32), np.full(8, -7, np.int32)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    for slots, lengths, error, text in [
        (None, i64(5, 4), ValueError, "segment 1: 4 records, after 5, where 8 fit"),
        (None, i64(-1), ValueError, "segment 0: -1 records"),
        (i64(0, 1), i64(3), ValueError, "2 slots for 3 records"),
        (i64(0, 8), i64(2), IndexError, "record 1: slot 8 of 8"),
        (i64(0, -1), i64(2), IndexError, "record 1: slot -1 of 8"),
    ]:
        with pytest.raises(error, match=text):
            gather.place(seg, row, slots, lengths)
        assert (seg == -7).all() and (row == -7).all()
    with pytest.raises(ValueError, match="equal lengths"):
        gather.place(seg, row[:4], None, i64(1))
    with pytest.raises(ValueError, match="must not overlap"):
        gather.place(seg, seg, None, i64(1))
    frozen = seg.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        gather.place(frozen, row, None, i64(1))
    with pytest.raises(TypeError, match="lengths must be an aligned buffer of int64"):
        gather.place(seg, row, None, np.array([1], np.int32))


def test_scatter_refuses_slots_outside_the_window() -> None:
    """A bad slot, a short source or a bad width in any column: an error naming the column,
    and nothing copied to any column (the good one before it included)."""
    good, dest = np.zeros(40, np.uint8), np.zeros(40, np.uint8)
    src = np.arange(8, dtype=np.uint8)
    for slots, width, error, text in [
        ([0, 10], 4, IndexError, "column 1: slot 10 of 10"),
        ([-1, 0], 4, IndexError, "column 0: slot -1"),
        ([0, 1, 2], 4, ValueError, "column 1: src holds 8 bytes"),
        ([0, 1], 0, ValueError, "column 1: width must be > 0"),
    ]:
        with pytest.raises(error, match=text):
            gather.scatter(
                np.array(slots, np.int64), [(good, 1, np.ones(3, np.uint8)), (dest, width, src)]
            )
        assert not dest.any() and not good.any()
    with pytest.raises(TypeError, match="slots must be an aligned buffer of int64"):
        gather.scatter(np.array([0, 1], np.int32), [(dest, 4, src)])
    with pytest.raises(TypeError):
        gather.scatter(np.array([0, 1], np.int64), [(dest, 4)])
    with pytest.raises(ValueError, match="at most 64 columns"):
        gather.scatter(np.array([0], np.int64), [(dest, 4, src)] * 65)


def test_populate_maps_pages_and_keeps_what_is_there() -> None:
    m = mmap.mmap(-1, 1 << 20)
    a = np.frombuffer(m, np.uint8)
    a[5000] = 7
    u = os.uname()
    new_linux = u.sysname == "Linux" and tuple(map(int, u.release.split(".")[:2])) >= (5, 14)
    assert gather.populate(a, 0, len(a)) is new_linux  # MADV_POPULATE_WRITE: Linux 5.14
    assert a[5000] == 7 and a.sum() == 7
    with pytest.raises(ValueError, match="outside a buffer"):
        gather.populate(a, 1, len(a))
    with pytest.raises(TypeError):  # no parts: one call
        gather.populate(a, 0, len(a), 4096)
    del a
    m.close()


def _rss_kib_of_map(address: int) -> int:
    """The Rss of this process's mapping that starts at ``address`` (/proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{address:x}-"))
    rss = next(line for line in lines[start + 1 :] if line.startswith("Rss:"))
    return int(rss.split()[1])


def test_drop_takes_a_file_maps_pages_out_of_rss_and_keeps_its_contents(tmp_path: Path) -> None:
    """A loader's read threads drop each shard map's pages as they go (RSS), without the GIL
    (mmap.madvise holds it): the pages leave this process, the file reads the same after."""
    page = mmap.PAGESIZE
    data = np.random.default_rng(3).integers(0, 256, 64 * page + 100, np.uint8).tobytes()
    path = tmp_path / "shard"
    path.write_bytes(data)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(m, np.uint8)
    address = view.ctypes.data
    assert int(view[::page].sum()) == sum(data[::page])  # every page read: mapped
    linux = os.uname().sysname == "Linux"
    if linux:
        assert _rss_kib_of_map(address) >= 64 * page // 1024
    assert gather.drop(m, 0, len(m)) is linux
    if linux:  # all but the last page, which the range covers in part only
        assert _rss_kib_of_map(address) <= page // 1024
    assert bytes(m) == data  # read again from the page cache
    assert gather.drop(m, page + 1, 2 * page) is linux  # whole pages inside the range only
    assert gather.drop(m, 0, 0) is False
    with pytest.raises(ValueError, match="outside a buffer"):
        gather.drop(m, 1, len(m))
    with pytest.raises(TypeError):  # no parts: one call
        gather.drop(m, 0, page, page)
    for other in (np.frombuffer(data, np.uint8), data):  # private memory is never dropped
        with pytest.raises(TypeError, match="mmap"):
            gather.drop(other, 0, page)
    del view
    m.close()
    with pytest.raises(ValueError):  # a closed map
        gather.drop(m, 0, 0)


def test_discard_gives_whole_pages_back_and_keeps_the_rest() -> None:
    """The pages wholly inside the range read as zeros afterwards (given back: private
    anonymous memory); the bytes of partly covered pages, and outside the range, are kept."""
    page = mmap.PAGESIZE
    m = mmap.mmap(-1, 8 * page, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # as a slab's
    a = np.frombuffer(m, np.uint8)
    a[:] = 7
    linux = os.uname().sysname == "Linux"
    assert gather.discard(a, 100, 3 * page) is linux  # pages 1 and 2 only
    if linux:
        assert not a[page : 3 * page].any()
        assert (a[:page] == 7).all() and (a[3 * page :] == 7).all()
    a[:] = 7
    assert gather.discard(a, page - 1, 6 * page + 2, 2 * page - 1) is linux  # in parts
    if linux:  # pages 1 to 6, in parts of two pages
        assert not a[page : 7 * page].any()
        assert (a[:page] == 7).all() and (a[7 * page :] == 7).all()
    assert gather.discard(a, 0, 0) is False  # no whole page: nothing to do
    with pytest.raises(ValueError, match="outside a buffer"):
        gather.discard(a, page, 8 * page)
    with pytest.raises(ValueError, match="outside a buffer"):
        gather.discard(a, 0, page, -1)
    with pytest.raises(BufferError):  # read-only memory is never given back
        gather.discard(b"x" * 2 * page, 0, 2 * page)
    del a
    m.close()


# --- batch buffers ------------------------------------------------------------------------


def test_a_batch_buffer_is_reused_only_once_nothing_refers_to_it() -> None:
    pool = gather.BatchPool()
    a = pool.get(4096)
    address = a.ctypes.data
    assert address % 64 == 0 and a.flags.writeable and a.flags.c_contiguous
    b = pool.get(4096)
    assert b.ctypes.data != address
    del a
    c = pool.get(4096)
    assert c.ctypes.data == address  # dropped: reused
    view = c[100:].view(np.int8)
    del c
    d = pool.get(4096)
    assert d.ctypes.data != address  # a view of it is still alive
    del view, b, d
    gc.collect()
    assert pool.allocated == 3


# --- the loader ---------------------------------------------------------------------------

N = 3000


def records(flag: bool) -> Any:
    def gen() -> Any:
        rng = np.random.default_rng(7)
        for start in range(0, N, 500):
            ids = np.arange(start, start + 500)
            columns = {
                "id": ids,
                "image": rng.integers(0, 256, (500, 3, 10, 10), dtype=np.uint8),
                "f": (ids * 0.25).astype(np.float32),
                "small": (ids % 251).astype(np.uint8),
            }
            yield snap.Batch(**columns, **({"flag": ids % 3 == 0} if flag else {}))

    return gen


def make(root: Path, flag: bool) -> str:
    out = root / ("flag" if flag else "plain")
    snap.create(records(flag), str(out), workers=0, shard_size="64KiB", batch_rows=90,
                compression="none")  # fmt: skip
    assert len(snap.open(str(out)).shards) >= 8
    return str(out)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Numbers and tensors only: every record batch is read where it is (mapped)."""
    return make(tmp_path_factory.mktemp("gather"), False)


@pytest.fixture(scope="module")
def with_bool(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A bool column too (bits in Arrow): record batches decoded by Arrow, then gathered."""
    return make(tmp_path_factory.mktemp("gather"), True)


def both_ways(
    path: Any, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """Every batch of a loader with gathered windows, and with slot windows (copied)."""
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(gather, "ENABLED", enabled)
        source = snap.mix(path) if isinstance(path, list) else snap.open(path)
        with source.loader(**options) as loader:
            assert loader._context.windows.gather is enabled
            out.append([{k: v.copy() for k, v in b.items()} for b in loader])
    return out[0], out[1]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_size", [1, 7, 64, 100, 1000])
@pytest.mark.parametrize("kind", ["plain", "with_bool"])
def test_gathered_batches_are_the_slot_windows_batches(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    shuffle: bool,
    batch_size: int,
) -> None:
    """Shuffled or not, any batch size (several batches gathered in one call, an epoch's
    last batch short), two epochs, records read where they are or decoded by Arrow: the very
    batches a slot window serves."""
    path = request.getfixturevalue(kind)
    ours, theirs = both_ways(path, monkeypatch, batch_size=batch_size, shuffle=shuffle,
                             seed=3, shuffle_buffer=700, epochs=2)  # fmt: skip
    same_batches(ours, theirs)
    ids = np.concatenate([b["id"] for b in ours])
    assert sorted(ids.tolist()) == sorted(list(range(N)) * 2)
    for b in ours:
        assert (b["f"] == b["id"] * 0.25).all() and (b["small"] == b["id"] % 251).all()
        if kind == "with_bool":
            assert (b["flag"] == (b["id"] % 3 == 0)).all()


def test_gathered_batches_of_a_selection_a_mixture_and_a_drop_last(
    plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = both_ways(plain, monkeypatch, batch_size=50, columns=["small", "image"],
                             drop_last=True, rank=1, world_size=3)  # fmt: skip
    same_batches(ours, theirs)
    assert all(list(b) == ["small", "image"] for b in ours)
    ours, theirs = both_ways([plain, plain], monkeypatch, batch_size=64, seed=5)
    same_batches(ours, theirs)


def test_batches_kept_stay_intact_and_are_aligned_writable_buffers(plain: str) -> None:
    """A batch is the consumer's: kept ones never change while the loader goes on (their
    buffers are reused only once dropped), and each column is 64-byte aligned, contiguous,
    writable and owned by no window."""
    loader = snap.open(plain).loader(64, seed=1, shuffle_buffer=500, epochs=3)
    kept = list(loader)
    images = {}
    for b in snap.open(plain).loader(256, shuffle=False):
        for i, im in zip(b["id"], b["image"], strict=True):
            images[int(i)] = im.copy()
    for b in kept:
        for k, v in b.items():
            assert v.ctypes.data % 64 == 0 and v.flags.c_contiguous and v.flags.writeable, k
        assert all(
            np.array_equal(images[int(i)], im) for i, im in zip(b["id"], b["image"], strict=True)
        )
        assert (b["f"] == b["id"] * 0.25).all()


def test_dropped_batches_let_a_few_buffers_go_round(plain: str) -> None:
    loader = snap.open(plain).loader(50, seed=1, shuffle_buffer=500, epochs=3, prefetch=2)
    batches = sum(1 for _ in loader)
    assert 0 < loader._context.windows.batches.allocated < batches // 4


def test_resume_mid_epoch_gives_the_same_gathered_batches(plain: str) -> None:
    options: dict[str, Any] = {"batch_size": 37, "seed": 11, "shuffle_buffer": 600, "epochs": 2}
    full = [{k: v.copy() for k, v in b.items()} for b in snap.open(plain).loader(**options)]
    first = snap.open(plain).loader(**options)
    it = iter(first)
    head = [{k: v.copy() for k, v in next(it).items()} for _ in range(50)]
    state = first.state_dict()
    first.close()
    second = snap.open(plain).loader(**options)
    second.load_state_dict(state)
    same_batches(full, head + [{k: v.copy() for k, v in b.items()} for b in second])


def mapped_shards(root: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return [line for line in f if os.path.realpath(root) in line]


def resident_shard_kib(root: str) -> int:
    """KiB of the snapshot's shard files resident in this process's maps (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = os.path.realpath(root) in line
            elif inside and first == "Rss:":
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux only: /proc/self/smaps")
def test_no_shard_page_stays_resident_once_a_pass_ends(
    plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gathered window maps the shard files it reads, and unmaps them once it is served;
    the slot windows of a first epoch read through maps whose pages leave this process's
    resident memory once each window is read. Nothing stays resident after a pass, a break
    or a close, and nothing stays mapped once the loader is gone."""
    mapped_when_finished = []
    finish = gather.GatherWindow.finish

    def noting(self: gather.GatherWindow) -> None:
        mapped_when_finished.append(len(mapped_shards(plain)))
        finish(self)

    monkeypatch.setattr(gather.GatherWindow, "finish", noting)
    gc.collect()  # loaders of other tests, and their open shards
    assert mapped_shards(plain) == []
    loader = snap.open(plain).loader(32, seed=2, shuffle_buffer=400, epochs=2)
    for _ in loader:
        pass
    # the 2nd epoch's windows were gathered, each from the shard files mapped
    assert len(mapped_when_finished) > 3 and min(mapped_when_finished) > 0
    assert resident_shard_kib(plain) == 0
    for _ in loader:
        break
    loader.close()
    assert resident_shard_kib(plain) == 0
    del loader
    gc.collect()
    assert mapped_shards(plain) == []


@pytest.mark.parametrize("own_maps", [False, True], ids=["small slabs", "slabs in maps"])
def test_later_epochs_let_the_first_epochs_slabs_go(
    plain: str, own_maps: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slabs the slot windows of a first epoch were read into are freed once the epochs
    after it gather: nothing holds them (the pool kept them for the loader's life, twice the
    window's memory, 512 MiB at the default window). Slabs in maps of their own are given
    back by a read thread, in parts (slabs.between), before they go."""
    from snapshot_cli.readers import window

    if own_maps:
        monkeypatch.setattr(window, "SLAB_MMAP_MIN", 0)
    loader = snap.open(plain).loader(32, seed=2, shuffle_buffer=400, epochs=1)
    assert sum(1 for _ in loader) > 0
    pool = loader._context.windows
    made = [ref for ref, _ in pool._made]
    assert made and all(ref() is not None for ref in made)  # kept for the next slot window
    assert sum(1 for _ in loader) > 0  # gathered
    gc.collect()
    assert [ref() for ref in made] == [None] * len(made)
    loader.close()


def test_a_slab_whose_batch_is_held_goes_with_the_batch(
    plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer that keeps the first epoch's last batch through the gathered epochs after
    it: that batch stays right (its slab is not given back under it), and once the pass ends
    the pool lets go of the slab, which is freed when the batch is dropped."""
    from snapshot_cli.readers import window

    monkeypatch.setattr(window, "SLAB_MMAP_MIN", 0)  # slabs in maps of their own
    loader = snap.open(plain).loader(32, seed=2, shuffle_buffer=400, epochs=1)
    kept = None
    for batch in loader:
        kept = batch  # the last one is kept
    assert kept is not None
    copy = {k: v.copy() for k, v in kept.items()}
    pool = loader._context.windows
    owners = [ref for ref, _ in pool._made]
    ids = [int(i) for _ in range(2) for b in loader for i in b["id"]]  # two gathered epochs
    assert sorted(ids) == sorted(list(range(N)) * 2)
    assert all(np.array_equal(kept[k], copy[k]) for k in copy)
    assert pool._leaving == []  # let go at the pass's end
    alive = [ref for ref in owners if ref() is not None]
    assert alive  # the slab of the kept batch
    del kept, batch
    gc.collect()
    assert [ref() for ref in alive] == [None] * len(alive)
    loader.close()


def test_a_first_epoch_reads_slot_windows_and_later_epochs_gather(
    plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first epoch reads (and checks) every record batch into slot windows, noting where
    each one's columns are; every window of the epochs after is placed whole from those notes
    and gathered, no record batch read again."""
    from snapshot_cli.readers import slabs

    made: list[tuple[int, str]] = []
    get = slabs.WindowPool.get

    def noting(self: slabs.WindowPool, rows: int, *args: Any, **kwargs: Any) -> Any:
        window = get(self, rows, *args, **kwargs)
        made.append((len(made), type(window).__name__))
        return window

    monkeypatch.setattr(slabs.WindowPool, "get", noting)
    loader = snap.open(plain).loader(32, seed=2, shuffle_buffer=400, epochs=1)
    per_epoch = []
    for _ in range(3):
        made.clear()
        ids = [int(i) for b in loader for i in b["id"]]
        assert sorted(ids) == list(range(N))
        # a window given up for a slot window shows as a GatherWindow, then a Window
        per_epoch.append([kind for _, kind in made])
    assert per_epoch[0] and all(k == "Window" for k in per_epoch[0][1::2])
    assert set(per_epoch[1]) == set(per_epoch[2]) == {"GatherWindow"}


def test_record_batches_with_the_same_metadata_are_parsed_once(
    plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncompressed record batches of as many records have the same metadata, byte for byte:
    a first epoch parses it once per run of them (not once per record batch), and every
    other metadata on its own; the batches are those of a loader that parses each."""
    from snapshot_cli import ipc_blocks, ipc_layout

    real = ipc_layout.batch_layout
    calls: list[bytes] = []

    def counting(metadata: bytes, length: int) -> Any:
        calls.append(metadata)
        return real(metadata, length)

    monkeypatch.setattr(ipc_layout, "batch_layout", counting)
    with snap.open(plain).loader(64, seed=2, shuffle_buffer=700) as loader:
        ours = [{k: v.copy() for k, v in b.items()} for b in loader]
    blocks = distinct = 0
    every: set[bytes] = set()
    for shard in snap.open(plain).shards:
        data = (Path(plain) / shard.path).read_bytes()
        n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
        found = ipc_blocks.record_batch_blocks(
            data[len(data) - ipc_blocks.TAIL - n : -ipc_blocks.TAIL], len(data)
        )
        metadata = set()
        for block in found:
            size = ipc_layout.metadata_size(data[block.offset : block.offset + 8])
            metadata.add((data[block.offset : block.offset + size], block.length))
        blocks, distinct = blocks + len(found), distinct + len(metadata)
        every |= {m for m, _ in metadata}
    assert distinct <= len(calls) < blocks / 2, (distinct, len(calls), blocks)
    assert {bytes(c) for c in calls} == every  # each one parsed, none taken for another

    class Each(ipc_layout.LastLayout):  # the reference: every record batch parsed
        def __call__(self, metadata: bytes, length: int) -> Any:
            return ipc_layout.batch_layout(metadata, length)

    monkeypatch.setattr(ipc_layout, "LastLayout", Each)
    before = len(calls)
    with snap.open(plain).loader(64, seed=2, shuffle_buffer=700) as loader:
        same_batches(ours, [{k: v.copy() for k, v in b.items()} for b in loader])
    assert len(calls) - before == blocks


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_damaged_record_batch_mid_window_stops_before_its_records(
    tmp_path: Path, shuffle: bool
) -> None:
    """The damaged record batch is checked as it is read, and its window is not served:
    none of its records is seen, and the error names the shard and the record batch."""
    out, victim = damaged_snapshot(tmp_path, 4096)
    seen: list[int] = []
    with snap.open(out).loader(10, shuffle=shuffle, shuffle_buffer=60) as loader:
        assert loader._context.windows.gather
        with pytest.raises(snap.CorruptShardError, match=f"{victim} is damaged: record batch 0"):
            for batch in loader:
                seen.extend(int(v) for v in batch["label"])
    assert 2 not in {label // 50 for label in seen}


def test_a_shard_that_shrank_after_it_was_opened_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard file cut short once the loader has it open (its size was checked then) is a
    CorruptShardError naming it, not a crash: a map of it is as long as the file is now."""
    out, _ = damaged_snapshot(tmp_path / "a", 64)
    s = snap.open(out)
    victim = Path(out) / s.shards[3].path
    loader = s.loader(10, shuffle=False, verify=False)
    readers = loader._context.readers
    readers.reader(3)  # opened: size checked against the manifest
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size // 3)
    with pytest.raises(snap.CorruptShardError, match="the file ends inside it"):
        for _ in loader:
            pass


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same records, lz4: slot windows, record batches decoded from the mapped file."""
    out = tmp_path_factory.mktemp("gather") / "lz4"
    snap.create(records(False), str(out), workers=0, shard_size="64KiB", batch_rows=90,
                compression="lz4")  # fmt: skip
    return str(out)


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOMEM, "Cannot allocate memory"),
        OSError(errno.ENODEV, "No such device"),
        OSError(errno.EACCES, "Permission denied"),
        OSError(errno.EAGAIN, "Try again"),
        ValueError("cannot mmap an empty file"),
    ],  # fmt: skip
    ids=["ENOMEM", "ENODEV", "EACCES", "EAGAIN", "ValueError"],
)
@pytest.mark.parametrize("kind", ["plain", "compressed"])
def test_shards_that_cannot_be_mapped_are_read_instead(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str, error: Exception
) -> None:
    """Where a shard file cannot be mapped (no address space, a file system without mmap,
    any error mmap gives), its record batches are read and checked instead: the same
    batches, in the same order, as from mapped shards."""
    path = request.getfixturevalue(kind)
    options: dict[str, Any] = {"batch_size": 64, "seed": 4, "shuffle_buffer": 500, "epochs": 2}
    want = [{k: v.copy() for k, v in b.items()} for b in snap.open(path).loader(**options)]
    tried = []

    def refuse(self: BlockFile) -> None:
        tried.append(self)
        raise error

    monkeypatch.setattr(BlockFile, "map", refuse)
    got = [{k: v.copy() for k, v in b.items()} for b in snap.open(path).loader(**options)]
    assert tried  # the maps were asked for, and refused
    same_batches(got, want)


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EACCES])
@pytest.mark.parametrize("kind", ["plain", "compressed"])
def test_a_read_the_storage_fails_is_a_storage_error_naming_the_shard(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str, code: int
) -> None:
    """Where the shards cannot be mapped and a read fails with an OS error (a failing disk,
    a stale NFS handle...), the error is the storage's, not a damaged snapshot's: a
    StorageError naming the shard, the record batch and the errno, saying what to do."""
    path = request.getfixturevalue(kind)

    def refuse(self: BlockFile) -> None:
        raise OSError(errno.ENODEV, "No such device")

    def fail(fd: int, buffers: Any, offset: int) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(BlockFile, "map", refuse)
    monkeypatch.setattr(os, "preadv", fail)
    with pytest.raises(snap.StorageError) as caught:
        for _ in snap.open(path).loader(64, seed=4, shuffle_buffer=500):
            pass
    text = str(caught.value)
    assert not isinstance(caught.value, snap.CorruptShardError)
    assert "/shards/" in text and ".arrow record batch " in text, text
    assert f"({errno.errorcode[code]})" in text and "then run again" in text, text


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.EMFILE])
def test_a_shard_the_storage_cannot_open_is_a_storage_error(
    plain: str, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Opening a shard fails with an OS error (forbidden, an I/O error, out of file
    descriptors): a StorageError naming the shard, not a damaged one; a missing shard stays
    a CorruptShardError ("is missing")."""

    def refuse(self: BlockFile, *args: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code), args[0])

    monkeypatch.setattr(BlockFile, "__init__", refuse)
    expected = rf"shard .*\.arrow could not be read: .*\({errno.errorcode[code]}\)"
    if code == errno.EMFILE:  # what to change (test_open_files.py)
        expected = r"shard .*\.arrow could not be opened: too many open files \(this process may"
    if code == errno.EACCES:  # whose it is, as verify says (test_denied_shards.py)
        expected = r"/shards/.*\.arrow: Permission denied \(EACCES\); check that this user may read"
    with pytest.raises(snap.StorageError, match=expected):
        for _ in snap.open(plain).loader(64):
            pass


def test_a_missing_shard_is_still_named_missing(plain: str, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(plain, copy)
    s = snap.open(str(copy))
    (copy / s.shards[2].path).unlink()
    with pytest.raises(snap.CorruptShardError, match="is missing"):
        for _ in s.loader(64):
            pass
