"""Arrow columns → numpy, with the dtype and shape that were written (pure).

See :mod:`snapshot_cli.schema` for the encodings. Fixed-shape tensors and numeric columns
come back without copies where Arrow allows it (no nulls, not bool).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays, compiled, stored_types
from .. import schema as schema_mod

# the take of variable-width records in C (snapshot_cli/_ragged.c); else numpy's, Arrow's
_ragged: Any = compiled.load("ragged")


def _values(arr: pa.Array) -> np.ndarray:
    return arrays.to_numpy(arr)


def column_to_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One column → numpy: ``(n, *shape)`` for tensors, object arrays for ragged/str/bytes."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    k = schema_mod.kind(t)
    n = len(col)
    if k == "tensor" and stored_types.is_transposed(t):  # (its logical axes, as pyarrow gives)
        return np.ascontiguousarray(col.to_numpy_ndarray())
    if k == "tensor":
        storage = col.storage
        flat = _values(storage.flatten())
        return flat.reshape((n, *t.shape))
    if k == "scalar":
        return _values(col)
    if k == "ragged":
        return _ragged_to_numpy(col)
    # (not Arrow's to_numpy for text, lists of text and structs: that imports pandas, ~0.5 s)
    if k in TEXT or (pa.types.is_struct(t) and not schema_mod.null_count(col)):
        return _objects(col.to_pylist())  # (as fast as _ragged.take_text of consecutive rows)
    if _lists_of_text(t) and not schema_mod.null_count(col):  # captions, tags
        values, offsets = _own_values(col)
        return _records(_objects(values.to_pylist()), offsets.tolist(), None)
    return arrays.to_numpy(col)


TEXT = ("string", "binary")  # the schema kinds of text and bytes (large ones too)


def _lists_of_text(t: pa.DataType) -> bool:
    lists = pa.types.is_list(t) or pa.types.is_large_list(t)
    return lists and schema_mod.kind(t.value_type) in TEXT


def _objects(values: list[Any]) -> np.ndarray:
    """A list of Python values (str, bytes, dicts) → a 1-d object array of them."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _ragged_to_numpy(col: pa.Array) -> np.ndarray:
    n = len(col)
    if pa.types.is_list(col.type):
        lists, shapes = col, None
    else:
        lists, shapes = col.field(0), col.field(1)
    dims = None
    if shapes is not None:
        dims = _values(shapes.flatten()).reshape(n, shapes.type.list_size).tolist()
    values, offsets = _own_values(lists)
    flat = _values(values)
    if not flat.flags.writeable:  # (a plain record batch viewed in its shard's map: records
        flat = flat.copy()  # are writable in every other case, and masked in place)
    return _records(flat, offsets.tolist(), dims)


def _own_values(lists: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list array's own values and its offsets into them. Its ``values`` are those of the
    array it was sliced from (a batch of a window: all of the window's), and converting them
    all for each batch is a copy where values are bools or text."""
    offsets = arrays.to_numpy(lists.offsets)
    values = lists.values
    start, end = (int(offsets[0]), int(offsets[-1])) if len(lists) else (0, 0)
    if start or end != len(values):
        values, offsets = values.slice(start, end - start), offsets - start
    return values, offsets


def _records(flat: np.ndarray, bounds: list[int], dims: list[list[int]] | None) -> np.ndarray:
    """Record ``i`` a view ``flat[bounds[i]:bounds[i + 1]]`` (of shape ``dims[i]``), each
    stored as one object by fromiter: a batch of 256 records of 10-100 tokens in 68 us, where
    np.split and an element-wise loop took 346."""
    pairs = zip(bounds[:-1], bounds[1:], strict=True)
    if dims is None:
        parts = (flat[s:e] for s, e in pairs)
    else:
        parts = (flat[s:e].reshape(d) for (s, e), d in zip(pairs, dims, strict=True))
    return np.fromiter(parts, dtype=object, count=len(bounds) - 1)


def batch_to_numpy(
    batch: pa.RecordBatch | pa.Table, columns: list[str] | None = None
) -> dict[str, np.ndarray]:
    """A record batch or table → ``{column: numpy array}`` with the batch as leading dim."""
    names = columns if columns is not None else batch.schema.names
    return {name: column_to_numpy(batch.column(name)) for name in names}


def take_rows(col: pa.Array, rows: np.ndarray) -> np.ndarray:
    """Records ``rows`` of ``col``, as :func:`column_to_numpy` makes them of
    ``col.take(rows)``: a copy. Text, lists of text and ragged 1-d columns of numbers are
    taken by the compiled ``_ragged`` straight from the column's buffers, with the GIL held
    (a batch of 256 out of a window of 500,000 records: 10-100 token ids 313 -> 94 us, 10-60
    words 72 -> 20; numpy's and Arrow's takes let go of the GIL, which a training step that
    runs Python then held for up to a switch interval: see _ragged.c). Without it a ragged
    column's values are gathered in numpy (Arrow's take costs ~40 us a call on a window of a
    million records before it takes any); others go through Arrow's take. Ragged bools
    (bits) are each taken from their byte, with the compiled part's checks of the rows."""
    t = col.type
    if col.null_count == 0 and _ragged is not None and schema_mod.kind(t) in TEXT:
        return _take_text(col, np.ascontiguousarray(rows, dtype=np.int64))
    if _ragged is not None and _lists_of_text(t) and not schema_mod.null_count(col):
        items, bounds = _items(col, rows)  # the records' items, then the items
        return _records(_take_text(col.values, items), bounds.tolist(), None)
    if (
        _ragged is not None
        and pa.types.is_list(t)
        and pa.types.is_boolean(t.value_type)
        and not schema_mod.null_count(col)
    ):  # bools are bits: each taken from its byte (Arrow's take: 500 us a batch of 256)
        items, bounds = _items(col, rows)
        values = col.values
        at = items + values.offset
        bits = np.frombuffer(values.buffers()[1], np.uint8) if len(at) else np.zeros(1, np.uint8)
        return _records(((bits[at >> 3] >> (at & 7)) & 1).astype(bool), bounds.tolist(), None)
    if not pa.types.is_list(t) or col.null_count or arrays.numpy_dtype(t.value_type) is None:
        return column_to_numpy(col.take(arrays.from_numpy(rows)))
    offsets, values = arrays.to_numpy(col.offsets), arrays.to_numpy(col.values)
    if _ragged is not None:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        bounds = np.empty(len(rows) + 1, np.int64)
        taken = np.empty(_ragged.bounds(offsets, rows, bounds), values.dtype)
        _ragged.take_values(offsets, values, values.itemsize, rows, taken)
        return _records(taken, bounds.tolist(), None)
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1] - starts
    bounds = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    where = np.repeat(starts - bounds[:-1], lengths)
    where += np.arange(bounds[-1])
    return _records(values[where], bounds.tolist(), None)  # the values gathered: a copy


def _items(col: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values of a list array's records ``rows``, one after the other (their indices in
    ``col.values``), and where each record's start among them (``len(rows) + 1``)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    offsets, bounds = arrays.to_numpy(col.offsets), np.empty(len(rows) + 1, np.int64)
    total = _ragged.bounds(offsets, rows, bounds)  # (every row checked against the offsets)
    items = np.repeat(offsets[rows].astype(np.int64) - bounds[:-1], np.diff(bounds))
    items += np.arange(total)
    return items, bounds


def _take_text(col: pa.Array, rows: np.ndarray) -> np.ndarray:
    """Records ``rows`` of a text or bytes column without nulls → object array of str/bytes,
    made by ``_ragged`` straight from the column's buffers."""
    if not len(rows):
        return _objects([])
    large = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    _, offsets_buf, data = col.buffers()  # (col.offsets: pyarrow >= 20 for text)
    width = 8 if large else 4
    offsets = np.frombuffer(
        offsets_buf, np.int64 if large else np.int32, len(col) + 1, col.offset * width
    )
    binary = pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)
    return _objects(_ragged.take_text(offsets, b"" if data is None else data, rows, binary))


# A window's variable-width column is its record batches' parts. Text, bytes and 1-d lists of
# numbers without nulls are taken across the parts as they are (``_ragged.Parts``, with the
# compiled part) where their records are large enough; others are joined into chunks of at
# most CHUNK_BYTES (one chunk for any window of the default 256 MiB): Arrow's string, binary
# and list arrays count their values with 32-bit offsets, and joining more than 2 GiB of
# them (a shuffle_buffer of several GiB over text) failed with Arrow's "offset overflow".
# Joining copies every value into fresh memory each window: 20,000 shuffled records of
# 10-50 KB bytes spent 40 % of the CPU in the kernel's page faults for it
# (``benchmarks/shapes.py --shapes bytes``). Taking across parts costs ~15 ns a record more
# than from one array, and ~1 us a part to set up (measured, 500,000 records of 40 bytes of
# text in parts of 1 to 25,000 records): below PARTS_MIN_RECORD_BYTES a record, or
# PARTS_MIN_PART_BYTES a part, joining costs less.
CHUNK_BYTES = 1 << 30
PARTS_MIN_RECORD_BYTES = 64
PARTS_MIN_PART_BYTES = 16 << 10


class Chunks:
    """Consecutive Arrow arrays read as one column of ``len`` records (pure)."""

    def __init__(self, parts: list[pa.Array]) -> None:
        if not parts:
            raise ValueError("a column of no arrays")
        self.parts = _in_parts(parts)
        chunks: list[pa.Array] = []
        group: list[pa.Array] = []
        size = 0
        for part in parts if self.parts is None else ():
            nbytes = _units(part)
            if group and size + nbytes > CHUNK_BYTES:
                chunks.append(_joined(group))
                group, size = [], 0
            group.append(part)
            size += nbytes
        self.chunks = chunks + [_joined(group)] if self.parts is None else list(parts)
        kind = parts[0].type  # (what a batch's take needs, worked out once a window)
        text = self.parts is not None and schema_mod.kind(kind) in TEXT
        self._binary = text and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind))
        self._dtype = None if self.parts is None or text else arrays.numpy_dtype(kind.value_type)
        self.starts = np.cumsum([0] + [len(c) for c in self.chunks])  # chunk i: [starts[i], ...)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def slice(self, a: int, b: int) -> np.ndarray:
        """Records ``[a, b)`` → numpy, as :func:`column_to_numpy` makes them."""
        if len(self.chunks) == 1 or a >= b:
            return column_to_numpy(self.chunks[0].slice(a, b - a) if a < b else self.chunks[0][:0])
        first = int(np.searchsorted(self.starts, a, "right")) - 1
        pieces: list[np.ndarray] = []
        for i in range(first, len(self.chunks)):
            start = int(self.starts[i])
            if start >= b and pieces:
                break
            lo, hi = max(a, start) - start, min(b, int(self.starts[i + 1])) - start
            pieces.append(column_to_numpy(self.chunks[i].slice(lo, max(0, hi - lo))))
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Records ``rows`` → numpy, as :func:`take_rows` makes them (a copy)."""
        if self.parts is not None:
            return _take_parts(self.parts, rows, self._binary, self._dtype)
        if len(self.chunks) == 1:
            return take_rows(self.chunks[0], rows)
        which = np.searchsorted(self.starts, rows, "right") - 1
        out = np.empty(len(rows), dtype=object)
        for i in np.unique(which).tolist():
            mine = which == i
            out[mine] = take_rows(self.chunks[i], rows[mine] - self.starts[i])
        return out


def _in_parts(parts: list[pa.Array]) -> Any:
    """``_ragged.Parts`` over ``parts`` where their records can be taken across them as they
    are (several arrays of text, bytes or 1-d lists of numbers of one type, without nulls,
    large enough records in large enough parts), else None (joined)."""
    t = parts[0].type
    if _ragged is None or len(parts) < 2 or any(p.type != t or p.null_count for p in parts):
        return None
    records, nbytes = sum(len(p) for p in parts), sum(_units(p) for p in parts)
    if nbytes < PARTS_MIN_RECORD_BYTES * records or nbytes < PARTS_MIN_PART_BYTES * len(parts):
        return None
    if schema_mod.kind(t) in TEXT:
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        width = 8 if large else 4
        held = [(p, p.buffers()) for p in parts]
        offsets = [
            np.frombuffer(b[1], np.int64 if large else np.int32, len(p) + 1, p.offset * width)
            for p, b in held
        ]
        return _ragged.Parts(offsets, [b"" if b[2] is None else b[2] for _, b in held])
    if not pa.types.is_list(t) or arrays.numpy_dtype(t.value_type) is None:
        return None
    if pa.types.is_boolean(t.value_type) or any(p.values.null_count for p in parts):
        return None
    columns = [(arrays.to_numpy(p.offsets), arrays.to_numpy(p.values)) for p in parts]
    return _ragged.Parts([o for o, _ in columns], [v.view(np.uint8) for _, v in columns])


def _take_parts(parts: Any, rows: np.ndarray, binary: bool, dtype: np.dtype | None) -> np.ndarray:
    """Records ``rows`` of the column ``parts``, as :func:`take_rows` makes them: text (or
    bytes, ``binary``) where ``dtype`` is None, else lists of ``dtype`` values."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if dtype is None:
        return _objects(parts.take_text(rows, binary))
    bounds = np.empty(len(rows) + 1, np.int64)
    taken = np.empty(parts.bounds(rows, bounds), dtype)
    parts.take_values(taken.itemsize, rows, taken)
    return _records(taken, bounds.tolist(), None)


def _units(part: pa.Array) -> int:
    """What ``part`` adds toward Arrow's 32-bit offsets: the bytes of its buffers (of a
    slice, its own ranges: at least one per value), or the values of its lists of bools
    (bit-packed, eight to a byte) where they are more."""
    struct = pa.types.is_struct(part.type) and part.type.num_fields  # (an n-d ragged column's)
    lists = part.field(0) if struct else part
    if pa.types.is_list(lists.type) and pa.types.is_boolean(lists.type.value_type) and len(part):
        offsets = arrays.to_numpy(lists.offsets)
        return max(part.nbytes, int(offsets[-1]) - int(offsets[0]))
    return int(part.nbytes)


def _joined(parts: list[pa.Array]) -> pa.Array:
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
