"""The layout of one record batch's IPC message: its nodes, buffers and compression (pure).

An encapsulated Arrow IPC message is ``0xFFFFFFFF``, an int32 metadata size, the metadata (a
flatbuffer ``Message`` whose header is a ``RecordBatch``) and the body. The ``RecordBatch``
lists a *node* (length, null count) for every array in the schema's pre-order and a *buffer*
(offset, length within the body) for every buffer of those arrays. This module reads that
list, bounds-checked (untrusted input: anything malformed is a :class:`LayoutError`), and
says which node and buffers hold each column (:func:`column_slots`), so that a reader can
decode the values of fixed-width columns straight to where they are wanted
(:mod:`.readers.direct`) instead of through an intermediate Arrow array.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

CONTINUATION = b"\xff\xff\xff\xff"
RECORD_BATCH = 3  # MessageHeader.RecordBatch
LZ4_FRAME, ZSTD = 0, 1  # CompressionType


class LayoutError(ValueError):
    """The message is not a record batch snap can place directly; the text says why."""


class _Table:
    """A flatbuffer table at ``pos`` of ``buf``; every read is bounds-checked."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        vtable = pos - self._i32(pos)
        self.vtable = vtable
        self.vtable_size = self._u16(vtable)

    def _check(self, pos: int, width: int) -> None:
        if not 0 <= pos <= len(self.buf) - width:
            raise LayoutError(f"an offset points outside the metadata ({pos})")

    def _u16(self, pos: int) -> int:
        self._check(pos, 2)
        return int(struct.unpack_from("<H", self.buf, pos)[0])

    def _i32(self, pos: int) -> int:
        self._check(pos, 4)
        return int(struct.unpack_from("<i", self.buf, pos)[0])

    def _field(self, i: int) -> int | None:
        entry = 4 + 2 * i
        if entry + 2 > self.vtable_size:
            return None
        offset = self._u16(self.vtable + entry)
        return self.pos + offset if offset else None

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        pos = self._field(i)
        if pos is None:
            return default
        self._check(pos, struct.calcsize(fmt))
        return int(struct.unpack_from(fmt, self.buf, pos)[0])

    def table(self, i: int) -> _Table | None:
        pos = self._field(i)
        if pos is None:
            return None
        return _Table(self.buf, pos + self._i32(pos) % (1 << 32))

    def structs(self, i: int, width: int) -> np.ndarray:
        """A vector of structs of two int64 (``width`` 16) as an ``(n, 2)`` array."""
        pos = self._field(i)
        if pos is None:
            return np.zeros((0, 2), np.int64)
        start = pos + self._i32(pos) % (1 << 32)
        self._check(start, 4)
        n = int(struct.unpack_from("<I", self.buf, start)[0])
        if n > (len(self.buf) - start - 4) // width:
            raise LayoutError(f"a vector of {n} entries does not fit the metadata")
        return np.frombuffer(self.buf, "<i8", count=2 * n, offset=start + 4).reshape(n, 2)


@dataclass(frozen=True)
class BatchLayout:
    """Where a record batch's arrays are. Offsets are within the message bytes."""

    length: int  # records
    nodes: np.ndarray  # (n, 2) int64: length, null count of each array, schema pre-order
    buffers: np.ndarray  # (m, 2) int64: offset, length of each buffer, from the body start
    codec: int | None  # None: buffers are stored plain; else LZ4_FRAME or ZSTD
    body_start: int  # where the body starts in the message
    body_length: int


def metadata_size(prefix: bytes) -> int:
    """Bytes of the message before its body, from its first 8 bytes."""
    if len(prefix) != 8 or prefix[:4] != CONTINUATION:
        raise LayoutError("the message does not start with the IPC continuation marker")
    (n,) = struct.unpack_from("<i", prefix, 4)
    if n <= 0 or n % 8:
        raise LayoutError(f"metadata size {n}")
    return 8 + int(n)


def _message(metadata: bytes) -> tuple[_Table, int]:
    """The ``Message`` table of a message's first ``metadata_size`` bytes, and where its
    body starts."""
    body_start = metadata_size(metadata[:8])
    if len(metadata) < body_start:
        raise LayoutError("the metadata is cut short")
    flat = metadata[8:body_start]
    if len(flat) < 4:
        raise LayoutError("the metadata is empty")
    return _Table(flat, int(struct.unpack_from("<I", flat, 0)[0])), body_start


def batch_layout(metadata: bytes, message_length: int) -> BatchLayout:
    """The layout of a record batch message of ``message_length`` bytes from its first
    ``metadata_size`` bytes (``metadata``), every buffer checked to lie inside the body."""
    message, body_start = _message(metadata)
    if message.scalar(1, "<B") != RECORD_BATCH:
        raise LayoutError("the message is not a record batch")
    body_length = message.scalar(3, "<q")
    if body_length != message_length - body_start:
        raise LayoutError(f"body length {body_length}, the block has {message_length - body_start}")
    header = message.table(2)
    if header is None:
        raise LayoutError("the record batch has no header")
    length = header.scalar(0, "<q")
    nodes = header.structs(1, 16)
    buffers = header.structs(2, 16)
    compression = header.table(3)
    codec = None
    if compression is not None:
        codec = compression.scalar(0, "<b")
        if codec not in (LZ4_FRAME, ZSTD) or compression.scalar(1, "<b") != 0:
            raise LayoutError(f"compression {codec} is not one snap decodes itself")
    # Checked in Python: numpy's calls on such tiny arrays cost more than the loops (this
    # runs once per record batch in a fresh process's first epoch).
    spans = buffers.ravel().tolist()
    if length < 0 or min(nodes.ravel().tolist(), default=0) < 0 or min(spans, default=0) < 0:
        raise LayoutError("negative lengths or offsets")
    if any(o + n > body_length for o, n in zip(spans[::2], spans[1::2], strict=True)):
        raise LayoutError("a buffer lies outside the body")
    return BatchLayout(int(length), nodes, buffers, codec, body_start, int(body_length))


@dataclass(frozen=True)
class MessageFields:
    """Where a message's metadata (its first :func:`metadata_size` bytes, ``m``) keeps what a
    writer rewriting its body changes, as offsets in ``m``: the body length (an int64; -1
    where it is not stored: 0) and, for a compressed record batch, its buffers (``buffers``
    (offset, length) int64 pairs at ``buffers_at``; else 0 of them) and ``codec``."""

    header_type: int
    body_length: int
    body_length_at: int
    buffers_at: int
    buffers: int
    codec: int | None


def message_fields(metadata: bytes) -> MessageFields:
    """:class:`MessageFields` of any message (a schema, a dictionary, a record batch);
    LayoutError where the metadata is malformed."""
    message, _ = _message(metadata)
    header_type = message.scalar(1, "<B")
    length_at = message._field(3)
    body_length = message.scalar(3, "<q")
    if body_length < 0:
        raise LayoutError(f"body length {body_length}")
    buffers_at = buffers = 0
    codec = None
    header = message.table(2) if header_type == RECORD_BATCH else None
    compression = header.table(3) if header is not None else None
    if header is not None and compression is not None:
        codec = compression.scalar(0, "<b")
        pos = header._field(2)
        if pos is not None:
            start = pos + header._i32(pos) % (1 << 32)
            buffers = len(header.structs(2, 16))
            buffers_at = 8 + start + 4
    return MessageFields(
        header_type, int(body_length), -1 if length_at is None else 8 + length_at,
        buffers_at, buffers, codec,
    )  # fmt: skip


class LastLayout:
    """:func:`batch_layout`, remembering its last answer: uncompressed record batches of as
    many records have the same metadata, byte for byte (parsing costs ~20 µs of Python
    holding the GIL, comparing well under one)."""

    def __init__(self) -> None:
        self._last: tuple[bytes, int, BatchLayout] | None = None

    def __call__(self, metadata: bytes, message_length: int) -> BatchLayout:
        last = self._last
        if last is not None and last[1] == message_length and last[0] == metadata:
            return last[2]
        layout = batch_layout(metadata, message_length)
        self._last = (metadata, message_length, layout)
        return layout


@dataclass(frozen=True)
class Slot:
    """A fixed-width column's values: node ``node`` (and its child ``child`` for a tensor),
    buffer ``values``; ``width`` values per record of ``itemsize`` bytes."""

    node: int
    child: int | None
    values: int
    width: int
    itemsize: int


def column_slots(schema: pa.Schema) -> dict[str, Slot | None] | None:
    """For each column, its :class:`Slot` where its values are fixed-width numbers (scalars,
    fixed-shape tensors; not bool), None for any other column; None for the whole schema where
    a type's buffer count is not known here (then nothing is placed directly)."""
    out: dict[str, Slot | None] = {}
    node = buffer = 0
    for f in schema:
        t = f.type.storage_type if isinstance(f.type, pa.BaseExtensionType) else f.type
        counts = _counts(t)
        if counts is None:
            return None
        slot = None
        if _numeric(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t):
            slot = Slot(node, None, buffer + 1, 1, t.bit_width // 8)
        elif pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
            width = t.list_size
            slot = Slot(node, node + 1, buffer + 2, width, t.value_type.bit_width // 8)
        out[f.name] = slot
        node, buffer = node + counts[0], buffer + counts[1]
    return out


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _counts(t: pa.DataType) -> tuple[int, int] | None:
    """(nodes, buffers) an array of type ``t`` takes in a record batch message, or None."""
    if isinstance(t, pa.BaseExtensionType):
        return _counts(t.storage_type)
    if pa.types.is_null(t):
        return 1, 0
    if (
        pa.types.is_boolean(t)
        or _numeric(t)
        or pa.types.is_decimal(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_temporal(t)
    ):
        return 1, 2
    if pa.types.is_binary(t) or pa.types.is_string(t):
        return 1, 3
    if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        return 1, 3
    children: list[tuple[int, int] | None]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        own = (1, 2)
    elif pa.types.is_fixed_size_list(t) or pa.types.is_struct(t):
        own = (1, 1)
    else:
        return None  # views, unions, run-end encoded, dictionaries: not placed directly
    children = [_counts(t.field(i).type) for i in range(t.num_fields)]
    if any(c is None for c in children):
        return None
    return own[0] + sum(c[0] for c in children if c), own[1] + sum(c[1] for c in children if c)


NO_THREADS = pa.ipc.IpcReadOptions(use_threads=False)


def record_batch_message(buf: Any) -> pa.ipc.Message:
    """The IPC message in ``buf`` (its metadata and body), a record batch's, or ArrowInvalid."""
    try:
        message = pa.ipc.read_message(pa.py_buffer(buf))
    except EOFError as err:  # a zero length or end-of-stream marker where the message starts
        raise pa.ArrowInvalid(f"the block holds no message ({err})") from err
    if message.type != "record batch":
        raise pa.ArrowInvalid(f"the block holds a {message.type} message, not a record batch")
    return message


def message_batch(buf: Any, schema: pa.Schema) -> tuple[pa.RecordBatch, int, int]:
    """The record batch of an IPC message (its metadata and body, ``buf``), decoded by Arrow
    by ``schema``, with the sizes of the metadata (its length prefix included) and of the body.

    Never on Arrow's thread pool: where no thread could be started (``ulimit -v``, a pids
    limit), a record batch decompressed on it crashed the process about one time in two
    (pyarrow 19 to 26: its ParallelFor returned the error while tasks it had started still ran
    on its stack). Arrow's reader of one message has no such option: a stream of the schema
    and the message (one copy) has, and costs what it did (185 against 170 us for 1 MiB of
    lz4; Arrow's threads cost 340)."""
    message = record_batch_message(buf)
    metadata, body = message_sizes(buf, message)
    head = schema.serialize()
    stream = pa.allocate_buffer(head.size + metadata + body)
    with memoryview(stream) as raw, raw.cast("B") as out, memoryview(buf) as view:
        out[: head.size] = memoryview(head).cast("B")
        out[head.size :] = view.cast("B")[: metadata + body]
    return pa.ipc.open_stream(stream, options=NO_THREADS).read_next_batch(), metadata, body


def message_sizes(buf: Any, message: pa.ipc.Message) -> tuple[int, int]:
    """The sizes of the metadata (its length prefix included) and of the body of the IPC
    message ``message`` read from ``buf``."""
    with memoryview(buf) as view:
        head = bytes(view[:8])
    if head[:4] == CONTINUATION:
        metadata = 8 + int.from_bytes(head[4:8], "little", signed=True)
    else:  # the format before 0.15: a bare length
        metadata = 4 + int.from_bytes(head[:4], "little", signed=True)
    return metadata, message.body.size
