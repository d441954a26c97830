"""Shard files: Arrow IPC file format, compressed buffers, crc32c computed while writing.

:class:`ShardRoller` takes record batches of the right size and writes them into a sequence of
shards ``shards/<run>-<task>-<seq>.arrow``, starting a new one when the current one reaches
``shard_size`` bytes on disk. Shards are written once and never modified.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from typing import Any, BinaryIO

import pyarrow as pa
from fsspec import AbstractFileSystem

from .. import arrays, durable, ipc_blocks, layout, storage
from ..crc import crc32c
from ..errors import RecordError
from ..manifest import ShardEntry, encode_runs
from .options import Compression
from .plain import PlainSink

log = logging.getLogger(__name__)


class ChecksumSink:
    """A write-only file wrapper that keeps a running crc32c and byte count.

    It also remembers the running crc32c at every write boundary (``crc_at``), and after
    :meth:`keep_tail` the bytes written from then on (the footer), so that the checksum of each
    record batch can be derived once the footer says where they are (:mod:`..ipc_blocks`).
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.crc = 0
        self.size = 0
        self.closed = False
        self.crc_at: dict[int, int] = {0: 0}
        self.tail: bytearray | None = None

    def write(self, data: Any) -> int:
        self.crc = crc32c(data, self.crc)
        n = memoryview(data).nbytes
        self.size += n
        self.crc_at[self.size] = self.crc
        if self.tail is not None:
            self.tail += data
        self._raw.write(data)
        return n

    def keep_tail(self) -> None:
        self.tail = bytearray()

    def block_crcs(self) -> str:
        """The manifest's ``batch_crc32c`` of the file written (after close): each record
        batch's crc32c, or "" where the footer's blocks do not fall on write boundaries (a
        future Arrow writing differently: readers then check the whole file instead)."""
        tail = bytes(self.tail or b"")
        try:
            n = ipc_blocks.footer_length(tail[-ipc_blocks.TAIL :])
            if n > len(tail) - ipc_blocks.TAIL:
                return ""
            footer = tail[-ipc_blocks.TAIL - n : -ipc_blocks.TAIL]
            blocks = ipc_blocks.record_batch_blocks(footer, self.size)
        except (ipc_blocks.FooterError, struct.error):
            return ""
        crcs = []
        for b in blocks:
            before, after = self.crc_at.get(b.offset), self.crc_at.get(b.offset + b.length)
            if before is None or after is None:
                return ""
            crcs.append(ipc_blocks.range_crc(before, after, b.length))
        return ipc_blocks.encode(crcs)

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            # EINTR from close(2) only (Python tries its writes again): the descriptor is
            # released and every byte handed over; the commit's fsync finds any fault
            with contextlib.suppress(InterruptedError):
                self._raw.close()

    def discard(self) -> None:
        """Abandon the file: cancel an unfinished upload where fsspec can, else close it."""
        if self.closed:
            return
        self.closed = True
        # Each step may fail on a broken file; the caller is handling the error that matters.
        for step in (getattr(self._raw, "discard", None), self._raw.close):
            try:
                if callable(step):
                    step()
            except Exception as err:
                log.debug("discarding a partial shard: %s", err)


def shard_name(run: str, task: int, seq: int, writer: int | None = None) -> str:
    return layout.shard_path(run, task, seq, writer)


class ShardRoller:
    """Writes record batches into consecutive shards of one task, rolling at ``shard_size``."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        root: str,
        run: str,
        task: int,
        compression: Compression,
        shard_size: int,
        writer: int | None = None,  # the create's lease epoch: see layout.shard_path
    ) -> None:
        self.fs, self.root, self.run, self.task, self.writer = fs, root, run, task, writer
        self.options = compression.ipc_options()
        self.shard_size = shard_size
        self.entries: list[ShardEntry] = []
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._sink: ChecksumSink | None = None
        self._plain: PlainSink | None = None  # (compressed shards: buffers that did not shrink)
        self._rel = ""
        self._records = self._uncompressed = 0
        self._batch_sizes: list[int] = []
        self._self_contained = True

    def write(self, batch: pa.RecordBatch) -> int:
        """Append ``batch`` to the current shard; returns the bytes it added on disk."""
        writer, sink = self._writer, self._sink
        if writer is None or sink is None:
            writer, sink = self._open(batch.schema)
        before = sink.size
        with storage.errors_named(self.fs, storage.join(self.root, self._rel), "writing"):
            writer.write_batch(batch)  # (an object store's upload of a part may fail here)
        self._records += batch.num_rows
        self._batch_sizes.append(batch.num_rows)
        self._uncompressed += batch.nbytes
        written = sink.size - before
        if sink.size >= self.shard_size:
            written -= sink.size
            self.finish_shard()
            written += self.entries[-1].bytes  # the footer written on close
        return written

    def _open(self, schema: pa.Schema) -> tuple[pa.ipc.RecordBatchFileWriter, ChecksumSink]:
        if problem := arrays.too_deep(schema):
            raise RecordError(problem)
        self._rel = shard_name(self.run, self.task, len(self.entries), self.writer)
        path = storage.join(self.root, self._rel)
        self._sink = ChecksumSink(storage.open_write(self.fs, path))
        self._plain = PlainSink(self._sink) if self.options.compression else None
        target = self._sink if self._plain is None else self._plain
        self._writer = pa.ipc.new_file(target, schema, options=self.options)
        self._self_contained = ipc_blocks.self_contained(schema)
        self._records = self._uncompressed = 0
        self._batch_sizes = []
        return self._writer, self._sink

    def finish_shard(self) -> None:
        """Close the current shard (if any) and record its manifest entry."""
        if self._writer is None or self._sink is None:
            return
        self._sink.keep_tail()
        path = storage.join(self.root, self._rel)
        with storage.errors_named(self.fs, path, "writing"):  # (S3's upload is committed here)
            self._writer.close()
            if self._plain is not None:
                self._plain.finish()
            self._sink.close()
        durable.start_writeback(self.fs, path)
        batch_crcs = self._sink.block_crcs() if self._self_contained else ""
        if len(batch_crcs) != 8 * len(self._batch_sizes):
            batch_crcs = ""
        self.entries.append(
            ShardEntry(
                path=self._rel,
                records=self._records,
                record_batches=len(self._batch_sizes),
                bytes=self._sink.size,
                uncompressed_bytes=self._uncompressed,
                crc32c=f"{self._sink.crc:08x}",
                batch_rows=encode_runs(self._batch_sizes),
                batch_crc32c=batch_crcs,
            )
        )
        self._writer = self._sink = self._plain = None

    def abort(self) -> None:
        """Drop an open shard without recording it (after an error).

        Nothing here may raise: the error being handled is the one the user must see. An
        object-store upload is discarded rather than finished where the file allows it; a
        local file, written as it went, is deleted (a failed write left a truncated shard
        until the next create or gc); what else remains of the shard is unreferenced
        garbage that ``snap gc`` removes.
        """
        sink, self._writer, self._sink, self._plain = self._sink, None, None, None
        if sink is None:
            return
        sink.discard()
        if storage.is_local(self.fs):  # (elsewhere a call to a storage that may be failing)
            try:
                storage.remove(self.fs, storage.join(self.root, self._rel))
            except Exception as err:
                log.debug("deleting a partial shard: %s", err)
