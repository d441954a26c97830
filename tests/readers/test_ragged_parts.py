"""A window's text, bytes and 1-d lists of numbers taken across its record batches' arrays as
they are (``_ragged.Parts``), not joined into one array first (a copy of every value into
fresh memory each window: 40 % of a shuffled epoch of 10-50 KB bytes was the kernel's page
faults). Whatever the parts (sliced, empty, of any offsets width or value type), a batch
holds the records the joined column gives; a row or offsets outside the parts are refused
with the row named, before anything is read outside a buffer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import convert
from snapshot_cli.readers.convert import Chunks, take_rows

from .conftest import numbered_snapshot
from .test_chunks import same

ragged: Any = convert._ragged

TYPES = {
    "text": pa.string(),
    "large text": pa.large_string(),
    "bytes": pa.binary(),
    "large bytes": pa.large_binary(),
    "int8 lists": pa.list_(pa.int8()),
    "float64 lists": pa.list_(pa.float64()),
    "uint16 lists": pa.list_(pa.uint16()),
}


@pytest.fixture(autouse=True)
def _built() -> None:
    assert ragged is not None  # built by `make test`'s install, never skipped


@pytest.fixture
def any_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of any size taken as they are (not only those of large records)."""
    monkeypatch.setattr(convert, "PARTS_MIN_RECORD_BYTES", 0)
    monkeypatch.setattr(convert, "PARTS_MIN_PART_BYTES", 0)


def column(kind: str, sizes: list[int]) -> pa.Array:
    t = TYPES[kind]
    if pa.types.is_list(t):
        return pa.array([list(range(k)) for k in sizes], t)
    if kind.endswith("bytes"):
        return pa.array([bytes(range(k)) for k in sizes], t)
    return pa.array(["é" * k for k in sizes], t)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(TYPES)),
    st.lists(st.integers(0, 12), min_size=2, max_size=8),  # the parts' records (some empty)
    st.data(),
)
def test_parts_take_the_records_the_joined_column_gives(
    kind: str, sizes: list[int], data: st.DataObject
) -> None:
    """Parts sliced out of a larger array (their offsets start anywhere in its values), as a
    window's parts are slices of record batches."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert, "PARTS_MIN_RECORD_BYTES", 0)
        mp.setattr(convert, "PARTS_MIN_PART_BYTES", 0)
        check_parts(kind, sizes, data)


def check_parts(kind: str, sizes: list[int], data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(0, 5), min_size=sum(sizes) + 3,
                                 max_size=sum(sizes) + 3))  # fmt: skip
    whole = column(kind, lengths)[3:]  # (an offset of its own too)
    parts, start = [], 0
    for size in sizes:
        parts.append(whole.slice(start, size))
        start += size
    chunks = Chunks(parts)
    assert chunks.parts is not None and len(chunks) == len(whole) == len(chunks.parts)
    rows = np.array(data.draw(st.lists(st.integers(0, max(0, len(whole) - 1)), max_size=40)))
    rows = rows[: len(rows) if len(whole) else 0].astype(np.int64)
    same(chunks.take(rows), take_rows(whole, rows))
    a = data.draw(st.integers(0, len(whole)))
    b = data.draw(st.integers(a, len(whole)))
    same(chunks.slice(a, b), convert.column_to_numpy(whole.slice(a, b - a)))


@pytest.mark.parametrize(
    "parts",
    [
        [pa.array(["a", None]), pa.array(["b"])],  # nulls
        [pa.array([[True]], pa.list_(pa.bool_()))] * 2,  # bits
        [pa.array([["a"]], pa.list_(pa.string()))] * 2,  # lists of text
        [pa.array([[1, None]], pa.list_(pa.int32()))] * 2,  # a null value in a list
        [pa.array(["a"])],  # one part: nothing to join
    ],
    ids=["nulls", "bools", "lists of text", "null values", "one part"],
)
@pytest.mark.usefixtures("any_parts")
def test_other_columns_are_joined_as_before(parts: list[pa.Array]) -> None:
    chunks = Chunks(parts)
    assert chunks.parts is None
    whole = pa.concat_arrays(parts)
    rows = np.arange(len(whole))[::-1].copy()
    assert shown(chunks.take(rows)) == shown(take_rows(whole, rows))


def shown(values: np.ndarray) -> list[str]:
    """Each record as text (arrays as their lists: a null is NaN, which equals nothing)."""
    return [repr(v.tolist() if isinstance(v, np.ndarray) else v) for v in values]


def parts_of(*columns: tuple[list[int], bytes]) -> Any:
    return ragged.Parts([np.array(o, np.int32) for o, _ in columns], [d for _, d in columns])


@pytest.mark.parametrize("row", [-1, 5, 2**40])
def test_a_row_outside_the_parts_is_an_index_error(row: int) -> None:
    parts = parts_of(([0, 1, 2], b"ab"), ([0, 1, 2, 3], b"cde"))
    assert len(parts) == 5
    rows = np.array([0, row], np.int64)
    with pytest.raises(IndexError, match=f"row {row} of a column of 5 records"):
        parts.take_text(rows, False)
    with pytest.raises(IndexError, match=f"row {row} "):
        parts.bounds(rows, np.empty(3, np.int64))
    with pytest.raises(IndexError, match=f"row {row} "):
        parts.take_values(1, rows, np.empty(1, np.uint8))


@pytest.mark.parametrize(
    ("off", "row"),
    [([0, 2, 1], 3), ([0, 1, 9], 3), ([-4, 1, 2], 2)],
    ids=["backwards", "past the values", "negative"],
)
def test_a_parts_damaged_offsets_are_refused_naming_the_row(off: list[int], row: int) -> None:
    """The damage is in the second part, whose records are the window's rows 2 and 3."""
    parts = parts_of(([0, 1, 2], b"ab"), (off, b"cde"))
    rows = np.array([0, 2, 3], np.int64)
    out = np.full(8, 7, np.uint8)
    for call in (
        lambda: parts.take_text(rows, True),
        lambda: parts.bounds(rows, np.empty(3, np.int64)),
        lambda: parts.take_values(1, rows, out[:3]),
    ):
        with pytest.raises(ValueError, match=rf"record {row} spans .* damaged offsets"):
            call()
    assert out.tolist() == [7] * 8  # nothing written


def test_the_output_must_fit_and_not_overlap_a_part() -> None:
    values = np.arange(6, dtype=np.int16)
    parts = ragged.Parts([np.array([0, 2], np.int32), np.array([0, 4], np.int64)],
                         [values[:2].view(np.uint8), values[2:].view(np.uint8)])  # fmt: skip
    rows = np.array([1, 0], np.int64)
    bounds = np.empty(3, np.int64)
    assert parts.bounds(rows, bounds) == 6 and bounds.tolist() == [0, 4, 6]
    out = np.empty(6, np.int16)
    parts.take_values(2, rows, out)
    assert out.tolist() == [2, 3, 4, 5, 0, 1]
    with pytest.raises(ValueError, match="out holds 10 bytes, the records 12"):
        parts.take_values(2, rows, np.empty(5, np.int16))
    with pytest.raises(ValueError, match="must not overlap"):
        parts.take_values(2, rows, values.view(np.uint8)[:12])
    with pytest.raises(TypeError, match="offsets must be"):
        ragged.Parts([np.array([0, 1], np.float64)], [b"a"])
    with pytest.raises(ValueError, match="2 offsets but 1 data"):
        ragged.Parts([np.array([0], np.int32)] * 2, [b""])


def test_text_that_is_not_utf8_is_a_unicode_error() -> None:
    parts = parts_of(([0, 1], b"a"), ([0, 2], b"\xff\xfe"))
    assert parts.take_text(np.array([1], np.int64), True) == [b"\xff\xfe"]
    with pytest.raises(UnicodeDecodeError):
        parts.take_text(np.array([0, 1], np.int64), False)


@pytest.mark.parametrize(
    ("record", "parts"),
    [(b"x" * 60, True), (b"x" * 59, False), (["x" * 64], False)],
    ids=["60 bytes", "59 bytes", "lists of text"],
)
@pytest.mark.parametrize("per", [256, 255])
def test_which_windows_are_taken_from_their_parts(record: Any, parts: bool, per: int) -> None:
    """Records of 64 bytes or more (their values and offset) in parts of 16 KiB or more on
    average are taken from their parts; smaller ones cost less joined."""
    whole = pa.array([record] * per * 10)
    pieces = [whole.slice(k * per, per) for k in range(10)]
    assert (Chunks(pieces).parts is not None) is (parts and per >= 256)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.usefixtures("any_parts")
def test_the_loader_serves_the_records_of_a_window_of_many_parts(
    tmp_path: Path, shuffle: bool
) -> None:
    """A window of many small record batches of text, bytes and tokens: every record once,
    each as written, with the window's columns kept in parts."""
    path = numbered_snapshot(
        tmp_path,
        320,
        '{"text": "w" * (n % 7), "raw": bytes([n % 256]) * (n % 9), '
        '"tokens": np.arange(n % 5, dtype=np.int32), "label": n}',
        "2KiB",
    )
    s = snap.open(path)
    assert len(s.shards) > 2
    made: list[bool] = []
    init = Chunks.__init__

    def seen(self: Chunks, parts: list[pa.Array]) -> None:
        init(self, parts)
        made.append(self.parts is not None)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Chunks, "__init__", seen)
        batches = list(s.loader(16, shuffle=shuffle, seed=5))
    assert made and all(made)
    labels = np.concatenate([b["label"] for b in batches])
    assert sorted(labels.tolist()) == list(range(320))
    assert (labels.tolist() == list(range(320))) is not shuffle
    for b in batches:
        for n, text, raw, tokens in zip(b["label"], b["text"], b["raw"], b["tokens"], strict=True):
            assert text == "w" * (n % 7) and raw == bytes([n % 256]) * (n % 9)
            assert tokens.dtype == np.int32 and tokens.tolist() == list(range(n % 5))


def test_a_plain_record_batch_of_bytes_is_read_where_the_page_cache_has_it(
    tmp_path: Path,
) -> None:
    """An uncompressed record batch decoded by Arrow (a window of text or bytes keeps its
    values) views the mapped shard file: no copy into new memory first, which with the
    kernel's zeroing of that memory was most of a first shuffled epoch of encoded images.
    Its checksum is still checked, and a damaged one still refused."""
    from snapshot_cli import storage
    from snapshot_cli.errors import CorruptShardError
    from snapshot_cli.readers.blocks import BlockFile

    path = str(tmp_path / "snap")
    snap.create(raw_records, path, inputs=range(8), compression="none", workers=0,
                shard_size="64KiB", progress=False)  # fmt: skip
    s = snap.open(path)
    entry = s.manifest.shards[0]
    file = storage.join(path, entry.path)
    f = BlockFile(file, entry, s.schema, entry.path)
    whole = f._whole()
    assert whole is not None
    start = np.frombuffer(whole, np.uint8).ctypes.data
    for i in range(len(entry.batch_sizes())):
        values = f.read(i, True).column("raw").buffers()[2]
        assert start <= values.address and values.address + values.size <= start + len(whole)
    with open(file, "r+b") as damaged:  # a value's byte of the last record batch changed
        damaged.seek(f.blocks[-1].offset + f.blocks[-1].length - 100)
        byte = damaged.read(1)
        damaged.seek(-1, 1)
        damaged.write(bytes([byte[0] ^ 1]))
    again = BlockFile(file, entry, s.schema, entry.path)
    with pytest.raises(CorruptShardError, match="record batch .* has crc32c"):
        again.read(len(f.blocks) - 1, True)


def raw_records(i: int) -> list[dict[str, Any]]:
    return [{"raw": bytes([n % 256]) * 3000, "label": n} for n in range(10 * i, 10 * i + 10)]
