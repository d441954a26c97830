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
from dataclasses import dataclass

import crc32c
import pyarrow as pa

MAGIC = b"ARROW1"
TAIL = 10  # int32 footer length + "ARROW1"
BLOCK_BYTES = 24  # struct Block {offset: long; metaDataLength: int; (pad); bodyLength: long}
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


def record_batch_blocks(footer: bytes, file_size: int) -> list[Block]:
    """The record batch blocks listed by ``footer`` (the flatbuffer alone), each checked to
    lie inside a file of ``file_size`` bytes before its footer."""
    end = file_size - TAIL - len(footer)

    def u32(pos: int) -> int:
        if not 0 <= pos <= len(footer) - 4:
            raise FooterError(f"an offset points outside the footer ({pos})")
        return int(struct.unpack_from("<I", footer, pos)[0])

    root = u32(0)
    vtable = root - struct.unpack_from("<i", footer, root)[0] if root <= len(footer) - 4 else -1
    if not 0 <= vtable <= len(footer) - 4:
        raise FooterError("the footer's table is outside it")
    vtable_size = struct.unpack_from("<H", footer, vtable)[0]
    entry = 4 + 2 * 3  # field 3: recordBatches
    if entry + 2 > vtable_size or vtable + entry + 2 > len(footer):
        return []
    field = struct.unpack_from("<H", footer, vtable + entry)[0]
    if not field:
        return []
    vector = root + field + u32(root + field)
    count = u32(vector)
    first = vector + 4
    if count > (len(footer) - first) // BLOCK_BYTES:
        raise FooterError(f"the footer lists {count} record batches it has no room for")
    blocks = []
    for i in range(count):
        offset, meta, _, body = struct.unpack_from("<qiiq", footer, first + i * BLOCK_BYTES)
        length = meta + body
        if offset < 0 or meta <= 0 or body < 0 or offset + length > end:
            raise FooterError(
                f"record batch {i} is said to be at bytes {offset}..{offset + length}, "
                f"outside the file's {end} bytes of messages"
            )
        if offset % 8 or meta % 8 or body % 8:  # as Arrow's own file reader requires
            raise FooterError(
                f"record batch {i} is not aligned to 8 bytes (offset {offset}, metadata "
                f"{meta} and body {body} bytes)"
            )
        blocks.append(Block(int(offset), int(length), int(meta)))
    return blocks


def shift(crc: int, length: int) -> int:
    """The crc32c of ``length`` zero bytes continued from ``crc``, less that from 0: how a
    running checksum before a range carries into the checksum after it."""
    a, b = crc, 0
    while length:
        n = min(length, len(_ZEROS))
        chunk = _ZEROS if n == len(_ZEROS) else memoryview(_ZEROS)[:n]
        a, b = crc32c.crc32c(chunk, a), crc32c.crc32c(chunk, b)
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
    return [int(text[i : i + 8], 16) for i in range(0, len(text), 8)]


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
