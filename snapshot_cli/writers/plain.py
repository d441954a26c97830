"""Buffers that compression does not shrink, stored plain.

Arrow's IPC compression compresses every buffer of a record batch, and pyarrow writes each
compressed whatever it gives: encoded images, audio or noise come out of zstd or lz4 as
large as they went in, and a reader then pays a decompression (a copy into new memory) for
nothing: a shuffled epoch of 10-50 KB bytes ran at half the speed of the same records
uncompressed. Arrow's format lets a buffer of a compressed record batch be stored as it is
(its length prefix -1: ``docs/format.md`` §4.3), and Arrow's readers then take it where it
lies (a view of a memory-mapped shard), as snap's do.

:class:`PlainSink` sits between pyarrow's file writer and the shard's file: it follows the
stream of messages pyarrow writes, and in each compressed record batch stores plain every
buffer its codec shrank by less than :data:`MIN_SAVING`; the file's footer, which says where
each message is, is patched to match. Each message starts and ends on a write boundary, so
the writer's per-record-batch checksums still fall on them (:mod:`.shard`).
"""

from __future__ import annotations

import bisect
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from .. import ipc_blocks, ipc_layout

#: A buffer is kept compressed where its codec saves at least this much of it: JPEG, PNG or
#: MP3 bytes save 0-3 % (their headers, under zstd or lz4), noise nothing, while noisy raw
#: uint8 images save 6-7 % under lz4, dense float features ~7 %, text and labels 50-90 %:
#: the user's choice of codec stands wherever it does anything.
MIN_SAVING = 1 / 20
PLAIN = struct.pack("<q", -1)
#: A message larger than this passes through as pyarrow wrote it, never held: a record of a
#: GiB (a video, a volume) would otherwise be held twice more while its shard is written.
HELD_MAX = 64 << 20
MAGIC_BYTES = 8  # "ARROW1" and two bytes of padding
EOS = ipc_layout.CONTINUATION + bytes(4)
_ZEROS = bytes(8)
_CODECS = {ipc_layout.LZ4_FRAME: "lz4", ipc_layout.ZSTD: "zstd"}


def _pad(n: int) -> int:
    return -n % 8


def plain_message(message: memoryview) -> list[Any] | None:
    """``message`` (a record batch's whole IPC message) with each buffer its codec shrank by
    less than :data:`MIN_SAVING` stored plain, as the pieces to write one after the other
    (its metadata first); None where nothing changes (a message not compressed, every buffer
    worth its codec, or a layout this does not follow)."""
    meta = ipc_layout.metadata_size(bytes(message[:8]))
    fields = ipc_layout.message_fields(bytes(message[:meta]))
    if fields.header_type != ipc_layout.RECORD_BATCH or fields.codec not in _CODECS:
        return None
    if fields.body_length_at < 0 or meta + fields.body_length != len(message):
        return None
    at, n = fields.buffers_at, fields.buffers
    spans = struct.unpack_from(f"<{2 * n}q", message, at)
    body = message[meta:]
    codec = pa.Codec(_CODECS[fields.codec])
    pieces: list[Any] = [None]  # (the metadata, once the body's layout is known)
    table: list[int] = []
    changed, end, size = False, 0, 0
    for offset, length in zip(spans[::2], spans[1::2], strict=True):
        if offset < end or offset + length > len(body):  # not laid out in order: left alone
            return None
        end = offset + length
        piece: Any = body[offset:end]
        if length >= 8:
            (stated,) = struct.unpack_from("<q", piece)
            if stated >= 0 and length - 8 > stated * (1 - MIN_SAVING):
                piece, changed = codec.decompress(piece[8:], stated), True
                length = 8 + stated
                pieces.append(PLAIN)
        table += (size, length)
        pieces += (piece, _ZEROS[: _pad(length)])
        size += length + _pad(length)
    if not changed:
        return None
    head = bytearray(message[:meta])
    struct.pack_into(f"<{2 * n}q", head, at, *table)
    struct.pack_into("<q", head, fields.body_length_at, size)
    pieces[0] = head
    return pieces


class PlainSink:
    """A file-like object for ``pa.ipc.new_file`` writing to ``out`` (each message from a
    write boundary to the next), with :func:`plain_message` applied to each record batch;
    :meth:`finish` after the writer's ``close`` writes the footer, its blocks moved to where
    their messages went."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._pending = bytearray()
        self._old = 0  # where the pending bytes start in the stream pyarrow wrote
        self._tail = False  # after the end-of-stream marker: the footer
        self._raw = False  # a message this does not follow: everything passes as it is
        self._starts: list[int] = []  # each message's offset in pyarrow's stream...
        self._moved: list[tuple[int, int]] = []  # ...its offset in the file, and body length
        self._delta = 0  # bytes the file has more (or fewer) than pyarrow's stream so far
        self._changed = False  # a message written otherwise than pyarrow wrote it (its body
        # length, and the offsets after it, may differ even where the sizes add up the same)
        self._need = MAGIC_BYTES  # pending bytes before anything can be written
        self._through = 0  # bytes of a message over HELD_MAX still to pass straight on
        self.closed = False

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        if self._raw:
            self._out.write(data)
        elif self._through:
            with memoryview(data) as view, view.cast("B") as flat:
                now = min(n, self._through)
                self._out.write(flat[:now])
                self._through -= now
                if now < n:  # (the next message's first bytes)
                    self.write(flat[now:])
        else:
            self._pending += data
            if not self._tail and len(self._pending) >= self._need:
                self._drain()
        return n

    def _drain(self) -> None:
        while (found := self._next()) is not None:
            length, compressed = found
            with memoryview(self._pending) as view:
                message = view[:length]
                pieces = plain_message(message) if compressed else None
                self._starts.append(self._old)
                if pieces is None:
                    self._moved.append((self._old + self._delta, -1))
                    self._out.write(message)
                else:
                    size = sum(memoryview(p).nbytes for p in pieces)
                    self._moved.append((self._old + self._delta, size - len(pieces[0])))
                    for piece in pieces:
                        self._out.write(piece)
                    self._delta += size - length
                    self._changed = True
                del message, pieces  # (views of the pending bytes, which shrink next)
            del self._pending[:length]
            self._old += length
            self._need = 8

    def _next(self) -> tuple[int, bool] | None:
        """The length of the message the pending bytes start with and whether it is a
        compressed record batch, once they hold all of it (else None, and :attr:`_need` says
        how many they need): the file's magic and the end-of-stream marker count as one."""
        pending = self._pending
        if self._tail or len(pending) < self._need:
            return None
        if self._old == 0:  # the file's magic
            return MAGIC_BYTES, False
        if bytes(pending[:8]) == EOS:
            self._tail = True  # the footer follows: kept for finish()
            return 8, False
        try:
            meta = ipc_layout.metadata_size(bytes(pending[:8]))
            if len(pending) < meta:
                self._need = meta
                return None
            fields = ipc_layout.message_fields(bytes(pending[:meta]))
        except ipc_layout.LayoutError:
            self._give_up()
            return None
        self._need = meta + fields.body_length
        large = self._need > HELD_MAX
        if large and len(pending) < self._need:
            self._pass_through(self._need)
            return None
        if len(pending) < self._need:
            return None
        return self._need, fields.codec is not None and not large

    def _pass_through(self, length: int) -> None:
        """Write the ``length`` bytes of the message the pending bytes start as they come."""
        self._starts.append(self._old)
        self._moved.append((self._old + self._delta, -1))
        self._out.write(self._pending)
        self._through = length - len(self._pending)
        self._old += length
        self._pending = bytearray()
        self._need = 8

    def _give_up(self) -> None:
        """Pass the rest on as it is: safe only while nothing moved (the footer's offsets are
        pyarrow's); else an error to report (a pyarrow writing messages this cannot follow)."""
        if self._changed:
            raise RuntimeError(
                f"snap cannot follow the Arrow IPC stream pyarrow {pa.__version__} writes "
                f"(a message at byte {self._old}): please report it; meanwhile create with "
                "--compression none"
            )
        self._raw = True
        self._out.write(self._pending)
        self._pending = bytearray()

    def finish(self) -> None:
        """Write the footer pyarrow wrote (after its ``close``), its blocks moved."""
        if self._raw or not self._pending:
            return
        tail = self._pending
        n = ipc_blocks.footer_length(bytes(tail[-ipc_blocks.TAIL :]))
        footer = memoryview(tail)[len(tail) - ipc_blocks.TAIL - n : len(tail) - ipc_blocks.TAIL]
        if self._changed:
            for at, count in ipc_blocks.block_vectors(footer):
                table = np.frombuffer(footer, ipc_blocks.BLOCK_DTYPE, count, at)
                for i, old in enumerate(table["offset"].tolist()):
                    table["offset"][i], body = self._where(old)
                    if body >= 0:
                        table["body"][i] = body
                del table
        footer.release()
        self._out.write(tail)
        self._pending = bytearray()

    def _where(self, old: int) -> tuple[int, int]:
        """The file offset and (if changed) body length of the message pyarrow put at
        ``old``."""
        i = bisect.bisect_left(self._starts, old)
        if i < len(self._starts) and self._starts[i] == old:
            return self._moved[i]
        raise RuntimeError(f"pyarrow's footer lists a message at byte {old} it did not write")

    # what pyarrow asks of a Python file it writes
    def tell(self) -> int:
        return self._old - self._through + len(self._pending)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self.closed = True
