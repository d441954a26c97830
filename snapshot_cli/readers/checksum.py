"""crc32c of shard bytes (a local file through a short-lived memory map, or a buffer), whole
or per record batch."""

from __future__ import annotations

import mmap
import os
from typing import Any

import pyarrow as pa

from .. import ipc_blocks, ipc_layout
from ..crc import crc32c
from ..manifest import ShardEntry

_CRC_CHUNK = 8 << 20


def crc32c_file(path: str) -> str:
    """crc32c of a local file, straight from the page cache through a short-lived memory map
    (no copy; the mapping, and the pages it counted in this process's RSS, end on return)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return f"{crc32c(b''):08x}"
        # (its size given: mmap, asked to learn it, ignores a failing fstat and maps 0 bytes,
        # whose EINVAL hid the storage's error)
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                return crc32c_buffer(view)
            finally:
                view.release()


def crc32c_buffer(source: Any) -> str:
    """crc32c of a buffer, in chunks (the GIL is released for large chunks)."""
    crc = 0
    view = memoryview(source)
    for start in range(0, len(view), _CRC_CHUNK):
        crc = crc32c(view[start : start + _CRC_CHUNK], crc)
    return f"{crc:08x}"


def block_problem(path: str | None, source: Any, entry: ShardEntry) -> str | None:
    """What is wrong with the manifest's per record batch checksums of a shard whose whole
    crc32c is right (a local ``path``, or the bytes ``source``), or None: the footer's blocks
    must be the manifest's record batches, each with its checksum."""
    if not entry.batch_crc32c:
        return None
    if path is None:
        return _blocks_in(memoryview(source), entry)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), os.fstat(f.fileno()).st_size,
                                          access=mmap.ACCESS_READ) as m:  # fmt: skip
        view = memoryview(m)
        try:
            return _blocks_in(view, entry)
        finally:
            view.release()


def _blocks_in(view: memoryview, entry: ShardEntry) -> str | None:
    size, tail = len(view), ipc_blocks.TAIL
    try:
        n = ipc_blocks.footer_length(bytes(view[size - tail :]))
        if n > size - tail:
            raise ipc_blocks.FooterError(f"footer length {n} exceeds the file")
        blocks = ipc_blocks.record_batch_blocks(bytes(view[size - tail - n : size - tail]), size)
    except ipc_blocks.FooterError as err:
        return f"its footer cannot be read: {err}"
    wanted = ipc_blocks.decode(entry.batch_crc32c)
    if len(blocks) != len(wanted):
        return f"has {len(blocks)} record batches, the manifest says {len(wanted)}"
    for i, (block, want) in enumerate(zip(blocks, wanted, strict=True)):
        message = view[block.offset : block.offset + block.length]
        got = crc32c(message)
        if got != want:
            return f"record batch {i} has crc32c {got:08x}, the manifest says {want:08x}"
        problem = _misplaced(message, block)
        if problem is not None:
            return f"record batch {i}: {problem}"
    return None


def _misplaced(message: memoryview, block: ipc_blocks.Block) -> str | None:
    """The message is not where the footer says, as the loader requires (readers/blocks.py):
    its metadata and body exactly the lengths the footer gives. (pyarrow's own file reader
    checks this in some versions only: pyarrow 19 took a metadata length 8 bytes too long.)"""
    try:
        parsed = pa.ipc.read_message(pa.py_buffer(message))
    except (pa.ArrowException, EOFError, OSError) as err:
        return f"its message cannot be read: {err}"
    metadata, body = ipc_layout.message_sizes(message, parsed)
    if (metadata, body) != (block.meta, block.body):
        return (
            f"its message has {metadata} bytes of metadata and {body} of body, the footer "
            f"says {block.meta} and {block.body}"
        )
    return None
