"""Reading a window's record batches ahead from disk, when the snapshot is not in the page cache.

From the page cache, a read thread's work is all CPU. From disk (the first epoch of a
snapshot written on another machine, or every epoch of one larger than memory) each thread
also waits for the pages of every record batch it decodes, as its page faults and reads
bring them in, one at a time: reading and decoding take turns instead of overlapping. So
while the process reads from its block devices, the record batches of each window are asked
for as soon as the window is planned (``posix_fadvise(WILLNEED)``, in order, from a thread
of their own): the kernel reads them while the window before is decoded. A shuffled first
epoch of 1.5 GB from this machine's disk took 28 % (lz4), 19 % (none) and 9 % (zstd) less
time (``benchmarks/cold.py``).

Asking for pages that are cached already costs ~0.1 CPU-s per GB (the kernel looks up
every page), about 10 % of a warm epoch, so windows are only read ahead while the
process's reads from block devices (``ru_inblock``, which counts the reads read ahead too)
reach a sixteenth of the bytes of the window it last read: a snapshot in the page cache,
on tmpfs, or on remote storage (fetched by other means) is never read ahead.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..errors import SnapError
from .blocks import BlockFile

if TYPE_CHECKING:
    from .plan import Blocks, Segment
    from .shard import ShardReaders
    from .sources import MultiReaders
    from .stats import Stats

ENABLED = True  # benchmarks/cold.py times epochs with it off, alternating
COLD_FRACTION = 16  # a window with 1/16 of its bytes read from a device or more: not cached
_ADVISE = getattr(os, "POSIX_FADV_WILLNEED", None)  # (not on macOS: never read ahead there)


def device_bytes_read() -> int:
    """Bytes this process has had read from block devices so far (every thread of it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_inblock * 512


def coalesce(spans: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``(file, offset, length)`` spans, in the order given, with each span that starts where
    the one before it in the same file ends joined to it (consecutive record batches of a
    shard, as an unshuffled window reads them: one request, which the disk reads faster)."""
    out: list[tuple[int, int, int]] = []
    for file, offset, length in spans:
        if out and out[-1][0] == file and out[-1][1] + out[-1][2] == offset:
            out[-1] = (file, out[-1][1], out[-1][2] + length)
        else:
            out.append((file, offset, length))
    return out


class Readahead:
    """A pass's read-ahead: :meth:`turn` after each window is read (is the snapshot coming
    from disk?), :meth:`advise` with each window's segments as soon as they are known."""

    def __init__(
        self,
        readers: ShardReaders | MultiReaders,
        blocks: Blocks,
        stop: threading.Event,
        stats: Stats,
        counter: Callable[[], int] | None = None,  # default: device_bytes_read
    ) -> None:
        self.readers, self.blocks, self.stop = readers, blocks, stop
        self.counter = counter or device_bytes_read
        self.stats = stats  # counts the windows read ahead
        parts = getattr(readers, "parts", [readers])  # (a mixture's snapshots)
        self.usable = _ADVISE is not None and any(part.local for part in parts)
        self.cold = False
        self._last = self.counter()
        self._advised: deque[object] = deque(maxlen=4)  # keys of the windows asked for
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def turn(self, nbytes: int) -> None:
        """A window of ``nbytes`` has been read: whether the next ones come from a device."""
        now = self.counter()
        read, self._last = now - self._last, now
        self.cold = ENABLED and self.usable and nbytes > 0 and read * COLD_FRACTION >= nbytes

    def advise(self, key: object, segments: list[Segment]) -> None:
        """Ask for the record batches of window ``key`` (once), if reads come from a device."""
        with self._lock:
            if not self.cold or key in self._advised or self.stop.is_set():
                return
            self._advised.append(key)
            self.stats.windows_read_ahead += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="snap-readahead")
            blocks = [seg.block for seg in segments]
            self._pool.submit(self._ask, self.blocks.shard[blocks], self.blocks.batch[blocks])

    def _ask(self, shards: Iterable[int], batches: Iterable[int]) -> None:
        """Advise shard by shard, holding one file at a time: holding every file of a window
        until all were asked for ran a snapshot of 2,000 small shards out of descriptors
        (the open-files limit) on a cold page cache only."""
        by_shard: dict[int, list[int]] = {}
        for shard, batch in zip(shards, batches, strict=True):
            by_shard.setdefault(int(shard), []).append(int(batch))
        for shard, wanted in sorted(by_shard.items()):
            part, i = self.readers.route(shard)
            if self.stop.is_set():
                return
            if not part.local or part.ranged:
                continue
            try:
                reader = part.reader(i)
            except (OSError, SnapError):
                continue  # the read thread that reads it meets it and says so
            if not isinstance(reader, BlockFile):
                continue
            fd = reader.fd
            spans = [(fd, reader.blocks[b].offset, reader.blocks[b].length) for b in wanted]
            for _, offset, length in coalesce(spans):
                with contextlib.suppress(OSError):  # advice only: a read will say what failed
                    os.posix_fadvise(fd, offset, length, _ADVISE)  # type: ignore[arg-type]
            del reader  # (the readers' cache alone decides what stays open)

    def close(self) -> None:
        with self._lock:
            pool, self._pool, self.cold = self._pool, None, False
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
