"""Whole-shard downloads from remote storage as parallel range requests.

One GET stream from an object store gives ~50-200 MB/s however fast the machine is, and
pays the time to first byte (tens of ms) before any data. A shard is therefore fetched as
``chunk``-sized ranges, up to ``streams`` of them in flight at once across every shard this
process is fetching (one shared pool): bytes in flight are bounded by
``streams * chunk``, and a single shard downloads as fast as several streams allow. This is
what ``gsutil``'s sliced downloads and the S3 transfer manager do.

Whole shards rather than the record batches a window needs: a shuffled replay reads every
batch of a shard within a short time anyway, and ranges per batch would multiply the
requests (each paying the time to first byte) without saving bytes;
``benchmarks/remote.py`` measures both.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .. import storage
from ..crc import crc32c
from ..errors import DAMAGED, CorruptShardError
from ..manifest import ShardEntry

DEFAULT_STREAMS = 16
DEFAULT_CHUNK = 8 << 20

Sink = Callable[[int, bytes], None]


class Fetcher:
    """Downloads byte ranges of remote files with a bounded pool of streams (thread-safe)."""

    def __init__(self, streams: int | None = None, chunk: int | None = None) -> None:
        streams = DEFAULT_STREAMS if streams is None else streams
        chunk = DEFAULT_CHUNK if chunk is None else chunk
        if streams < 1 or chunk < 1:
            raise ValueError(f"streams and chunk must be >= 1, got {streams}, {chunk}")
        self.streams, self.chunk = streams, chunk
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes = 0

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.streams, thread_name_prefix="snap-fetch")
            return self._pool

    def _range(self, fs: Any, path: str, start: int, end: int) -> bytes:
        data = storage.read_range(fs, path, start, end)
        if len(data) != end - start:
            raise CorruptShardError(
                f"shard {storage.to_url(fs, path)} is shorter than the manifest says (bytes "
                f"{start}-{end} gave {len(data)}); the snapshot is damaged: recreate it with "
                "snap create --overwrite"
            )
        with self._lock:
            self.requests += 1
            self.bytes += len(data)
        return data

    def fetch_to_sink(self, fs: Any, path: str, size: int, sink: Sink) -> str:
        """:meth:`fetch_into`, returning the bytes' crc32c (hex) computed on the way (a cache
        entry's filler, :class:`.cache.ShardCache`)."""
        crc = 0

        def put(offset: int, data: bytes) -> None:  # ranges arrive in offset order
            nonlocal crc
            crc = crc32c(data, crc)
            sink(offset, data)

        self.fetch_into(fs, path, size, put)
        return f"{crc:08x}"

    def fetch_into(self, fs: Any, path: str, size: int, sink: Sink) -> None:
        """Download ``path`` (``size`` bytes) calling ``sink(offset, data)`` for each range.

        ``sink`` is called from this thread, in offset order; its own errors (a full local
        disk) propagate as they are, the download's are named by the remote path. The first
        failure cancels the ranges not yet started.
        """
        if size <= self.chunk:
            with storage.errors_named(fs, path, "reading"):
                data = self._range(fs, path, 0, size) if size else b""
            sink(0, data)
            return
        pool = self._executor()
        starts = range(0, size, self.chunk)
        futures: list[Future[bytes]] = [
            pool.submit(self._range, fs, path, s, min(size, s + self.chunk)) for s in starts
        ]
        try:
            for start, future in zip(starts, futures, strict=True):
                with storage.errors_named(fs, path, "reading"):
                    data = future.result()
                sink(start, data)
        finally:
            for future in futures:
                future.cancel()

    def fetch(self, fs: Any, path: str, size: int) -> bytearray:
        """The whole of ``path`` (``size`` bytes, from the manifest) in memory."""
        out = bytearray(size)
        view = memoryview(out)

        def put(offset: int, data: bytes) -> None:
            view[offset : offset + len(data)] = data

        self.fetch_into(fs, path, size, put)
        return out

    def fetch_checked(self, fs: Any, path: str, entry: ShardEntry, check: bool) -> bytearray:
        """:meth:`fetch` of the shard ``entry``, its bytes' crc32c (``check``) the manifest's:
        fetched once more where it is not (bytes damaged on the way are no damage at rest, and
        a shard called damaged is one to delete), then CorruptShardError."""
        data = self.fetch(fs, path, entry.bytes)
        for again in (True, False):
            if not check or (crc := f"{crc32c(data):08x}") == entry.crc32c:
                return data
            if again:
                data = self.fetch(fs, path, entry.bytes)
        raise CorruptShardError(
            f"shard {storage.to_url(fs, path)} is damaged: crc32c {crc} (fetched twice), the "
            f"manifest says {entry.crc32c}; {DAMAGED}"
        )

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


_shared: Fetcher | None = None
_shared_pid = 0
_shared_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child's own (one held at the fork stays held)
    os.register_at_fork(after_in_child=lambda: globals().update(_shared_lock=threading.Lock()))


def shared_fetcher() -> Fetcher:
    """The process's fetcher: every loader shares its streams, so the bound is per process.

    A forked child (a torch DataLoader worker) gets its own: threads do not survive fork.
    """
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared, _shared_pid = Fetcher(), os.getpid()
        return _shared
