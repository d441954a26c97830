"""The global order: one canonical order of global batches, dealt to any number of ranks (pure).

With ``global_batch_size=G`` an epoch's order is defined once, for the whole job, and each
rank takes its slice of every global batch, so the set of records in global batch ``t`` is
the same whatever the number of ranks, and a position (epoch, step) saved on one cluster
resumes on another. It also serves mixtures of several snapshots (:mod:`.mix`).

1. **Sources and streams.** Each source (a snapshot) has a *stream*: passes over its record
   batches (blocks), pass ``j`` of epoch ``e`` a permutation of them for (seed, e, source,
   j), written order without shuffle. An epoch takes the first ``n_i`` records of source
   ``i``'s stream: fewer than it has is a random subset (another one every epoch), more
   repeats it (upsampling).
2. **Interleave.** The epoch's ``E = sum(n_i)`` positions are dealt to the sources by a
   low-discrepancy sequence: position ``q`` belongs to source ``i`` when ``A q mod 2**48``
   falls in source ``i``'s interval, the intervals chosen so that exactly ``n_i`` of the
   epoch's positions fall in each. Every stretch of positions holds the sources in their
   proportions (within a few records), and how many positions of a source precede ``q`` is
   counted in O(log q) arithmetic steps (:func:`floor_sum`), never by walking the epoch.
3. **Steps.** ``T = ceil(E / G)`` global batches (steps); ``drop_last=True``: ``floor``.
   The ``F = T G - E`` missing records are the epoch's first ``F`` positions again (fewer
   than ``G`` records are seen twice, as with torch's DistributedSampler), all in the last
   global batch: in the last window, atom ``a < F`` takes ``S - 1`` consecutive positions
   and, at the last step, position ``a``.
4. **Windows and atoms.** Steps are grouped into windows: a ramp of small ones first (each
   twice the last), then ``window_rows // G`` steps each. Window ``k`` holds the positions
   ``[s_k G, s_{k+1} G)``, cut into ``G`` *atoms* of ``S_k = s_{k+1} - s_k`` consecutive
   positions. Each atom's records are permuted for (seed, epoch, window, atom): at the
   window's step ``s`` atom ``a`` gives its ``pi_a[s]``-th record, and global batch ``t``
   is one record of every atom. A batch thus samples ``G`` places spread over the whole
   window, each a different stretch of the (permuted) stream. Neighbouring atoms are
   neighbouring stretches, so a batch in atom order would hand a slice of it (a micro-batch,
   a device's share) a few places only: each rank's slice of a step is in an order drawn for
   (seed, epoch, step, slice) (in atom order without shuffle).
5. **Ranks.** ``W`` ranks (``W`` divides ``G``): rank ``r`` owns atoms
   ``[r G/W, (r+1) G/W)``, consecutive positions of each window, so it decodes only its
   share of the data; its batch at step ``t`` is its slice of global batch ``t``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .interleave import count_below, interleave_bounds, keys
from .plan import Blocks, Segment, _rng, check_seed, inverse_permutation


def _windows(steps_total: int, g: int, window_rows: int, first_rows: int) -> tuple[int, list[int]]:
    """The steps of a full window, and those of the ramp's windows (each twice the last) of
    an epoch of ``steps_total`` global batches of ``g`` records."""
    steps, ramp = max(1, window_rows // g), list[int]()
    size = max(1, min(window_rows, first_rows) // g) if first_rows else steps
    while size < steps and sum(ramp) < steps_total:
        ramp.append(size)
        size = min(steps, 2 * size)
    return steps, ramp


def same_windows(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether a global order's config ``theirs`` (a state's) cuts the epoch of ``mine`` (a
    loader's) into the same windows as ``mine`` does: its ``window_rows`` then makes no
    difference to the order (``shuffle_buffer`` in bytes over other columns, both windows
    holding the whole epoch)."""
    total, g = sum(mine["records_per_epoch"]), mine["global_batch_size"]
    steps = total // g if mine["drop_last"] else -(-total // g)
    cuts = []
    for config in (mine, theirs):
        w, first = config.get("window_rows", -1), config.get("first_window_rows", -1)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (w, first)):
            return False
        window, ramp = _windows(steps, g, w, first)
        starts = list(itertools.accumulate(ramp, initial=0))
        starts += range(starts[-1] + window, steps, window)
        cuts.append([min(a, steps) for a in starts if a < steps])
    return cuts[0] == cuts[1]


def _divisors(n: int, shown: int = 12) -> str:
    """``n``'s divisors, the first and the largest where there are more than ``shown``
    (``[1, 2, 4, 5, 10, 20, 25, 50] ...`` hid that 100 was the one left)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    every = sorted({*small, *(n // d for d in small)})
    if len(every) <= shown:
        return ", ".join(map(str, every))
    return f"{', '.join(map(str, every[: shown - 2]))}, ..., {every[-1]}"


@dataclass(frozen=True)
class GlobalOptions:
    """What decides the global order. Validated: bad values raise ValueError naming them."""

    global_batch_size: int
    counts: tuple[int, ...]  # records per epoch from each source (n_i)
    shuffle: bool = True
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    window_rows: int = 1 << 16
    first_window_rows: int = 0  # 0: no ramp

    def __post_init__(self) -> None:
        g, w = self.global_batch_size, self.world_size
        if isinstance(g, bool) or not isinstance(g, int) or g <= 0:
            raise ValueError(f"global_batch_size must be a positive integer, got {g!r}")
        if isinstance(w, bool) or not isinstance(w, int) or w <= 0:
            raise ValueError(f"world_size must be a positive integer, got {w!r}")
        if g % w:
            raise ValueError(
                f"global_batch_size={g} is not divisible by world_size={w}: each rank takes "
                f"an equal slice of every global batch; use a world size among "
                f"{_divisors(g)}, or another global_batch_size"
            )
        if not isinstance(self.rank, int) or not 0 <= self.rank < w:
            raise ValueError(f"rank must be in [0, world_size={w}), got {self.rank!r}")
        check_seed(self.seed)
        if not isinstance(self.window_rows, int) or self.window_rows <= 0:
            raise ValueError(f"shuffle_buffer must be a positive integer, got {self.window_rows!r}")
        if any(c < 0 for c in self.counts) or sum(self.counts) <= 0:
            raise ValueError(f"records per epoch must be >= 0 and not all 0, got {self.counts}")

    @property
    def batch_size(self) -> int:
        """Records per rank per step."""
        return self.global_batch_size // self.world_size


class Stream:
    """One source's records for one epoch: passes over its blocks (see the module docstring)."""

    def __init__(self, blocks: Blocks, first_block: int, source: int, options: GlobalOptions,
                 epoch: int) -> None:  # fmt: skip
        self.blocks, self.first_block, self.source = blocks, first_block, source
        self.options, self.epoch = options, epoch
        self.size = blocks.num_rows
        self._passes: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _pass(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Pass ``j``: the order of its blocks and the end position of each."""
        if j not in self._passes:
            o = self.options
            n = len(self.blocks)
            if o.shuffle and n > 1:  # (one block: [0]; a generator costs ~15 us a pass)
                order = _rng(o.seed, self.epoch, self.source + 1, j + 1).permutation(n)
            else:
                order = np.arange(n, dtype=np.int64)
            self._passes = {k: v for k, v in self._passes.items() if k >= j - 1}
            self._passes[j] = (order, np.cumsum(self.blocks.rows[order]))
        return self._passes[j]

    def segments(self, start: int, stop: int) -> list[Segment]:
        """The stream's records ``[start, stop)`` as segments of (global) blocks."""
        out: list[Segment] = []
        while start < stop:
            j, p = divmod(start, self.size)
            q = min(self.size, p + stop - start)
            order, ends = self._pass(j)
            i = int(np.searchsorted(ends, p, side="right"))
            while p < q:
                end = int(ends[i])
                block = int(order[i])
                begin = end - int(self.blocks.rows[block])
                hi = min(q, end)
                out.append(Segment(self.first_block + block, p - begin, hi - begin))
                p = hi
                i += 1
            start = j * self.size + q
        return out


class GlobalPlan:
    """One rank's view of the global order of one epoch, in the interface of
    :class:`~.plan.EpochPlan`: rank-local positions, windows, segments and permutations."""

    def __init__(self, sources: list[Blocks], options: GlobalOptions, epoch: int,
                 bounds: list[int] | None = None) -> None:  # fmt: skip
        if len(sources) != len(options.counts):
            raise ValueError(f"{len(sources)} sources but {len(options.counts)} counts")
        self.options, self.epoch = options, epoch
        firsts = np.concatenate([[0], np.cumsum([len(b) for b in sources])]).tolist()
        self.streams = [Stream(b, int(firsts[i]), i, options, epoch) for i, b in enumerate(sources)]
        for s, c in zip(self.streams, options.counts, strict=True):
            if c and not s.size:
                raise ValueError(f"source {s.source} has no records but {c} are asked of it")
        self.bounds = interleave_bounds(list(options.counts)) if bounds is None else bounds
        self._cuts = np.asarray(self.bounds[1:-1], dtype=np.uint64)
        o = options
        g, self.total = o.global_batch_size, sum(o.counts)
        self.num_batches = self.total // g if o.drop_last else -(-self.total // g)
        self.batch_size = o.batch_size
        self.num_rows = self.num_batches * self.batch_size  # rank-local positions
        steps, ramp = _windows(self.num_batches, g, o.window_rows, o.first_window_rows)
        self.window_steps = steps
        self.window_rows = steps * self.batch_size
        self._ramp_starts = np.concatenate([[0], np.cumsum(ramp, dtype=np.int64)]).tolist()
        ramp_steps = int(self._ramp_starts[-1])
        rest = max(0, self.num_batches - ramp_steps)
        self.num_windows = len(ramp) + -(-rest // steps) if self.num_batches else 0
        self._ramp_steps = ramp_steps

    # --- windows in steps -------------------------------------------------------------

    def _step_start(self, k: int) -> int:
        m = len(self._ramp_starts) - 1
        if k <= m:
            return int(self._ramp_starts[k])
        return self._ramp_steps + (k - m) * self.window_steps

    def window_steps_of(self, k: int) -> tuple[int, int]:
        """Steps ``[s_k, s_{k+1})`` of window ``k``."""
        return self._step_start(k), min(self._step_start(k + 1), self.num_batches)

    def window_of(self, position: int) -> int:
        """The window that holds rank-local position ``position``."""
        step = position // self.batch_size
        if step < self._ramp_steps:
            return bisect.bisect_right(self._ramp_starts, step) - 1
        return len(self._ramp_starts) - 1 + (step - self._ramp_steps) // self.window_steps

    def window_bounds(self, k: int) -> tuple[int, int]:
        a, b = self.window_steps_of(k)
        return a * self.batch_size, b * self.batch_size

    def batch_bounds(self, i: int) -> tuple[int, int, int]:
        """Batch (step) ``i`` → ``(window, start, stop)`` in that window's slots."""
        k = self.window_of(i * self.batch_size)
        s0 = self._step_start(k)
        return k, (i - s0) * self.batch_size, (i - s0 + 1) * self.batch_size

    # --- what a rank reads --------------------------------------------------------------

    def count_before(self, source: int, q: int) -> int:
        """Positions of ``source`` in ``[0, q)`` of the epoch (``0 <= q <= total``)."""
        lo, hi = self.bounds[source], self.bounds[source + 1]
        return count_below(hi, q) - count_below(lo, q)

    def _fill(self, k: int) -> int:
        """Positions of window ``k`` past the epoch's end: the last global batch's fill-up
        (fewer than ``global_batch_size``; only in the last window, without ``drop_last``)."""
        return max(0, self.window_steps_of(k)[1] * self.options.global_batch_size - self.total)

    def _atom_starts(self, k: int, atoms: np.ndarray) -> np.ndarray:
        """Where each of ``atoms`` (window ``k``'s, by index) starts in the window's
        positions: ``s`` consecutive positions an atom, but ``s - 1`` for the first ``fill``
        atoms, whose last step takes a record of the fill-up instead (so it is all in the
        last global batch, and no batch holds a record twice)."""
        a, b = self.window_steps_of(k)
        return atoms * (b - a) - np.minimum(atoms, self._fill(k))

    def _ranges(self, k: int) -> list[tuple[int, int]]:
        """This rank's positions in window ``k`` as ``(start, length)`` runs: its atoms'
        consecutive positions, then its part of the fill-up (positions from the epoch's
        start, one per fill atom it has)."""
        a, _ = self.window_steps_of(k)
        r, per = self.options.rank, self.batch_size
        lo, hi = self._atom_starts(k, np.array([r * per, (r + 1) * per])).tolist()
        fill = min((r + 1) * per, self._fill(k)) - r * per
        first = a * self.options.global_batch_size
        return [(first + lo, hi - lo)] + ([(r * per, fill)] if fill > 0 else [])

    def layout(self, k: int) -> tuple[list[Segment], np.ndarray, np.ndarray]:
        """Window ``k`` for this rank: its segments (the records of the rank's positions,
        source by source within each stretch), each position's record index in that
        listing, and each record's source."""
        ranges = self._ranges(k)
        length = sum(n for _, n in ranges)
        segments: list[Segment] = []
        single = len(self.streams) == 1
        record = np.arange(length, dtype=np.int64) if single else np.empty(length, np.int64)
        source_of = np.zeros(length, np.int16)
        done = 0
        for start, size in ranges:
            end = done + size
            while done < end:  # (positions past the epoch's end wrap to its start)
                q = (start + done - (end - size)) % self.total
                n = min(end - done, self.total - q)
                if not single:
                    label = np.searchsorted(self._cuts, keys(q, q + n), side="right")
                    label = label.astype(np.int16)
                    by_source = np.argsort(label, kind="stable")  # a radix sort: O(n)
                    record[done + by_source] = np.arange(done, done + n)
                    source_of[done : done + n] = label[by_source]
                for i, stream in enumerate(self.streams):
                    lo, hi = self.count_before(i, q), self.count_before(i, q + n)
                    segments.extend(stream.segments(lo, hi))
                done += n
        return segments, record, source_of

    def permutation(self, k: int, record: np.ndarray | None = None) -> np.ndarray:
        """Window ``k``'s slots: slot ``s*K + j`` (step ``s`` of the window, ``j``-th atom
        of this rank) holds record ``order[s*K + j]`` of :meth:`layout`'s listing."""
        if record is None:
            record = self.layout(k)[1]
        a, b = self.window_steps_of(k)
        s, per = b - a, self.batch_size
        first_atom = self.options.rank * per
        o = self.options
        if o.shuffle:
            pi = atom_permutations(o.seed, self.epoch, k, first_atom, per, s)
        else:
            pi = np.broadcast_to(np.arange(s, dtype=np.int64), (per, s))
        atoms = np.arange(first_atom, first_atom + per, dtype=np.int64)
        starts = self._atom_starts(k, atoms)
        where = (starts - starts[0])[:, None] + pi  # rank positions
        nf = int(np.count_nonzero(atoms < self._fill(k)))  # (the rank's first atoms)
        if nf:  # a fill atom: its s - 1 records in steps before the last, in pi's order
            rows = pi[:nf]
            kept = rows[rows != s - 1].reshape(nf, s - 1)
            where[:nf, : s - 1] = (starts[:nf] - starts[0])[:, None] + kept
            real = int(self._atom_starts(k, atoms[-1:] + 1)[0] - starts[0])
            where[:nf, s - 1] = real + np.arange(nf)  # its fill-up record, in the last step
        order = record[where.T.reshape(-1)]  # step by step, its slice's atoms in order
        if o.shuffle and per > 1:  # neighbouring atoms are neighbouring stretches: permute
            within = atom_permutations(o.seed, self.epoch, k, a, s, per, first_atom + 1, per)
            order = np.take_along_axis(order.reshape(s, per), within, 1)
        return order.reshape(-1)

    def window(self, k: int) -> list[Segment]:
        return self.layout(k)[0]

    def load_slots(self, k: int) -> tuple[list[Segment], np.ndarray, np.ndarray | None]:
        """Like :meth:`load`, with the permutation given as each record's slot (what a window
        scatters its records by), as :meth:`.plan.EpochPlan.load_slots`."""
        segments, order, sources = self.load(k)
        return segments, inverse_permutation(order), sources

    def load(self, k: int) -> tuple[list[Segment], np.ndarray, np.ndarray | None]:
        """What a loader needs to fill window ``k``: its segments, its permutation (slot →
        record), and each slot's source (None: one source)."""
        segments, record, source_of = self.layout(k)
        order = self.permutation(k, record)
        return segments, order, source_of[order] if len(self.streams) > 1 else None


LONG_ATOM = 2048  # steps from which an atom is permuted by a generator of its own


def atom_permutations(
    seed: int, epoch: int, k: int, first: int, count: int, s: int, *salt: int
) -> np.ndarray:
    """The permutations of atoms ``[first, first + count)`` of window ``k`` (``count`` rows of
    ``s``): each a function of (seed, epoch, k, atom) only, whichever rank computes it. Short
    atoms sort counter-based random keys (splitmix64 of the atom and step, all rows at once:
    a generator per atom would cost more than the permutation); long ones a generator each.
    With ``salt``: other permutations (rows: a window's steps, each of a rank's slice)."""
    if s >= LONG_ATOM:
        return np.stack([_rng(seed, epoch, k + 1, first + j + 1, *salt).permutation(s)
                         for j in range(count)])  # fmt: skip
    words = [seed & 0xFFFFFFFF, seed >> 32, epoch & 0xFFFFFFFF, epoch >> 32, k, *salt]
    base = np.random.SeedSequence(words).generate_state(1, np.uint64)[0]
    atoms = np.arange(first, first + count, dtype=np.uint64)[:, None] << np.uint64(32)
    z = (atoms + np.arange(s, dtype=np.uint64)) + base
    with np.errstate(over="ignore"):  # the mixing wraps modulo 2**64 by design
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    # splitmix64 is a bijection: a row's keys are distinct, every sort orders them alike;
    # heapsort is the fastest here (65,536 x 763: 1.2 s; stable 3.5 s, quicksort 1.7 s)
    return np.argsort(z, axis=1, kind="heapsort")


def apportion(total: int, weights: list[float], caps: list[int] | None = None) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders; ties to the first),
    never above ``caps`` where a cap allows. Exact arithmetic: floats' rounding moved shares
    (and their sum overflowed for weights near 1e308)."""
    given = [Fraction(w) for w in weights]
    s = sum(given)
    exact = [total * w / s for w in given]
    out = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - out[i]), i))
    left = total - sum(out)
    for i in order:
        if left <= 0:
            break
        if weights[i] > 0 and (caps is None or out[i] < caps[i]):
            out[i] += 1
            left -= 1
    for i in order:  # only when the caps could not take it all
        if left <= 0:
            break
        if weights[i] > 0:
            out[i] += 1
            left -= 1
    return out
