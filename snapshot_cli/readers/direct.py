"""Record batches decoded straight into a window's arrays: one write per byte.

Arrow decodes a record batch into buffers of its own, which the loader then copied into the
shuffle window: two writes of every byte before the gather. For fixed-width columns (scalars
and fixed-shape tensors of numbers: images, embeddings, labels) the values are one buffer per
column, so snap places them itself: a compressed buffer is decompressed straight into the
window's rows (by the compiled call below, or ``cramjam`` where the system's liblz4 or libzstd
is missing; the GIL released), and an uncompressed one is read from the file into
them (``preadv`` scattering the message: the window's rows for the values, a scratch buffer
for the rest), the crc32c of the message computed over the pieces in order. In a shuffled
window, record batches go to their records' slots: checked, decompressed and placed by a
compiled call that takes a group of them and lets go of the GIL once (:func:`slot_job`,
:func:`decode_many`; ``snapshot_cli/_decode.c``), else decoded (:func:`values`) and then
scattered.

What Arrow would check, this checks for these columns: the record count, each array's length,
no nulls, each buffer inside the body and of exactly the size the rows need. Anything else (a
column of another type, a partial record batch, an unusual layout) is left to Arrow's decoder:
:func:`place` answers False and the caller decodes the batch as before.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any

import cramjam
import numpy as np
import pyarrow as pa

from .. import compiled
from ..ipc_layout import LZ4_FRAME, BatchLayout, Slot, column_slots
from .window import fixed_width, numpy_dtype, row_shape

# not compiled (no C compiler at install): the steps below, one by one
_decode: Any = compiled.load("decode")
AVAILABLE = _decode is not None  # record batches may be decoded into slots in one call

# columns of one compiled job; a wider record batch is decoded step by step
MAX_COLUMNS = getattr(_decode, "MAX_COLUMNS", 64)
_DECOMPRESS = {LZ4_FRAME: cramjam.lz4.decompress_into, 1: cramjam.zstd.decompress_into}
_CODECS = {LZ4_FRAME: pa.Codec("lz4"), 1: pa.Codec("zstd")}  # stateless: shared by threads


@dataclass(frozen=True)
class Placement:
    """The selected columns' slots, where every one of them is fixed-width (else None)."""

    slots: dict[str, Slot]
    forms: dict[str, tuple[np.dtype, tuple[int, ...]]]  # each column's dtype and record shape

    @classmethod
    def of(cls, schema: pa.Schema, columns: list[str]) -> Placement | None:
        slots = column_slots(schema)
        if slots is None or not all(slots.get(c) for c in columns):
            return None
        forms = {}
        for c in columns:
            t = schema.field(c).type
            if not fixed_width(t):  # the window keeps it as Arrow data
                return None
            forms[c] = (numpy_dtype(t), row_shape(t))
        return cls({c: slots[c] for c in columns}, forms)  # type: ignore[misc]


def regions(layout: BatchLayout, placement: Placement, rows: int) -> dict[str, tuple[int, int]]:
    """Each column's values as ``(start in the message, bytes)``, after checking the arrays'
    lengths and null counts; empty where the batch is not in the form placed directly."""
    if layout.length != rows:
        return {}
    out = {}
    nodes, buffers = layout.nodes, layout.buffers
    for name, slot in placement.slots.items():
        last_node = slot.node if slot.child is None else slot.child
        if last_node >= len(nodes) or slot.values >= len(buffers):
            return {}
        if nodes[slot.node, 0] != rows or nodes[slot.node, 1] != 0:
            return {}
        if slot.child is not None and (
            nodes[slot.child, 0] != rows * slot.width or nodes[slot.child, 1] != 0
        ):
            return {}
        offset, length = (int(x) for x in buffers[slot.values])
        out[name] = (layout.body_start + offset, length)
    return out


def place(
    message: memoryview,
    layout: BatchLayout,
    where: dict[str, tuple[int, int]],
    targets: dict[str, np.ndarray],
) -> bool:
    """Decode the values of every placed column of ``message`` (the whole record batch
    message; ``where``: its :func:`regions`) into ``targets`` (contiguous arrays of the
    batch's records); False where the batch is not in the form placed directly (nothing is
    then known to be written)."""
    if not where:
        return False
    if _in_one_call(layout, where, targets):
        return _place_compiled(message, layout, where, targets)
    for name, (start, length) in where.items():
        dest = targets[name].reshape(-1).view(np.uint8)
        raw = message[start : start + length]
        if layout.codec is None:
            if length < dest.nbytes:
                return False
            dest[:] = np.frombuffer(raw, np.uint8, dest.nbytes)
            continue
        if length < 8:
            return False
        (plain,) = struct.unpack_from("<q", raw, 0)
        if plain == -1:  # stored uncompressed: it did not shrink
            if length - 8 < dest.nbytes:
                return False
            dest[:] = np.frombuffer(raw, np.uint8, dest.nbytes, 8)
            continue
        if plain != dest.nbytes:
            return False
        try:
            # (numpy 2.5 types dest so that cramjam's stubs accept it; earlier versions do not)
            written = _DECOMPRESS[layout.codec](raw[8:], dest)  # type: ignore[arg-type, unused-ignore]
        except Exception as err:  # cramjam's DecompressionError, and anything it may raise
            raise pa.ArrowInvalid(f"column {name!r} cannot be decompressed: {err}") from err
        if written != dest.nbytes:
            raise pa.ArrowInvalid(
                f"column {name!r} decompressed to {written} bytes, the record batch says "
                f"{dest.nbytes}"
            )
    return True


def _in_one_call(
    layout: BatchLayout, where: dict[str, tuple[int, int]], targets: dict[str, np.ndarray]
) -> bool:
    """Whether one compiled call decodes the record batch's columns (their rows are whole
    and in order, so it decompresses each straight into them): one cramjam call and the
    Python around it cost ~30 us a column (500 columns of 2 KiB, 15 ms a record batch), and
    cramjam's lz4 ran at 2.1 GB/s into 16 MiB of rows where the compiled call ran at 5.7 (its
    frame decoder copies through a buffer of its own)."""
    if len(where) > MAX_COLUMNS or not slots_ready(layout, False):
        return False
    return all(targets[name].nbytes for name in where)


def _place_compiled(
    message: memoryview,
    layout: BatchLayout,
    where: dict[str, tuple[int, int]],
    targets: dict[str, np.ndarray],
) -> bool:
    rows = len(next(iter(targets.values())))
    codec = -1 if layout.codec is None else (0 if layout.codec == LZ4_FRAME else 1)
    columns = []
    for name, (begin, length) in where.items():
        dest = targets[name].reshape(-1).view(np.uint8)
        columns.append((begin, length, dest, max(1, dest.nbytes // max(1, rows))))
    try:
        result = _decode.decode(message, codec, columns, _identity(rows), 0, rows, rows, -1)
    except _decode.DecompressError as err:
        raise pa.ArrowInvalid(str(err)) from err
    return result != -2


@functools.lru_cache(maxsize=8)
def _identity(rows: int) -> np.ndarray:
    """Slots of records kept in order (record r to row r); read-only, shared by threads."""
    slots = np.arange(rows, dtype=np.int64)
    slots.flags.writeable = False
    return slots


def values(
    message: memoryview,
    layout: BatchLayout,
    where: dict[str, tuple[int, int]],
    placement: Placement,
    rows: int,
) -> dict[str, np.ndarray] | None:
    """The values of every placed column of ``message`` (``where``: its :func:`regions`) as
    arrays of ``rows`` records of the column's dtype and shape: views of the message where a
    buffer is stored plain, else Arrow's codec's output (twice cramjam's speed on 1 MiB
    buffers, measured) for the caller to copy where they go; None where the batch is not in
    the form placed directly."""
    if not where:
        return None
    out = {}
    for name, (start, length) in where.items():
        slot = placement.slots[name]
        need = rows * slot.width * slot.itemsize
        raw = message[start : start + length]
        if layout.codec is None:
            if length < need:
                return None
            data: Any = raw
        else:
            if length < 8:
                return None
            (plain,) = struct.unpack_from("<q", raw, 0)
            if plain == -1:  # stored uncompressed: it did not shrink
                if length - 8 < need:
                    return None
                data = raw[8:]
            elif not need <= plain < need + 64:  # Arrow pads a buffer it compresses to 8
                return None  # bytes: 100 uint8 values compress as 104 (kept: the first 100)
            else:
                data = _CODECS[layout.codec].decompress(raw[8:], plain)
        dtype, shape = placement.forms[name]
        out[name] = np.frombuffer(data, dtype, need // dtype.itemsize).reshape((rows, *shape))
    return out


def slots_ready(layout: BatchLayout, check: bool) -> bool:
    """Whether :func:`decode_many` can place a record batch of this layout (``check``: and
    compute its crc32c): compiled, with the codec's library and the CPU's crc32c if needed."""
    if _decode is None or (check and not _decode.HW_CRC):
        return False
    return layout.codec is None or bool(_decode.LZ4 if layout.codec == LZ4_FRAME else _decode.ZSTD)


@dataclass
class SlotJob:
    """A record batch's part prepared for :func:`decode_many` (``args``: the compiled
    ``decode``'s arguments), and what its reader needs to finish it."""

    args: tuple[Any, ...]
    batch: int  # the record batch's number in its shard
    where: dict[str, tuple[int, int]]
    reader: Any = None  # the BlockFile that made it, which finishes it (not one reopened)

    @property
    def check(self) -> bool:
        """Its crc32c is computed and must match (``expected`` >= 0)."""
        return bool(self.args[7] >= 0)

    @property
    def plain(self) -> bool:
        """Stored uncompressed (codec -1): a later epoch may gather from it."""
        return bool(self.args[1] == -1)

    @property
    def rows(self) -> int:
        """Records in the whole record batch."""
        return int(self.args[6])


def slot_job(
    message: Any,
    layout: BatchLayout,
    where: dict[str, tuple[int, int]],
    dests: dict[str, tuple[np.ndarray, int]],
    slots: np.ndarray,
    span: tuple[int, int, int],
    expected: int,
    batch: int = 0,
    reader: Any = None,
) -> SlotJob | None:
    """Records ``[start, stop)`` of record batch ``batch`` of ``rows`` (``span``), every
    placed column (``where``: its :func:`regions`) bound for its slots, record ``start + i``
    to row ``slots[i]`` of ``dests[column]`` (rows of bytes, and their width), its crc32c
    checked first where ``expected`` >= 0: a job for :func:`decode_many` (``reader``: the
    :class:`.blocks.BlockFile` that finishes it). None where that cannot be done here.
    An uncompressed record batch that needs no check goes this way too: the kernel's
    ``preadv`` to the slots (:meth:`.blocks.BlockFile.read_into`, where this module is not
    compiled) measured 1.35x slower in a first epoch with ``verify=False``, 1.4x in a later
    epoch of slot windows."""
    start, stop, rows = span
    if not where or len(where) > MAX_COLUMNS or not slots_ready(layout, expected >= 0):
        return None
    codec = -1 if layout.codec is None else (0 if layout.codec == LZ4_FRAME else 1)
    columns = [(begin, length, *dests[name]) for name, (begin, length) in where.items()]
    args = (message, codec, columns, slots, start, stop, rows, expected)
    return SlotJob(args, batch, where, reader)


def decode_many(jobs: list[tuple[Any, ...]]) -> list[int | str]:
    """Each job (a :func:`slot_job`'s ``args``) checked, decoded and put in its slots, all in
    one compiled call that lets go of the GIL once (``snapshot_cli/_decode.c``: with threads,
    each time a read thread wants the GIL back, a consumer running Python may keep it for
    5 ms). Per job: its crc32c (-1 unchecked; where it differs from the expected one nothing
    of that job was written), -2 where it is not in the form placed directly (nothing checked
    or written), or the decompressor's complaint about its damaged data (a str)."""
    return list(_decode.decode_many(jobs))
