"""A gathered window: records left where they are, each batch gathered from them in one copy.

The slot window (:mod:`.window`) copies every record to its place in the shuffled order as it
is decoded, and a batch is then a view of that window: the copy writes to a 256 MiB window in
memory, and a fresh process first has to fault its pages in. Here nothing is copied while a
window is placed: its uncompressed record batches stay in the page cache (each shard file is
memory-mapped while the window is served), and the window only notes where each record is,
from where the first epoch's reads found (and checked) each record batch
(:func:`.decode.gather_known`). A first epoch reads slot windows: as fast here, and it maps
no shard pages while a window is served (measured: half the peak RSS). A batch is
then *gathered*: each of its records copied once, straight from where it is into a batch buffer
the loader reuses once the consumer has dropped the batch (:class:`BatchPool`), which is still
in the CPU's cache when the next batch is made. One copy per byte, into memory that is already
there; the copy runs in C without the GIL (``snapshot_cli._gather``), from several threads.

Where a record is takes eight bytes (its segment, its row in it) whatever the columns: a
*segment* is a run of consecutive records of one record batch, and says per column in which
source and at which byte its first record is.

Needs the compiled ``snapshot_cli._gather`` (:data:`AVAILABLE`) and fixed-width columns only;
the loader uses the slot window otherwise, and for compressed snapshots (:func:`suits`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import mmap
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import compiled, storage
from . import memory

if TYPE_CHECKING:
    from .snapshot import Snapshot

# The compiled part (snapshot_cli/_gather.c). Also used by slot windows: scatter(slots,
# [(dest, width, src), ...]) copies a decoded record batch's records to their slots, every
# column in one call (:mod:`.window`), populate(buffer, start, length) maps new pages in
# one call and discard(buffer, start, length, part) gives pages back (:mod:`.slabs`);
# drop(file_map, start, length) takes a shard file map's pages out of RSS (:mod:`.blocks`).
Sources: Any
scatter: Any
populate: Any
discard: Any
drop: Any
place: Any
if (_gather := compiled.load("gather")) is not None:
    Sources, discard, drop, place, populate, scatter = (
        getattr(_gather, n) for n in compiled.NEEDS["gather"]
    )
else:  # not compiled (no C compiler at install): numpy does it, slower
    Sources = scatter = populate = discard = place = None

    def drop(file_map: mmap.mmap, start: int, length: int) -> bool:  # (holds the GIL)
        file_map.madvise(mmap.MADV_DONTNEED, start, length)
        return True


AVAILABLE = Sources is not None
SCATTER_MAX = 64  # columns of one scatter call (_gather_scatter.h's SCATTER_MAX)
# Whether loaders gather (tests and benchmarks switch it off to compare with slot windows).
ENABLED = AVAILABLE
ALIGN = 64  # bytes: batches start on a 64-byte boundary (what XLA and TensorFlow share)


# A shuffled gather copies each record's value of each column by itself: below this many
# bytes a value, a slot window's read and scatter measured faster (2nd epoch, uncompressed,
# gather / slot time: 1.19 at 28 bytes a value, 0.82 at 132, 0.68 at 512; 1.4-2.3 for float32
# columns). Kept in order, runs of records are copied: gathering stays (2.5x on int32).
GATHER_MIN_VALUE_BYTES = 64


def suits(sources: list[Snapshot], fixed_only: bool, value_bytes: float) -> bool:
    """Whether a loader reading ``sources`` (whose selected columns are all fixed-width:
    ``fixed_only``, of ``value_bytes`` a record and column on average) gathers its windows:
    uncompressed snapshots on local disk, whose record batches are then read where they are
    in the page cache (for compressed ones, decoding straight to the slots of a slot window
    measured faster), of values large enough to copy one by one."""
    return (
        ENABLED
        and fixed_only
        and value_bytes >= GATHER_MIN_VALUE_BYTES
        and all(
            s.manifest.compression.get("codec") == "none" and storage.is_local(s.fs)
            for s in sources
        )
    )


class GatherWindow:
    """Records ``[0, rows)`` of one window: every segment's :meth:`source` and base (by
    :func:`.decode.gather_known`), then :meth:`add_all`, :meth:`finish`, then :meth:`take`
    batches of consecutive slots from any threads, then :meth:`close`.

    ``forms`` gives each column's dtype and record shape, in the order batches list them;
    ``slots`` maps record ``r`` (in read order) to its slot (None: kept in order).
    """

    def __init__(
        self,
        forms: dict[str, tuple[np.dtype, tuple[int, ...]]],
        rows: int,
        segments: int,
        slots: np.ndarray | None,
        batches: BatchPool,
    ) -> None:
        self.rows, self.forms, self.batches = rows, forms, batches
        self.columns = list(forms)
        self.widths = {c: d.itemsize * math.prod(s) for c, (d, s) in forms.items()}
        self.slot_of = slots
        # per slot: its record's segment, and row within the segment
        self.seg = np.empty(rows, np.int32)
        self.row = np.empty(rows, np.int32)
        # per segment and column: the source, and the byte of the segment's first record
        self.seg_source = {c: np.zeros(segments, np.int64) for c in forms}
        self.seg_base = {c: np.zeros(segments, np.int64) for c in forms}
        self._sources: list[Any] = []
        self._keyed: dict[Any, int] = {}
        self._maps: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self._gather: Any = None

    def source(self, key: Any, make: Callable[[], Any]) -> tuple[int, Any]:
        """The source known as ``key`` in this window, made by ``make()`` the first time (a
        memory map of a shard file: one per window, unmapped by :meth:`close`)."""
        with self._lock:
            known = self._keyed.get(key)
            if known is not None:
                return known, self._sources[known]
        made = make()
        with self._lock:
            known = self._keyed.get(key)
            if known is not None:  # another thread made it meanwhile
                _close(made)
                return known, self._sources[known]
            self._keyed[key] = len(self._sources)
            self._sources.append(made)
            if isinstance(made, mmap.mmap):
                self._maps.append(made)
            return self._keyed[key], made

    def add_all(self, lengths: np.ndarray) -> None:
        """Every segment, in order (``lengths[k]`` records each), once its sources and
        bases are set: each record's segment and row, in one go."""
        if place is not None:  # one pass, no temporaries (see _gather.c)
            place(self.seg, self.row, self.slot_of, np.ascontiguousarray(lengths, np.int64))
            return
        seg = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
        first = np.repeat(np.cumsum(lengths) - lengths, lengths)
        row = (np.arange(len(seg), dtype=np.int64) - first).astype(np.int32)
        if self.slot_of is None:
            self.seg[: len(seg)], self.row[: len(seg)] = seg, row
        else:
            self.seg[self.slot_of[: len(seg)]] = seg
            self.row[self.slot_of[: len(seg)]] = row

    def finish(self) -> None:
        """Every record is known: hold the sources for the gathers."""
        assert Sources is not None
        self._gather = Sources(self._sources)

    def take(self, a: int, b: int) -> dict[str, np.ndarray]:
        """The records of slots ``[a, b)`` (a batch), each column gathered into a buffer of
        its own (64-byte aligned, contiguous, writable, reused once it is dropped)."""
        return self.take_group([(a, b)])[0]

    def take_group(self, bounds: list[tuple[int, int]]) -> list[dict[str, np.ndarray]]:
        """Consecutive batches (slots ``[a, b)`` each, one after the other, all but the last
        of the same size) gathered at once: one call per column, each batch of a column a
        64-byte aligned part of one buffer (which is reused once every batch is dropped)."""
        a0, size = bounds[0][0], bounds[0][1] - bounds[0][0]
        end = bounds[-1][1]
        columns = []
        for c in self.forms:
            width = self.widths[c]
            stride = aligned(size * width)
            buf = self.batches.get(stride * len(bounds))
            columns.append((buf, width, self.seg_source[c], self.seg_base[c], stride))
        # every column in one call: the GIL is let go (and taken back) once
        self._gather.gather_columns(columns, self.seg[a0:end], self.row[a0:end], size)
        out: list[dict[str, np.ndarray]] = [{} for _ in bounds]
        for (c, (dtype, shape)), (buf, width, _, _, stride) in zip(
            self.forms.items(), columns, strict=True
        ):
            for j, (a, b) in enumerate(bounds):
                at = j * stride
                out[j][c] = buf[at : at + (b - a) * width].view(dtype).reshape((b - a, *shape))
        return out

    def take_parts(
        self, a: int, b: int, parts: int
    ) -> tuple[dict[str, np.ndarray], list[Callable[[], None]]]:
        """The batch of slots ``[a, b)`` (its buffers as :meth:`take` makes them) and the
        ``parts`` gathers that fill it, each with a run of its records, to be run in any
        threads at once: the batch is whole once all of them have run. For batches of many
        MiB (large records), which one thread would gather alone while the other waits."""
        size = b - a
        buffers = {c: self.batches.get(aligned(size * self.widths[c])) for c in self.forms}
        cuts = [a + size * k // parts for k in range(parts + 1)]

        def part(p: int, q: int) -> None:
            columns = []
            for c, w in self.widths.items():
                out = buffers[c][(p - a) * w : (q - a) * w]
                columns.append((out, w, self.seg_source[c], self.seg_base[c], (q - p) * w))
            self._gather.gather_columns(columns, self.seg[p:q], self.row[p:q], q - p)

        jobs: list[Callable[[], None]] = [
            functools.partial(part, p, q) for p, q in itertools.pairwise(cuts) if q > p
        ]
        batch: dict[str, np.ndarray] = {
            c: buffers[c][: size * self.widths[c]].view(dtype).reshape((size, *shape))
            for c, (dtype, shape) in self.forms.items()
        }
        return batch, jobs

    def close(self) -> None:
        """Let the sources go (after any gather still running) and unmap the shard files."""
        if self._gather is not None:
            self._gather.release()
            self._gather = None
        for m in self._maps:
            _close(m)
        self._maps, self._sources, self._keyed = [], [], {}


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ALIGN: a batch's buffer (or a column's copy in
    a slot window's batch), so that what follows it starts aligned too."""
    return -(-nbytes // ALIGN) * ALIGN


def _close(source: Any) -> None:
    if isinstance(source, mmap.mmap):
        with contextlib.suppress(BufferError):  # a gather still holds it: unmapped once done
            source.close()


class BatchPool:
    """Batch buffers (64-byte aligned), each reused once no batch refers to it any more.

    A batch the consumer drops is made again into the same memory, which is then still in the
    CPU's cache and needs no page faults; a batch the consumer keeps keeps its own buffer
    (only that). At most ``keep`` buffers of each size are kept for reuse.
    """

    def __init__(self, keep: int = 48) -> None:
        self.keep = keep
        # per size: [owner, its aligned bytes, the owner's reference count when unused]
        self._kept: dict[int, list[tuple[np.ndarray, np.ndarray, int]]] = {}
        self._next: dict[int, int] = {}  # where the next search starts (round robin)
        self._lock = threading.Lock()
        self.allocated = 0  # buffers made (a figure for tests)

    def get(self, nbytes: int) -> np.ndarray:
        """A buffer of ``nbytes`` bytes (uint8), 64-byte aligned."""
        with self._lock:
            kept = self._kept.setdefault(nbytes, [])
            n = len(kept)
            first = self._next.get(nbytes, 0)
            for j in range(n):
                # every view of a buffer (batches, and their own views) refers to its owner
                owner, aligned, unused = kept[(first + j) % n]
                if sys.getrefcount(owner) == unused:
                    self._next[nbytes] = (first + j + 1) % n
                    return aligned[:]
            fix = "lower batch_size, read fewer columns (columns=[...]), or free memory"
            memory.check(nbytes, "a batch's column", fix)
            try:
                owner = np.empty(nbytes + ALIGN, np.uint8)
            except MemoryError as err:
                raise memory.failed(err, "a batch's column", nbytes, fix) from err
            start = -owner.__array_interface__["data"][0] % ALIGN
            aligned = owner[start : start + nbytes]
            self.allocated += 1
            if n < self.keep:
                # as the search counts: the aligned view, the loop's name (here this one),
                # getrefcount's argument, and the list's tuple
                unused = sys.getrefcount(owner) + 1
                kept.append((owner, aligned, unused))
            return aligned[:]
