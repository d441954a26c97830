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
"""

from __future__ import annotations

import io
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .. import storage
from ..errors import DAMAGED, CorruptShardError

TAIL_GUESS = 64 << 10  # bytes fetched from a shard's end: the footer of ~1,000 batches fits
_MAGIC = b"ARROW1"


class Tails:
    """The footer region of each shard, fetched once (thread-safe)."""

    def __init__(self) -> None:
        self._tails: dict[str, tuple[int, bytes]] = {}
        self._lock = threading.Lock()
        self.requests, self.fetched = 0, 0  # range requests and bytes, tails' and RangeFiles'

    def count(self, n: int) -> None:
        with self._lock:
            self.requests, self.fetched = self.requests + 1, self.fetched + n

    def get(self, fs: Any, path: str, size: int) -> tuple[int, bytes]:
        """``(offset, bytes)``: the shard's last bytes, holding at least its whole footer."""
        with self._lock:
            if path in self._tails:
                return self._tails[path]
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
        with self._lock:
            self._tails[path] = (start, tail)
        return start, tail

    def _fetch(self, fs: Any, path: str, start: int, end: int) -> bytes:
        self.count(end - start)
        with storage.errors_named(fs, path, "reading"):
            data = storage.read_range(fs, path, start, end)
        if len(data) != end - start:
            raise CorruptShardError(
                f"shard {storage.to_url(fs, path)} is shorter than the manifest says; the {DAMAGED}"
            )
        return bytes(data)


class RangedReaders:
    """Each thread's Arrow file readers of shards over range requests (at most ``max_open``
    a thread; ``pa.PythonFile`` serialises reads on one file object), the tails shared."""

    def __init__(self, max_open: int) -> None:
        self.tails, self.max_open = Tails(), max_open
        self._local = threading.local()

    def reader(
        self, fs: Any, path: str, size: int, check: Callable[[Any], None]
    ) -> pa.ipc.RecordBatchFileReader:
        """This thread's reader of the shard at ``path``, ``check``ed when opened."""
        readers: OrderedDict[str, Any] | None = getattr(self._local, "readers", None)
        if readers is None:
            readers = self._local.readers = OrderedDict()
        if path in readers:
            readers.move_to_end(path)
            return readers[path]
        tail = self.tails.get(fs, path, size)
        source = pa.PythonFile(RangeFile(fs, path, size, tail, self.tails), mode="r")
        reader = pa.ipc.open_file(source)
        check(reader)
        readers[path] = reader
        if len(readers) > self.max_open:
            readers.popitem(last=False)
        return reader


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file of known size, one request per read."""

    def __init__(
        self, fs: Any, path: str, size: int, tail: tuple[int, bytes], tails: Tails | None = None
    ) -> None:
        super().__init__()
        self.fs, self.path, self._size, self._tails = fs, path, size, tails
        self._tail_start, self._tail = tail
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
        if start >= self._tail_start:
            data: bytes = self._tail[start - self._tail_start : end - self._tail_start]
        else:
            self.requests += 1
            if self._tails is not None:
                self._tails.count(n)
            with storage.errors_named(self.fs, self.path, "reading"):
                data = storage.read_range(self.fs, self.path, start, end)
            if len(data) != n:
                raise CorruptShardError(
                    f"shard {storage.to_url(self.fs, self.path)}: bytes {start}-{end} gave "
                    f"{len(data)}; the file is shorter than the manifest says"
                )
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        out = bytearray(max(0, min(size, self._size - self._pos)))
        got = self.readinto(out)
        return bytes(out[:got])
