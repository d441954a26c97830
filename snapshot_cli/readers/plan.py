"""The read plan: which records a rank reads in an epoch, and in which order (pure).

Everything here is a function of (manifest, seed, epoch, rank, world_size, options), so every
rank of a job agrees without talking, and a position in an epoch (a batch index) is enough to
resume exactly.

1. **Blocks.** A block is one record batch of one shard (the unit of decoding). In written
   order they form the snapshot's record sequence.
2. **Epoch order.** With shuffle, the blocks are permuted per (seed, epoch): consecutive blocks
   then come from random shards all over the snapshot. Without, written order.
3. **Rank split.** The epoch's record sequence is cut into ``world_size`` equal contiguous
   parts. Remainder policy: with ``drop_last=False`` each part has ``ceil(N / world_size)``
   records and the last part wraps around to the start of the epoch's sequence (so fewer than
   ``world_size`` records appear twice, as with torch's DistributedSampler); with
   ``drop_last=True`` each part has ``floor(N / world_size)`` records and the remainder (fewer
   than ``world_size`` records, different ones every epoch) is skipped.
   **Worker split.** A rank's part is then cut among its ``workers`` DataLoader workers in
   whole batches, not padded (ranks step in lockstep, a rank's workers do not: torch's
   DataLoader takes from the others when one is done): of the rank's ``B`` batches, worker
   ``w`` reads ``[w B // workers, (w + 1) B // workers)``, so each record of the rank's part
   is read once, only the last worker's last batch may be partial (with ``drop_last`` the
   last worker also holds the dropped rest), and a worker may have none. Everything below is
   planned over the worker's range (with ``workers=1``, the rank's part).
4. **Windows.** A worker's range is cut into windows of ``window_rows`` records (a multiple of
   the batch size, so no batch spans two windows). With shuffle, the records of a window are
   permuted per (seed, epoch, part, window), ``part = rank * workers + worker`` (the rank
   without workers): the bounded shuffle buffer. With
   ``first_window_rows``, an epoch starts with a ramp: a first window of that many records,
   each next one twice the last, until ``window_rows`` (so the first batch waits for a small
   window to be decoded, not a full one; the ramp is part of the plan, so order and resume
   do not depend on where a pass started).
5. **Batches.** Consecutive ``batch_size`` records of the (permuted) range; with
   ``drop_last=True`` a final partial batch is dropped. Every rank has the same number (its
   workers' together).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import compiled
from ..manifest import Manifest


@dataclass(frozen=True)
class Blocks:
    """All record batches of a snapshot in written order, as flat arrays."""

    shard: np.ndarray  # int64, shard index of each block
    batch: np.ndarray  # int64, record batch index within its shard
    rows: np.ndarray  # int64, records in the block

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> Blocks:
        shard: list[int] = []
        batch: list[int] = []
        rows: list[int] = []
        for i, entry in enumerate(manifest.shards):
            sizes = entry.batch_sizes()
            shard.extend([i] * len(sizes))
            batch.extend(range(len(sizes)))
            rows.extend(sizes)
        as_array = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
        return cls(as_array(shard), as_array(batch), as_array(rows))

    @classmethod
    def concat(cls, parts: list[Blocks], shards: list[int]) -> Blocks:
        """The blocks of several snapshots (of ``shards[i]`` shards each) as one table: shard
        numbers count on from one snapshot's to the next's (a mixture's global numbers)."""
        if len(parts) == 1:
            return parts[0]
        shift = np.cumsum([0, *shards[:-1]])
        return cls(
            np.concatenate([p.shard + int(k) for p, k in zip(parts, shift, strict=True)]),
            np.concatenate([p.batch for p in parts]),
            np.concatenate([p.rows for p in parts]),
        )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_rows(self) -> int:
        return int(self.rows.sum())


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of block ``block`` (an index into :class:`Blocks`)."""

    block: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def _rng(*key: int) -> np.random.Generator:
    words = [k & 0xFFFFFFFF for k in key] + [k >> 32 for k in key]
    if min(words) < 0 or max(words) >> 32:  # a key beyond 64 bits: numpy splits it itself
        return np.random.default_rng(words)
    # the same seed as an array of uint32, which numpy takes as it is: 12 us against 22 for
    # the list (a window of 1,024 records costs one)
    return np.random.default_rng(np.array(words, np.uint32))


# numpy's shuffle, compiled with its far items asked for ahead (snapshot_cli/_shuffle.c)
_shuffle: Any = getattr(compiled.load("shuffle"), "shuffle", None)
COMPILED_FROM = 1 << 18  # items from which the compiled shuffle is faster (1.4x at 4M)


def random_permutation(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.permutation(n)``: the same permutation, and ``rng`` left in the same state."""
    if _shuffle is None or n < COMPILED_FROM:
        return rng.permutation(n)
    out = np.arange(n, dtype=np.int64)
    bits = rng.bit_generator
    with bits.lock:
        _shuffle(bits, out)
    return out


@dataclass(frozen=True)
class PlanOptions:
    """What decides the plan. Validated: bad values raise ValueError naming the option."""

    batch_size: int
    shuffle: bool = True
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    window_rows: int = 1 << 16
    first_window_rows: int = 0  # 0: every window is window_rows
    worker: int = 0  # DataLoader worker ``worker`` of ``workers`` reading the rank's part
    workers: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if not isinstance(self.world_size, int) or self.world_size <= 0:
            raise ValueError(f"world_size must be a positive integer, got {self.world_size!r}")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank must be in [0, world_size={self.world_size}), got {self.rank!r}"
            )
        if not isinstance(self.window_rows, int) or self.window_rows <= 0:
            raise ValueError(f"shuffle_buffer must be a positive integer, got {self.window_rows!r}")
        check_seed(self.seed)
        w, n = self.worker, self.workers
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"workers must be a positive integer, got {n!r}")
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < n:
            raise ValueError(f"worker must be in [0, workers={n}), got {w!r}")

    @property
    def part(self) -> int:
        """This reader's index among every rank's workers: it keys the window shuffle (and
        a map's rng), the rank itself without workers."""
        return self.rank * self.workers + self.worker


class EpochPlan:
    """The plan of one epoch for one rank. Cheap to build; windows are computed on demand."""

    def __init__(self, blocks: Blocks, options: PlanOptions, epoch: int) -> None:
        self.blocks, self.options, self.epoch = blocks, options, epoch
        o = options
        n = blocks.num_rows
        if o.shuffle:
            self.order = _rng(o.seed, epoch, 0).permutation(len(blocks))
        else:
            self.order = np.arange(len(blocks), dtype=np.int64)
        ordered_rows = blocks.rows[self.order]
        self._ends = np.cumsum(ordered_rows)  # end position of each ordered block
        self.total = n
        per_rank = n // o.world_size if o.drop_last else -(-n // o.world_size)
        rank_rows = per_rank if n else 0
        b = o.batch_size
        batches = rank_rows // b if o.drop_last else -(-rank_rows // b)
        lo, hi = o.worker * batches // o.workers, (o.worker + 1) * batches // o.workers
        # the last worker's range ends with the rank's part (drop_last's rest included, so
        # one worker plans exactly as the rank does)
        stop = rank_rows if o.worker == o.workers - 1 else hi * b
        self.num_rows = stop - lo * b  # records of this worker's range
        self._start = o.rank * per_rank + lo * b
        self.num_batches = hi - lo
        self.window_rows = w = max(b, o.window_rows // b * b)
        ramp: list[int] = []
        size = max(b, min(w, o.first_window_rows) // b * b) if o.first_window_rows else w
        while size < w and sum(ramp) < self.num_rows:
            ramp.append(size)
            size = min(w, 2 * size)
        self._ramp_starts = np.concatenate([[0], np.cumsum(ramp, dtype=np.int64)]).tolist()
        self._ramp_rows = int(self._ramp_starts[-1])
        rest = max(0, self.num_rows - self._ramp_rows)
        self.num_windows = len(ramp) + -(-rest // w) if self.num_rows else 0

    def _window_start(self, k: int) -> int:
        m = len(self._ramp_starts) - 1
        if k <= m:
            return int(self._ramp_starts[k])
        return self._ramp_rows + (k - m) * self.window_rows

    def window_of(self, position: int) -> int:
        """The window that holds position ``position`` (of the worker's range)."""
        if position < self._ramp_rows:
            return bisect.bisect_right(self._ramp_starts, position) - 1
        m = len(self._ramp_starts) - 1
        return m + (position - self._ramp_rows) // self.window_rows

    def _segments(self, p: int, q: int) -> list[Segment]:
        """Segments covering epoch positions ``[p, q)`` (``0 <= p <= q <= total``)."""
        out: list[Segment] = []
        if p >= q:
            return out
        i = int(np.searchsorted(self._ends, p, side="right"))
        while p < q:
            end = int(self._ends[i])
            begin = end - int(self.blocks.rows[self.order[i]])
            stop = min(q, end)
            out.append(Segment(int(self.order[i]), p - begin, stop - begin))
            p = stop
            i += 1
        return out

    def window_bounds(self, k: int) -> tuple[int, int]:
        """Positions ``[a, b)`` of window ``k`` in the worker's range."""
        return self._window_start(k), min(self._window_start(k + 1), self.num_rows)

    def window(self, k: int) -> list[Segment]:
        """The segments of window ``k``, in sequence order (wrapping past the epoch's end)."""
        a, b = self.window_bounds(k)
        n = self.total
        p = (self._start + a) % n if n else 0  # past the end: wrap (drop_last=False padding)
        q = p + (b - a)
        if q <= n:
            return self._segments(p, q)
        return self._segments(p, n) + self._segments(0, q - n)

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    def load(self, k: int) -> tuple[list[Segment], np.ndarray | None, np.ndarray | None]:
        """What a loader needs to fill window ``k``: its segments, its permutation, and
        each slot's source (None: one source)."""
        return self.window(k), self.permutation(k), None

    def load_slots(self, k: int) -> tuple[list[Segment], np.ndarray | None, None]:
        """Like :meth:`load`, with the permutation given as :meth:`slots`, what a window
        scatters its records by (and what the loader asks for): one random permutation of the
        window to make, not that and its inverse (each a pass of random accesses: 0.1 s for
        2M records, measured). A window works the order out only for columns that need it."""
        return self.window(k), self.slots(k), None

    def slots(self, k: int) -> np.ndarray | None:
        """Where window ``k``'s records go: record ``r`` (in sequence order) is served at slot
        ``slots[r]`` of the window (None: kept in order). A uniform random permutation."""
        if not self.options.shuffle:
            return None
        a, b = self.window_bounds(k)
        if b - a <= 1:  # (the only permutation, without a generator made for it: 12 us)
            return np.zeros(b - a, np.int64)
        o = self.options
        return random_permutation(_rng(o.seed, self.epoch, o.part + 1, k + 1), b - a)

    def permutation(self, k: int) -> np.ndarray | None:
        """How window ``k``'s records are reordered: slot ``s`` holds record
        ``permutation[s]`` (None: kept in order); the inverse of :meth:`slots`."""
        slots = self.slots(k)
        return None if slots is None else inverse_permutation(slots)

    def batch_bounds(self, i: int) -> tuple[int, int, int]:
        """Batch ``i`` → ``(window, start, stop)`` in that window's (permuted) records."""
        b = self.options.batch_size
        a = i * b
        k = self.window_of(a)
        w0 = self._window_start(k)
        return k, a - w0, min(a + b, self.num_rows) - w0

    def positions(self) -> np.ndarray:
        """Every record this rank (its worker) yields, in order, as an index into written
        order.

        For tests and small snapshots: it materialises the whole epoch.
        """
        starts = np.concatenate([[0], np.cumsum(self.blocks.rows)[:-1]])
        out = []
        for k in range(self.num_windows):
            idx = np.concatenate(
                [np.arange(s.start, s.stop) + starts[s.block] for s in self.window(k)]
                or [np.zeros(0, np.int64)]
            )
            perm = self.permutation(k)
            out.append(idx if perm is None else idx[perm])
        flat = np.concatenate(out) if out else np.zeros(0, np.int64)
        return flat[: self.num_batches * self.options.batch_size]


def inverse_permutation(p: np.ndarray) -> np.ndarray:
    """``q`` with ``q[p[i]] == i`` (``p`` a permutation of ``range(len(p))``)."""
    q = np.empty(len(p), np.int64)
    q[p] = np.arange(len(p), dtype=np.int64)
    return q


def check_seed(seed: Any) -> None:
    """``ValueError`` unless ``seed`` is an integer >= 0, saying why None is not one."""
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        return
    why = ""
    if seed is None:  # (HF datasets' shuffle(seed=None), torch's generator=None: a random one)
        why = (
            ": the order is drawn from it, the same on every rank (a seed drawn by each "
            "process would deliver records twice across ranks) and again on resume; for "
            "another order each run, draw one and pass it to every rank and to the resumed run"
        )
    raise ValueError(f"seed must be an integer >= 0, got {seed!r}{why}")
