"""Record batches of a remote shard read by byte range, without fetching the whole shard.

For a remote snapshot larger than the loader's in-memory budget (and no ``cache_dir``),
fetching whole shards would fetch each shard again for every window that needs one of its
record batches. Instead each record batch is read with its own range request: every byte
crosses the network once per epoch, and the requests of many reader threads are in flight
at once (each waits only its time to first byte).

An Arrow IPC file ends with its footer (schema and the byte range of every record batch).
:class:`Tails` fetches each shard's tail once and keeps it; :class:`RangeFile` is a file
object that serves reads inside the tail from there and any other read with one
``cat_file(path, start, end)``. pyarrow reads a record batch with one read of its block, so
a ``get_batch`` costs one request. ``pa.PythonFile`` serialises reads on one file object, so
each reader thread opens its own :class:`RangeFile` per shard (cheap: the tail is shared).

Every read of a message, the tail's too, is checked before pyarrow decodes it
(:class:`Regions`): a record batch's message against the manifest's crc32c of it (format 2).
A format 1 shard (no crc32c per record batch: dictionary columns) is read whole once by
range, its crc32c checked, and the crc32c of each of its messages kept from those bytes: its
later reads are checked against them. A mismatch is read again once (the tail too: bytes
damaged in transit are not damage at rest) before the shard is called damaged
(:class:`CheckedReader`).
"""

from __future__ import annotations

import io
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .. import ipc_blocks, storage
from ..crc import crc32c
from ..errors import DAMAGED, CorruptShardError, SnapError
from ..manifest import ShardEntry

WHOLE_PART = 8 << 20  # bytes a request of a format 1 shard read whole (whole_regions)
TAIL_GUESS = 64 << 10  # bytes fetched from a shard's end: the footer of ~1,000 batches fits
_MAGIC = b"ARROW1"
# Values as the record batches hold them, whatever byte order the footer's schema declares (a
# flipped bit in a footer, read by range and covered by no crc32c, made pyarrow byte-swap every
# value); no thread pool (see ipc_layout.message_batch).
_AS_WRITTEN = pa.ipc.IpcReadOptions(ensure_native_endian=False, use_threads=False)


class Tails:
    """The footer region of each shard, fetched once, by one thread (the others wait)."""

    def __init__(self) -> None:
        self._tails: dict[str, tuple[int, bytes]] = {}
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Lock] = {}  # one fetch of a shard's tail at a time
        self.requests, self.fetched = 0, 0  # range requests and bytes, tails' and RangeFiles'

    def count(self, n: int) -> None:
        with self._lock:
            self.requests, self.fetched = self.requests + 1, self.fetched + n

    def get(self, fs: Any, path: str, size: int, fresh: bool = False) -> tuple[int, bytes]:
        """``(offset, bytes)``: the shard's last bytes, holding at least its whole footer
        (``fresh``: fetched again, replacing those kept)."""
        with self._lock:
            known, gate = self._tails.get(path), self._gates.setdefault(path, threading.Lock())
        if known is not None and not fresh:
            return known
        with gate:
            with self._lock:
                now = self._tails.get(path)
            if now is not None and (not fresh or now is not known):  # (fetched meanwhile)
                return now
            return self._fetch_tail(fs, path, size)

    def _fetch_tail(self, fs: Any, path: str, size: int) -> tuple[int, bytes]:
        start = max(0, size - TAIL_GUESS)
        tail = self._fetch(fs, path, start, size)
        if len(tail) < 10 or tail[-6:] != _MAGIC:
            raise CorruptShardError(
                f"shard {storage.to_url(fs, path)} does not end like an Arrow file; the {DAMAGED}"
            )
        (footer_len,) = struct.unpack("<i", tail[-10:-6])
        need = footer_len + 10
        if need > len(tail) and need <= size:
            start = size - need
            tail = self._fetch(fs, path, start, size)
        with self._lock:  # (the very tuple every opener gets: regions are keyed by it)
            self._tails[path] = kept = (start, tail)
        return kept

    def _fetch(self, fs: Any, path: str, start: int, end: int) -> bytes:
        self.count(end - start)
        with storage.errors_named(fs, path, "reading"):
            data = storage.read_range(fs, path, start, end)
        if len(data) != end - start:
            raise CorruptShardError(
                f"shard {storage.to_url(fs, path)} is shorter than the manifest says; the {DAMAGED}"
            )
        return bytes(data)


class _Mismatch(CorruptShardError):
    """A range read's bytes are not their crc32c: read again once before the verdict."""


@dataclass(frozen=True)
class Regions:
    """The messages of one shard a range read may fall in (sorted by offset), each with the
    crc32c its bytes must have and what it is called in a message."""

    url: str
    offsets: np.ndarray
    lengths: np.ndarray
    crcs: list[int]
    names: list[str]
    against: str  # where the crc32c come from

    def find(self, start: int, end: int) -> int:
        """The region holding bytes ``[start, end)``, else _Mismatch (a footer misread)."""
        k = int(np.searchsorted(self.offsets, start, side="right")) - 1
        if k < 0 or end > int(self.offsets[k] + self.lengths[k]):
            raise _Mismatch(f"shard {self.url}: bytes {start}-{end} are in no record batch")
        return k

    def check(self, k: int, data: bytes) -> None:
        got = crc32c(data)
        if got != self.crcs[k]:
            raise _Mismatch(
                f"shard {self.url} is damaged: {self.names[k]} has crc32c {got:08x} (read "
                f"twice), {self.against} {self.crcs[k]:08x}; {DAMAGED}"
            )


def _footer_blocks(url: str, size: int, tail: tuple[int, bytes]) -> ipc_blocks.BlockList:
    start, data = tail
    try:
        n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
        if n + ipc_blocks.TAIL > len(data):
            raise ipc_blocks.FooterError(f"footer length {n} exceeds the file")
        footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
        return ipc_blocks.record_batch_blocks(footer, size)
    except ipc_blocks.FooterError as err:
        raise _Mismatch(f"shard {url} cannot be opened: {err}; {DAMAGED}") from err


def manifest_regions(url: str, entry: ShardEntry, blocks: ipc_blocks.BlockList) -> Regions:
    """A format 2 shard's record batches, each against the manifest's crc32c of it."""
    crcs = ipc_blocks.decode(entry.batch_crc32c)
    if len(blocks) != len(crcs):
        raise _Mismatch(
            f"shard {url} has {len(blocks)} record batches, the manifest says {len(crcs)}; "
            f"{DAMAGED}"
        )
    offsets = np.array([b.offset for b in blocks[:]], np.int64)
    lengths = np.array([b.length for b in blocks[:]], np.int64)
    order = np.argsort(offsets, kind="stable")
    return Regions(
        url, offsets[order], lengths[order], [crcs[i] for i in order],
        [f"record batch {i}" for i in order], "the manifest says",
    )  # fmt: skip


def whole_regions(
    read: Callable[[int, int], bytes], url: str, entry: ShardEntry, size: int,
    tail: tuple[int, bytes], blocks: ipc_blocks.BlockList,
) -> Regions:  # fmt: skip
    """A format 1 shard read whole (``read(start, end)``, requests of up to WHOLE_PART bytes:
    one a message made a shard of 1,000 record batches wait 1,000 times-to-first-byte), its
    crc32c the manifest's, and the crc32c of each record batch's message and of the
    messages before the first (its schema and dictionaries) kept from those bytes."""
    ordered = sorted(blocks[:], key=lambda b: b.offset)
    first = ordered[0].offset if ordered else tail[0]
    spans = [(0, first, "its schema and dictionaries")]
    spans += [(b.offset, b.offset + b.length, "") for b in ordered]
    index = {b.offset: i for i, b in enumerate(blocks[:])}
    cuts = sorted({0, size, *(s for s, _, _ in spans), *(e for _, e, _ in spans)})
    crc, got, kept = 0, {}, bytearray()
    part: tuple[int, bytes] = (0, b"")  # the bytes of the last request, from its offset
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b > part[0] + len(part[1]):  # (up to WHOLE_PART, whole pieces at least)
            end = next((c for c in cuts if c >= a + WHOLE_PART), size)
            part = (a, read(a, max(end, b)))
        piece = part[1][a - part[0] : b - part[0]]
        crc = crc32c(piece, crc)
        got[(a, b)] = crc32c(piece)
        if b > tail[0]:
            kept += piece[max(0, tail[0] - a) :]
    if f"{crc:08x}" != entry.crc32c or bytes(kept) != tail[1]:
        raise _Mismatch(
            f"shard {url} is damaged: crc32c {crc:08x} (read twice), the manifest says "
            f"{entry.crc32c}; {DAMAGED}"
        )
    spans = [s for s in spans if s[1] > s[0]]
    return Regions(
        url, np.array([s for s, _, _ in spans], np.int64),
        np.array([e - s for s, e, _ in spans], np.int64), [got[(s, e)] for s, e, _ in spans],
        [n or f"record batch {index[s]}" for s, _, n in spans],
        "its bytes had when the shard's crc32c was checked",
    )  # fmt: skip


class CheckedReader:
    """A shard's Arrow file reader over range requests, every read checked (:class:`Regions`);
    a mismatch (or a footer that cannot be read) is read again once, its tail fetched anew,
    before it is CorruptShardError."""

    def __init__(self, open_reader: Callable[[bool], Any]) -> None:
        self._open = open_reader  # (fresh: the tail fetched again)
        try:
            self._reader = open_reader(False)
        except CorruptShardError:
            self._reader = open_reader(True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def get_batch(self, i: int) -> pa.RecordBatch:
        try:
            return self._reader.get_batch(i)
        except _Mismatch:
            self._reader = self._open(True)
            return self._reader.get_batch(i)

    get_record_batch = get_batch


@dataclass(frozen=True)
class Expected:
    """What a shard's range reads are checked against: its manifest entry (None: nothing,
    the readers were made with ``verify=False``)."""

    entry: ShardEntry | None


class RangedReaders:
    """Each thread's Arrow file readers of shards over range requests (at most ``max_open``
    a thread; ``pa.PythonFile`` serialises reads on one file object), the tails shared."""

    def __init__(self, max_open: int) -> None:
        self.tails, self.max_open = Tails(), max_open
        self._local = threading.local()
        self._regions: dict[str, tuple[tuple[int, bytes], Regions]] = {}
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Lock] = {}

    def reader(
        self, fs: Any, path: str, size: int, check: Callable[[Any], None], expected: Expected
    ) -> CheckedReader:
        """This thread's reader of the shard at ``path``, ``check``ed when opened, its reads
        checked against ``expected``."""
        readers: OrderedDict[str, Any] | None = getattr(self._local, "readers", None)
        if readers is None:
            readers = self._local.readers = OrderedDict()
        if path in readers:
            readers.move_to_end(path)
            return readers[path]

        def open_reader(fresh: bool) -> Any:
            tail = self.tails.get(fs, path, size, fresh)
            regions = self.regions(fs, path, size, tail, expected, fresh)
            source = RangeFile(fs, path, size, tail, self.tails, regions)
            try:
                reader = pa.ipc.open_file(pa.PythonFile(source, mode="r"), options=_AS_WRITTEN)
            except (pa.ArrowException, OSError) as err:  # (its footer: read again once)
                if isinstance(err, SnapError):  # the storage's failure, or damage found
                    raise
                url = storage.to_url(fs, path)
                raise _Mismatch(f"shard {url} cannot be opened: {err}; {DAMAGED}") from err
            check(reader)
            return reader

        reader = CheckedReader(open_reader)
        readers[path] = reader
        if len(readers) > self.max_open:
            readers.popitem(last=False)
        return reader

    def regions(
        self, fs: Any, path: str, size: int, tail: tuple[int, bytes], expected: Expected,
        fresh: bool,
    ) -> Regions | None:  # fmt: skip
        """What the shard's reads are checked against, worked out once a tail (a format 1
        shard's: read whole), by one thread."""
        entry, url = expected.entry, storage.to_url(fs, path)
        if entry is None:
            return None
        with self._lock:
            gate = self._gates.setdefault(path, threading.Lock())
        with gate:
            known = self._regions.get(path)
            if known is not None and known[0] is tail and not fresh:
                return known[1]
            blocks = _footer_blocks(url, size, tail)
            if entry.batch_crc32c:
                regions = manifest_regions(url, entry, blocks)
            else:
                regions = whole_regions(
                    lambda a, b: self.tails._fetch(fs, path, a, b), url, entry, size, tail, blocks
                )
            with self._lock:
                self._regions[path] = (tail, regions)
            return regions


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file of known size, one request per read, each
    read checked against ``regions`` (None: unchecked) before it is used."""

    def __init__(
        self, fs: Any, path: str, size: int, tail: tuple[int, bytes], tails: Tails | None = None,
        regions: Regions | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.fs, self.path, self._size, self._tails = fs, path, size, tails
        self._tail_start, self._tail = tail
        self._regions = regions
        self._held: tuple[int, bytes] | None = None  # the message last read in parts
        self._pos = 0
        self.requests = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        start, end = self._pos, self._pos + n
        if self._regions is None:
            data = self._piece(start, end)
        else:
            data = self._checked(self._regions, start, end)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _checked(self, regions: Regions, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``: a whole message checked, or a part of one (read whole,
        checked, and kept for the next read of that message)."""
        try:
            k = regions.find(start, end)
        except _Mismatch:
            if start >= self._tail_start:  # the footer: what it says is checked by its use
                return self._piece(start, end)
            raise
        at, length = int(regions.offsets[k]), int(regions.lengths[k])
        if (start, end) == (at, at + length):
            data = self._piece(start, end)
            regions.check(k, data)
            return data
        if self._held is None or self._held[0] != at:
            whole = self._piece(at, at + length)
            regions.check(k, whole)
            self._held = (at, whole)
        return self._held[1][start - at : end - at]

    def _piece(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``, from the tail where they are in it, else fetched."""
        if start >= self._tail_start:
            return self._tail[start - self._tail_start : end - self._tail_start]
        return self._fetch(start, end)

    def _fetch(self, start: int, end: int) -> bytes:
        self.requests += 1
        if self._tails is not None:
            self._tails.count(end - start)
        with storage.errors_named(self.fs, self.path, "reading"):
            data = storage.read_range(self.fs, self.path, start, end)
        if len(data) != end - start:
            raise CorruptShardError(
                f"shard {storage.to_url(self.fs, self.path)}: bytes {start}-{end} gave "
                f"{len(data)}; the file is shorter than the manifest says"
            )
        return bytes(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        out = bytearray(max(0, min(size, self._size - self._pos)))
        got = self.readinto(out)
        return bytes(out[:got])
