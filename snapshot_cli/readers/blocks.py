"""Local shards read one record batch at a time, each checked against its own crc32c.

For a shard whose manifest entry lists a crc32c per record batch (format 2), the loader does
not read the whole file for its checksum first: each record batch's message is read where
it is in the page cache (the file mapped; ``preadv`` into the target where a copy is the
point), its crc32c computed over those bytes, and only then is it decoded or gathered: a
damaged one raises :class:`CorruptShardError` before any of its records is used.

A record batch checked once is not checked again by this process while the file is unchanged
(same path, size, mtime): later epochs cost what ``verify=False`` costs.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .. import ipc_blocks, ipc_layout
from ..crc import crc32c
from ..errors import DAMAGED, CorruptShardError
from ..manifest import ShardEntry
from . import checked, direct, disagree, gather, limits
from .direct import Placement
from .window import SlotTarget

IOV_CHUNK = 512  # pieces per preadv (Linux allows IOV_MAX = 1024)
HEAD_BYTES = 4096  # read first from a record batch's message: its metadata, usually whole
_DROP = hasattr(mmap, "MADV_DONTNEED")  # pages of a mapped file can leave RSS on demand


class BlockFile:
    """One local shard, its footer's blocks read and checked against the manifest."""

    def __init__(
        self, path: str, entry: ShardEntry, schema: pa.Schema, url: str, cached: bool = False,
        judged: disagree.Judged | None = None,
    ) -> None:  # fmt: skip
        self.url, self.schema = url, schema
        # What to do about damage: a shard cache's entry was checked whole when fetched, so
        # damage found later is its local copy's, not the snapshot's (recreating it recomputes)
        self.fix = (
            f"the local copy in the shard cache is damaged ({path}), not the snapshot (it was "
            "checked when fetched): delete that file and run again to fetch it anew"
            if cached
            else DAMAGED
        )
        self._file = limits.Descriptor(path)
        st = os.fstat(fd := self._file.fd)
        self.size = st.st_size
        if self.size != entry.bytes:
            raise CorruptShardError(
                f"shard {url} has {self.size} bytes, the manifest says {entry.bytes}; {self.fix}"
            )
        self._crcs = ipc_blocks.decode(entry.batch_crc32c)
        # (the schema too: a manifest edited since may give the same file another schema)
        version = (self.size, st.st_mtime_ns, entry.crc32c, checked.schema_key(schema))
        try:
            read = functools.partial(os.pread, fd)
            self.blocks = ipc_blocks.file_blocks(read, self.size)
            self._at, self._len, self._meta = self.blocks.lists()  # (per record batch: ints)
            # (once a file: values are read by the manifest's schema, never the file's)
            got = None if checked.seen(path, version) else ipc_blocks.file_schema(read, self.size)
        except ipc_blocks.FooterError as err:
            raise CorruptShardError(f"shard {url} cannot be opened: {err}; {self.fix}") from err
        urls, wrong = judged or ((url, "manifest.json"), lambda: False)  # (made on its own)
        counts = len(self._at), len(self._crcs)
        if error := disagree.layout_error(got, schema, counts, urls, wrong, self.fix):
            raise error
        self._done = checked.record_batches(path, version, len(self.blocks))
        self._mapped: mmap.mmap | None = None  # the whole file, once mapped
        self.touched = 0  # bytes read through the map (a figure for ShardReaders.release)
        self.bytes_read = 0  # record batches' bytes read, each time (stats()["bytes_read"])
        self._unmappable = False
        self._mapping = threading.Lock()
        self._layouts: dict[int, ipc_layout.BatchLayout] = {}
        self._where: dict[int, tuple[Placement, int, dict[str, tuple[int, int]]]] = {}
        # where each record batch's columns start in the file, by column (-1: not noted), and
        # which record batches it holds (1: noted; checked without numpy): one tuple, replaced
        # whole under _noting, as decoding threads note record batches of one file at once
        self._bases: tuple[Placement, dict[str, np.ndarray], bytearray] | None = None
        self._noting = threading.Lock()
        self._parse = ipc_layout.LastLayout()  # plain record batches' metadata repeats
        self._last_where: tuple[Any, ...] | None = None  # the last regions worked out
        self._subsets: dict[tuple[str, ...], pa.ipc.RecordBatchFileReader | None] = {}

    def read_into(
        self, i: int, verify: bool, rows: int, placement: Placement, targets: dict[str, Any]
    ) -> bool:
        """Record batch ``i``'s values decoded straight into ``targets`` (see :mod:`.direct`),
        checked first like :meth:`read`; False where it is not in the form placed directly."""
        block, fd = self.blocks[i], self._file.fd
        check = verify and not self._done[i]
        slotted = any(isinstance(t, SlotTarget) for t in targets.values())
        if slotted and check:
            # Read whole, checked, then scattered (read_values): a checksum runs 2.5x slower
            # over records already scattered to their slots than over the record batch while
            # it is in the CPU's cache (measured).
            return False
        layout = self._layout(i, lambda n: os.pread(fd, n, block.offset))
        if layout is None:
            return False
        self._fits(i, layout.body_start, layout.body_length)
        if slotted and layout.codec is not None:
            return False  # compressed: decoded whole, then scattered (read_values)
        if layout.codec is not None:
            with memoryview(self._message(i)) as view:
                if check:
                    self._check(i, crc32c(view))
                where = self._regions(i, layout, placement, rows, view)
                return direct.place(view, layout, where, targets)
        where = self._regions(i, layout, placement, rows, None)
        head = os.pread(fd, layout.body_start, block.offset) if check else b""
        if not where or not self._scatter(i, head, layout, where, targets, check):
            return False
        self._note(i, placement, rows, where)  # a later epoch may gather from it
        return True

    @property
    def fd(self) -> int:
        return self._file.fd

    def map(self) -> mmap.mmap:
        """A read-only map of the whole file (a gathered window's; the caller unmaps it). Its
        pages count in RSS: ~2x those read (large folios); a map per record batch cost 1.4x."""
        return limits.map_read_only(self._file.fd)

    def _note(
        self, i: int, placement: Placement, rows: int, where: dict[str, tuple[int, int]]
    ) -> None:
        """Note where record batch ``i``'s columns (stored plain: ``where``, its regions,
        each holding its ``rows`` records) start in the file, for :meth:`placed`, once it was
        read and checked; not where a buffer lies outside the message."""
        known, size = self._bases, self._len[i]
        if known and known[0] is placement and known[2][i]:
            return  # noted before (a later epoch reading slot windows)
        if any(start + length > size for start, length in where.values()):
            return
        with self._noting:
            known = self._bases
            if known is None or known[0] is not placement:
                fresh = {c: np.full(len(self.blocks), -1, np.int64) for c in where}
                known = self._bases = (placement, fresh, bytearray(len(self.blocks)))
            for name, (start, _) in where.items():
                known[1][name][i] = self._at[i] + start
            known[2][i] = 1

    def placed(self, batches: np.ndarray, placement: Placement) -> dict[str, np.ndarray] | None:
        """Where these record batches' columns start in the file, as a read noted them
        (:meth:`_note`, once checked) for this placement; None unless it noted all of them."""
        known = self._bases
        if known is None or known[0] is not placement:
            return None
        out = {name: at[batches] for name, at in known[1].items()}
        if not all((v >= 0).all() for v in out.values()):
            return None
        self.bytes_read += self.blocks.total_length(batches)  # (a later epoch's hot path)
        return out

    def read_values(
        self, i: int, verify: bool, rows: int, placement: Placement
    ) -> dict[str, np.ndarray] | None:
        """Record batch ``i``'s values (:func:`.direct.values`), checked first like
        :meth:`read` (None where not in the form placed directly); values stored plain are
        views of the mapped file."""
        buf = memoryview(self._message(i))
        if verify and not self._done[i]:
            self._check(i, crc32c(buf))
        layout = self._layout(i, lambda n: bytes(buf[:n]))
        if layout is None:
            return None
        self._fits(i, layout.body_start, layout.body_length)
        where = self._regions(i, layout, placement, rows, buf)
        if layout.codec is None and where:
            self._note(i, placement, rows, where)  # a later epoch may gather from it
        return direct.values(buf, layout, where, placement, rows)

    def slot_job(
        self,
        i: int,
        verify: bool,
        placement: Placement,
        dests: dict[str, tuple[np.ndarray, int]],
        slots: np.ndarray,
        span: tuple[int, int, int],
    ) -> direct.SlotJob | None:
        """Records ``[start, stop)`` of record batch ``i`` (``span``) as a job for
        :func:`.direct.decode_many` (then :meth:`slot_done`), checked first like :meth:`read`:
        :func:`.direct.slot_job`."""
        buf = self._message(i)
        layout = self._layout(i, lambda n: bytes(buf[:n]))
        if layout is None:
            return None
        self._fits(i, layout.body_start, layout.body_length)
        where = self._regions(i, layout, placement, span[2], buf)
        crc = int(self._crcs[i]) if verify and not self._done[i] else -1  # -1: not checked
        return direct.slot_job(buf, layout, where, dests, slots, span, crc, i, self)

    def slot_done(self, job: direct.SlotJob, result: int | str, placement: Placement) -> bool:
        """After :func:`.direct.decode_many`: CorruptShardError, or ArrowInvalid for damaged
        data; False where it was not placed (nothing done)."""
        if isinstance(result, str):
            raise pa.ArrowInvalid(result)
        if result == -2:
            return False
        if job.check:
            self._check(job.batch, result)
        if job.plain:  # a later epoch may gather from it
            self._note(job.batch, placement, job.rows, job.where)
        return True

    def _message(self, i: int) -> Any:
        """Record batch ``i``'s message: a view of the file mapped whole (no copy out of the
        page cache: a compressed one is decoded from there, a plain one's text and bytes
        taken: their copy first was 48 % of a shuffled epoch of bytes), else read (a copy)."""
        m = self._whole()
        if m is None:
            return self._read_block(i)
        at, length = self._at[i], self._len[i]
        if len(m) < at + length:  # the file shrank after it was opened
            self._short(i, max(0, len(m) - at), length)
        self.touched += length
        with memoryview(m) as whole:
            return whole[at : at + length]

    def _whole(self) -> mmap.mmap | None:
        """The file, mapped once for this object's life (None where it cannot be)."""
        if self._mapped is None and not self._unmappable:
            with self._mapping:
                if self._mapped is None and not self._unmappable:
                    try:
                        self._mapped = self.map()
                    except (OSError, ValueError):  # ENOMEM, a file that cannot be mapped
                        self._unmappable = True
        return self._mapped

    def release(self) -> None:
        """The mapped file's pages leave RSS (not the page cache) once a window's reads are
        done (a view in use reads them again); without the GIL (:func:`.gather.drop`)."""
        if (m := self._mapped) is not None and _DROP:
            with contextlib.suppress(OSError):
                gather.drop(m, 0, len(m))

    def _layout(self, i: int, read: Callable[[int], bytes]) -> ipc_layout.BatchLayout | None:
        """Record batch ``i``'s layout, parsed once per process from the first bytes of its
        message (``read(n)``: the first ``n``); None where it is not one placed directly."""
        layout = self._layouts.get(i)
        if layout is None:
            length = self._len[i]
            head = read(min(length, HEAD_BYTES))
            try:
                size = ipc_layout.metadata_size(head[:8])
                if size > len(head):
                    head = read(min(length, size))
                layout = self._parse(head[:size], length)
            except ValueError:  # a LayoutError, or a message cut short
                return None
            self._layouts[i] = layout
        return layout

    def _regions(
        self, i: int, layout: ipc_layout.BatchLayout, placement: Placement, rows: int, message: Any
    ) -> dict[str, tuple[int, int]]:
        """:func:`.direct.regions` of record batch ``i``, once per placement and layout (~35 µs
        of Python, GIL held), each buffer checked to hold the records the batch declares."""
        known = self._where.get(i)
        if known is not None and known[0] is placement and known[1] == rows:
            return known[2]
        last = self._last_where
        if last is not None and last[0] is layout and last[1] is placement and last[2] == rows:
            where, plain = last[3], layout.codec is None  # (plain: checked with them)
        else:
            where, plain = direct.regions(layout, placement, rows), False
        for name, (start, length) in () if plain else where.items():  # before any compiled
            slot, have = placement.slots[name], length  # call: each holds the batch's records
            if layout.codec is not None and length >= 8:  # the size it states (-1: stored plain)
                stated = int.from_bytes(message[start : start + 8], "little", signed=True)
                have = length - 8 if stated == -1 else stated
            if have < (need := rows * slot.width * slot.itemsize):  # (a forged count: 2**53 - 1)
                what = f"column {name!r} holds {have:,} bytes, its {rows:,} records need {need:,}"
                raise CorruptShardError(f"shard {self.url} record batch {i}: {what}; {self.fix}")
        self._last_where = (layout, placement, rows, where)  # (checked: kept)
        self._where[i] = (placement, rows, where)
        return where

    def _scatter(
        self,
        i: int,
        head: bytes,
        layout: ipc_layout.BatchLayout,
        where: dict[str, tuple[int, int]],
        targets: dict[str, Any],
        check: bool,
    ) -> bool:
        """An uncompressed record batch: its body read by ``preadv``, each column's values
        straight into its target rows (or its records' slots: a :class:`SlotTarget`),
        everything else into scratch; checksummed in order."""
        block = self.blocks[i]
        pieces: list[tuple[int, int, list[Any]]] = []
        for name, (start, length) in where.items():
            target = targets[name]
            if isinstance(target, SlotTarget):
                size = target.nbytes
                if length < size:
                    return False  # a buffer too short for its records: left to Arrow
                pieces.append((start, size, target.buffers()))
                continue
            dest = target.reshape(-1).view(np.uint8)
            if length < dest.nbytes:
                return False  # a buffer too short for its records: left to Arrow's decoder
            pieces.append((start, dest.nbytes, [dest]))
        pieces.sort(key=lambda p: p[0])
        views: list[Any] = []
        pos = layout.body_start
        for start, length, dests in pieces:
            if start < pos or start + length > block.length:
                return False  # overlapping or outside: left to Arrow's decoder
            if start > pos:
                views.append(np.empty(start - pos, np.uint8))
            views.extend(dests)
            pos = start + length
        if pos < block.length:
            views.append(np.empty(block.length - pos, np.uint8))
        got = 0
        at = block.offset + layout.body_start
        for k in range(0, len(views), IOV_CHUNK):  # a preadv takes at most IOV_MAX pieces
            part = views[k : k + IOV_CHUNK]
            n = os.preadv(self._file.fd, part, at + got)
            got += n
            if n != sum(v.nbytes for v in part):
                break
        if got != block.length - layout.body_start:
            self._short(i, got + layout.body_start, block.length)
        if check:
            crc = crc32c(head[: layout.body_start])
            for view in views:
                crc = crc32c(view, crc)
            self._check(i, crc)
        return True

    def _read_block(self, i: int) -> pa.Buffer:
        buf = pa.allocate_buffer(length := self._len[i])
        with memoryview(buf) as view:
            got = os.preadv(self._file.fd, [view], self._at[i])
        if got != length:
            self._short(i, got, length)
        return buf

    def _short(self, i: int, got: int, length: int) -> None:
        ends = f"the file ends inside it (read {got} of {length} bytes)"
        raise CorruptShardError(f"shard {self.url} record batch {i}: {ends}; {self.fix}")

    def _fits(self, i: int, metadata: int, body: int) -> None:
        """Record batch ``i``'s message has the footer's sizes; each read of one comes here."""
        meta, length = self._meta[i], self._len[i]
        self.bytes_read += length
        if metadata != meta or body != length - meta:
            raise CorruptShardError(
                f"shard {self.url} record batch {i}: its message has {metadata} bytes of "
                f"metadata and {body} of body, the footer says {meta} and {length - meta}; "
                f"{self.fix}"
            )

    def _check(self, i: int, crc: int) -> None:
        """Record batch ``i`` is not checked again if ``crc`` is the manifest's; else
        CorruptShardError."""
        if crc != self._crcs[i]:
            said = f"record batch {i} has crc32c {crc:08x}, the manifest says {self._crcs[i]:08x}"
            raise CorruptShardError(f"shard {self.url} is damaged: {said}; {self.fix}")
        self._done[i] = True

    def read(self, i: int, verify: bool, columns: tuple[str, ...] = ()) -> pa.RecordBatch:
        """Record batch ``i`` (only ``columns``, if given), checked (``verify``) before it is
        decoded, never on Arrow's thread pool (:func:`.ipc_layout.message_batch`); by the file's
        reader where mapped: only ``columns`` decompressed, all in half the time (93 vs 185 us)."""
        buf = self._message(i)  # (plain values used from the page cache: see _message)
        if verify and not self._done[i]:
            self._check(i, crc32c(buf))
        if (reader := self._reader(columns)) is not None:
            self._fits(i, *ipc_layout.message_sizes(buf, ipc_layout.record_batch_message(buf)))
            return reader.get_batch(i)
        batch, metadata, body = ipc_layout.message_batch(buf, self.schema)  # (rare: a copy)
        self._fits(i, metadata, body)
        return batch.select(list(columns)) if columns else batch

    def _reader(self, columns: tuple[str, ...]) -> pa.ipc.RecordBatchFileReader | None:
        """Arrow's reader of the file mapped, once; None unless its schema is the manifest's."""
        if columns not in self._subsets and (m := self._whole()) is not None:
            fields = [self.schema.get_field_index(c) for c in columns] or None
            ipc = pa.ipc.IpcReadOptions(included_fields=fields, use_threads=False)
            reader = pa.ipc.open_file(pa.py_buffer(m), options=ipc)
            self._subsets[columns] = reader if reader.schema.equals(self.schema, True) else None
        return self._subsets.get(columns)
