"""Where an Arrow IPC file keeps its record batches, and their crc32c (pure).

An Arrow IPC file ends with a footer (a flatbuffer) listing each record batch as a *block*:
the byte offset of its message, the length of the message's metadata and of its body. snap
stores a crc32c of every block in the manifest (format 2), so a reader checks the bytes of a
record batch as it reads them, once, in the thread that decodes them, instead of reading every
shard a second time for the checksum of the whole file before its first record is used.

The footer is untrusted input: every offset is bounds-checked and a malformed footer is a
:class:`FooterError`, never an IndexError or a read outside the buffer. A footer that lies
about its blocks (right shape, wrong offsets) is caught by the blocks' checksums.

A block's checksum is derived on the writer's side without reading anything twice: the
writer keeps the running crc32c of the file at every write boundary, and
``crc(block) = crc_after ^ shift(crc_before, len)`` (crc32c is linear), where ``shift`` is the
checksum of ``len`` zero bytes continued from a value (:func:`range_crc`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import pyarrow as pa

from . import manifest_text
from .crc import crc32c

MAGIC = b"ARROW1"
TAIL = 10  # int32 footer length + "ARROW1"
BLOCK_BYTES = 24  # struct Block {offset: long; metaDataLength: int; (pad); bodyLength: long}
BLOCK_DTYPE = np.dtype([("offset", "<i8"), ("meta", "<i4"), ("pad", "<i4"), ("body", "<i8")])
_ZEROS = bytes(1 << 20)


class FooterError(ValueError):
    """The footer of an Arrow IPC file is malformed; the message says how."""


@dataclass(frozen=True)
class Block:
    """One record batch's message in the file: bytes ``[offset, offset + length)``, of which
    the first ``meta`` are its metadata (0: not said) and the rest its body."""

    offset: int
    length: int
    meta: int = 0

    @property
    def body(self) -> int:
        return self.length - self.meta


def footer_length(tail: bytes) -> int:
    """The footer's size in bytes, from the file's last :data:`TAIL` bytes."""
    if len(tail) != TAIL or tail[4:] != MAGIC:
        raise FooterError('the file does not end with "ARROW1"')
    (n,) = struct.unpack("<i", tail[:4])
    if n <= 0:
        raise FooterError(f"footer length {n}")
    return int(n)


def file_blocks(read: Callable[[int, int], bytes], file_size: int) -> BlockList:
    """The record batches' blocks of an Arrow IPC file from its footer, read by ``read(length,
    offset)``. FooterError if it has none that fits the file."""
    n = footer_length(read(TAIL, max(0, file_size - TAIL)))
    if n > file_size - TAIL:
        raise FooterError(f"footer length {n} exceeds the file")
    return record_batch_blocks(read(n, file_size - TAIL - n), file_size)


def file_schema(read: Callable[[int, int], bytes], file_size: int) -> pa.Schema:
    """The schema an Arrow IPC file declares, from its first message (after the 8 bytes of
    magic and padding), read by ``read(length, offset)``. FooterError if it is not one."""
    head = read(8, 8)
    if len(head) < 8:
        raise FooterError("no schema message after the magic")
    legacy = head[:4] != b"\xff\xff\xff\xff"  # (before Arrow 0.15: no continuation marker)
    n = int.from_bytes(head[:4] if legacy else head[4:], "little", signed=True)
    if n <= 0 or n > file_size - 8:
        raise FooterError(f"schema message length {n} does not fit the file")
    data = read(n + (4 if legacy else 8), 8)
    try:
        message = pa.ipc.read_message(pa.py_buffer(data))
        if message.type != "schema":
            raise FooterError(f"its first message is a {message.type}, not the schema")
        schema = pa.ipc.read_schema(message)
        manifest_text.names(schema)  # (a name not UTF-8: damaged bytes; pyarrow decodes names
        return schema  # only when asked, a UnicodeDecodeError where the loader compared them)
    except (pa.ArrowException, OSError, ValueError, IndexError) as err:  # (any of Arrow's: a
        # damaged type said "Integers with less than 8 bits not implemented", NotImplemented)
        raise FooterError(f"its schema cannot be read: {err}") from err


def record_batch_blocks(footer: bytes, file_size: int) -> BlockList:
    """The record batch blocks listed by ``footer`` (the flatbuffer alone), each checked to
    lie inside a file of ``file_size`` bytes before its footer."""
    end = file_size - TAIL - len(footer)
    vector = _block_vector(footer, 3)  # field 3: recordBatches
    if vector is None:
        return BlockList(*(np.zeros(0, np.int64),) * 3)
    first, count = vector
    table = np.frombuffer(footer, BLOCK_DTYPE, count, first)
    offset, body = table["offset"].astype(np.int64), table["body"].astype(np.int64)
    meta = table["meta"].astype(np.int64)
    outside = (offset < 0) | (meta <= 0) | (body < 0) | (offset > end) | (body > end)
    length = np.where(outside, 0, meta + body)  # each term at most end: no overflow
    outside |= offset + length > end
    misaligned = (offset % 8 != 0) | (meta % 8 != 0) | (body % 8 != 0)  # as Arrow's reader
    bad = outside | misaligned
    if bad.any():
        i = int(np.argmax(bad))
        o, m, b = int(offset[i]), int(meta[i]), int(body[i])
        if outside[i]:
            raise FooterError(
                f"record batch {i} is said to be at bytes {o}..{o + m + b}, outside the "
                f"file's {end} bytes of messages"
            )
        raise FooterError(
            f"record batch {i} is not aligned to 8 bytes (offset {o}, metadata {m} and "
            f"body {b} bytes)"
        )
    return BlockList(offset, length, meta)


def _block_vector(footer: bytes | memoryview, field: int) -> tuple[int, int] | None:
    """Where footer field ``field`` (2: dictionaries, 3: record batches), a vector of blocks,
    starts in ``footer`` and its length; None where the footer has no such field."""

    def u32(pos: int) -> int:
        if not 0 <= pos <= len(footer) - 4:
            raise FooterError(f"an offset points outside the footer ({pos})")
        return int(struct.unpack_from("<I", footer, pos)[0])

    root = u32(0)
    vtable = root - struct.unpack_from("<i", footer, root)[0] if root <= len(footer) - 4 else -1
    if not 0 <= vtable <= len(footer) - 4:
        raise FooterError("the footer's table is outside it")
    vtable_size = struct.unpack_from("<H", footer, vtable)[0]
    entry = 4 + 2 * field
    if entry + 2 > vtable_size or vtable + entry + 2 > len(footer):
        return None
    at = struct.unpack_from("<H", footer, vtable + entry)[0]
    if not at:
        return None
    vector = root + at + u32(root + at)
    count = u32(vector)
    first = vector + 4
    if count > (len(footer) - first) // BLOCK_BYTES:
        what = "record batches" if field == 3 else "dictionaries"
        raise FooterError(f"the footer lists {count} {what} it has no room for")
    return first, count


def block_vectors(footer: bytes | memoryview) -> list[tuple[int, int]]:
    """Where each block of the footer's dictionaries and record batches starts in it (a
    :data:`BLOCK_DTYPE` each) and how many: ``[(start, count)]``."""
    return [v for v in (_block_vector(footer, f) for f in (2, 3)) if v is not None]


class BlockList(Sequence[Block]):
    """The blocks of a footer as three arrays (a shard may hold tens of thousands of record
    batches: a Python object each cost 13 ms a 12,000, parsing them one by one 34 ms more);
    each :class:`Block` is made when asked for."""

    def __init__(self, offsets: np.ndarray, lengths: np.ndarray, metas: np.ndarray) -> None:
        self._offsets, self._lengths, self._metas = offsets, lengths, metas

    def __len__(self) -> int:
        return len(self._offsets)

    def lists(self) -> tuple[list[int], list[int], list[int]]:
        """Offsets, lengths and metadata lengths as lists of ints: a reader's lookups per
        record batch (a :class:`Block` made per look cost ~2 us, four times a record batch)."""
        return self._offsets.tolist(), self._lengths.tolist(), self._metas.tolist()

    def total_length(self, indices: np.ndarray) -> int:
        """The bytes of the blocks at ``indices``, in one numpy call (no Block per index)."""
        return int(self._lengths[indices].sum())

    @overload
    def __getitem__(self, i: int) -> Block: ...
    @overload
    def __getitem__(self, i: slice) -> list[Block]: ...
    def __getitem__(self, i: int | slice) -> Block | list[Block]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return Block(int(self._offsets[i]), int(self._lengths[i]), int(self._metas[i]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockList):
            return all(
                np.array_equal(a, b)
                for a, b in ((self._offsets, other._offsets), (self._lengths, other._lengths),
                             (self._metas, other._metas))
            )  # fmt: skip
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BlockList({list(self)!r})"


def shift(crc: int, length: int) -> int:
    """The crc32c of ``length`` zero bytes continued from ``crc``, less that from 0: how a
    running checksum before a range carries into the checksum after it."""
    a, b = crc, 0
    while length:
        n = min(length, len(_ZEROS))
        chunk = _ZEROS if n == len(_ZEROS) else memoryview(_ZEROS)[:n]
        a, b = crc32c(chunk, a), crc32c(chunk, b)
        length -= n
    return a ^ b


def range_crc(before: int, after: int, length: int) -> int:
    """crc32c of a range of ``length`` bytes, from the running crc32c of the whole stream
    just before it (``before``) and just after it (``after``)."""
    return after ^ shift(before, length)


def encode(crcs: list[int]) -> str:
    """Block checksums as the manifest stores them: 8 hex digits each, concatenated."""
    return "".join(f"{c:08x}" for c in crcs)


def decode(text: str) -> list[int]:
    """The checksums :func:`encode` wrote (a ValueError for anything but hex digits)."""
    if len(text) % 8:
        raise ValueError(f"{len(text)} hex digits are not 8 a checksum")
    return np.frombuffer(bytes.fromhex(text), ">u4").tolist()


def self_contained(schema: pa.Schema) -> bool:
    """Whether each record batch's message alone decodes (no dictionary-encoded column: those
    keep their dictionaries in separate messages), so it can be read and checked by itself."""

    def plain(t: pa.DataType) -> bool:
        if isinstance(t, pa.BaseExtensionType):
            return plain(t.storage_type)
        if pa.types.is_dictionary(t):
            return False
        return all(plain(t.field(i).type) for i in range(t.num_fields))

    return all(plain(f.type) for f in schema)
