"""Random access to the record batches of a snapshot's shards, verified once per shard.

Local shards are read with positioned reads (``pread``) of just the record batch wanted: the
page cache is shared by every process replaying the snapshot, and this process holds only
what it decodes. (Memory-mapping would save one copy of uncompressed data, but every page
touched would then count in this process's resident memory until the shard is closed, so a
shuffled replay's RSS would grow with the snapshot.) Shards on other filesystems are fetched
whole and kept in a small cache bounded in bytes. The first time a shard is opened, its
size and crc32c are checked against the manifest: damaged data raises
:class:`CorruptShardError`, never reaches the model.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import Any

import crc32c
import pyarrow as pa

from .. import storage
from ..errors import CorruptShardError
from ..manifest import ShardEntry

_CRC_CHUNK = 8 << 20
# Local shards already verified by this process: (path, size, mtime_ns, crc32c). A new loader
# for the next epoch or sweep trial does not checksum them again; a rewritten file would have
# another mtime.
_verified_local: set[tuple[str, int, int, str]] = set()


class ShardReaders:
    """Opens shards on demand; thread-safe; keeps at most ``max_open`` / ``max_bytes`` open."""

    def __init__(
        self,
        fs: Any,
        root: str,
        shards: tuple[ShardEntry, ...],
        verify: bool = True,
        max_open: int = 128,
        max_bytes: int = 1 << 30,
    ) -> None:
        self.fs, self.root, self.shards, self.verify = fs, root, shards, verify
        self.local = storage.is_local(fs)
        self.max_open, self.max_bytes = max_open, max_bytes
        self._open: OrderedDict[int, tuple[pa.ipc.RecordBatchFileReader, int]] = OrderedDict()
        self._held_bytes = 0
        self._verified: set[int] = set()
        self._lock = threading.Lock()
        self._opening: dict[int, threading.Lock] = {}
        self.bytes_read = 0

    def url(self, i: int) -> str:
        return storage.to_url(self.fs, storage.join(self.root, self.shards[i].path))

    def _source(self, i: int) -> tuple[Any, int]:
        """The shard's bytes as an Arrow source, checked against the manifest."""
        entry, url = self.shards[i], self.url(i)
        path = storage.join(self.root, entry.path)
        try:
            if self.local:
                source: Any = pa.OSFile(path, "r")
                size = source.size()
            else:
                data = storage.read_bytes(self.fs, path)
                source, size = pa.py_buffer(data), len(data)
        except FileNotFoundError as err:
            raise CorruptShardError(f"shard {url} is missing") from err
        if size != entry.bytes:
            raise CorruptShardError(
                f"shard {url} has {size} bytes, the manifest says {entry.bytes}; "
                "the snapshot is damaged: recreate it with snap create --overwrite"
            )
        key = (path, size, os.stat(path).st_mtime_ns, entry.crc32c) if self.local else None
        if self.verify and i not in self._verified and key not in _verified_local:
            crc = crc32c_file(path) if self.local else crc32c_buffer(source)
            if crc != entry.crc32c:
                raise CorruptShardError(
                    f"shard {url} is damaged: crc32c {crc}, the manifest says {entry.crc32c}; "
                    "recreate the snapshot with snap create --overwrite"
                )
            if key is not None:
                _verified_local.add(key)
        self._verified.add(i)
        return source, size

    def reader(self, i: int) -> pa.ipc.RecordBatchFileReader:
        with self._lock:
            if i in self._open:
                self._open.move_to_end(i)
                return self._open[i][0]
            gate = self._opening.setdefault(i, threading.Lock())
        with gate:  # one thread opens (and verifies) a shard; the others wait for it
            with self._lock:
                if i in self._open:
                    return self._open[i][0]
            source, size = self._source(i)
            try:
                reader = pa.ipc.open_file(source)
            except (pa.ArrowException, OSError) as err:
                raise CorruptShardError(f"shard {self.url(i)} cannot be opened: {err}") from err
            with self._lock:
                held = 0 if self.local else size
                self._open[i] = (reader, held)
                self._held_bytes += held
                self.bytes_read += size
                while len(self._open) > self.max_open or (
                    self._held_bytes > self.max_bytes and len(self._open) > 1
                ):
                    _, (_, evicted) = self._open.popitem(last=False)
                    self._held_bytes -= evicted
                self._opening.pop(i, None)
            return reader

    def read_batch(self, shard: int, batch: int, rows: int) -> pa.RecordBatch:
        """Record batch ``batch`` of shard ``shard``, decoded; checks it has ``rows`` records."""
        reader = self.reader(shard)
        try:
            rb = reader.get_batch(batch)
        except (pa.ArrowException, OSError, IndexError) as err:
            raise CorruptShardError(
                f"shard {self.url(shard)} record batch {batch} cannot be decoded: {err}"
            ) from err
        if rb.num_rows != rows:
            raise CorruptShardError(
                f"shard {self.url(shard)} record batch {batch} has {rb.num_rows} records, "
                f"the manifest says {rows}"
            )
        return rb

    def close(self) -> None:
        with self._lock:
            self._open.clear()
            self._held_bytes = 0


def crc32c_file(path: str) -> str:
    """crc32c of a local file, straight from the page cache through a short-lived memory map
    (no copy; the mapping, and the pages it counted in this process's RSS, end on return)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return f"{crc32c.crc32c(b''):08x}"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
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
        crc = crc32c.crc32c(view[start : start + _CRC_CHUNK], crc)
    return f"{crc:08x}"
