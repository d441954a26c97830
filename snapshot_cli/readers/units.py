"""Small windows read as one: a plan whose windows are runs of another plan's.

Each window costs the loader a fixed amount beyond its records, whatever its size: its plan,
a slab, the read threads started and waited for, its shard pages let go, its batches handed
over; about 0.3-0.7 ms. A shuffle buffer of 256 MiB makes that nothing, but one of 1,024
records (what ``tf.data``'s ``shuffle(1000)`` teaches) made 4M records of 48 bytes a window
each 48 KiB, and they replayed at 1.44 M records/s, 0.16 of decode + one copy (6.44 in
units; ``python benchmarks/small_records.py --codecs lz4 --shuffle-buffer 1024``).

:func:`grouped` reads consecutive windows of a plan smaller than :data:`UNIT_BYTES` together,
as one larger window (a *unit*) that holds each of them, in order, shuffled as the plan
shuffles it: every batch is the same, record for record, in the same order, so the order
depends on ``shuffle_buffer`` as before and on nothing else (resume, every rank's part). Only
the memory grows, to two units of at most :data:`UNIT_BYTES` (the size of the first window
of a default epoch), and each unit is read with all the read threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import memory

if TYPE_CHECKING:
    from typing import TypeAlias

    from .elastic import GlobalPlan
    from .plan import EpochPlan, Segment

    Plan: TypeAlias = EpochPlan | GlobalPlan

# A unit holds at most this many bytes of records (the first window of an epoch's ramp),
# this many records (each costs a slot in the window's permutation) and this many windows
# (each planned in Python, 30-40 us: 2**20 windows of one record, shuffle_buffer=1, made the
# first batch wait 43 s over 2M records; 4,096 are a fraction of a second, and the unit's own
# fixed cost is still spread over thousands of windows).
UNIT_BYTES, UNIT_ROWS, UNIT_WINDOWS = 32 << 20, 1 << 20, 4096


def grouped(plan: Plan, bytes_per_row: int) -> Plan | Units:
    """``plan`` itself where its windows are large enough, else a :class:`Units` of it (of at
    most a sixteenth of the memory this process may use: a window that fits is never refused
    for the unit it is read in)."""
    rows, most = plan.window_rows, min(UNIT_BYTES, memory.limit() // 16)
    per_unit = min(most // max(1, rows * bytes_per_row), UNIT_ROWS // max(1, rows), UNIT_WINDOWS)
    return Units(plan, per_unit) if per_unit > 1 and plan.num_windows > 1 else plan


class Units:
    """The interface of :class:`~.plan.EpochPlan` that a loader's pass uses, over units of
    ``per_unit`` consecutive full windows of ``plan`` (a window of the ramp, smaller than the
    rest, is a unit of its own). Unit ``u``'s positions are those of its windows."""

    def __init__(self, plan: Plan, per_unit: int) -> None:
        self.plan, self.per_unit = plan, per_unit
        self.epoch, self.batch_size = plan.epoch, plan.batch_size
        self.num_batches, self.num_rows = plan.num_batches, plan.num_rows
        self.window_rows = plan.window_rows * per_unit
        sizes = (plan.window_bounds(k) for k in range(plan.num_windows))
        # the ramp's windows (smaller than the rest, the first ones) are units of their own
        self.ramp = next((k for k, (a, b) in enumerate(sizes) if b - a >= plan.window_rows),
                         plan.num_windows)  # fmt: skip
        rest = max(0, plan.num_windows - self.ramp)
        self.num_windows = min(plan.num_windows, self.ramp) + -(-rest // per_unit)
        self._shift = (-1, 0, 0)  # the last window's (window, unit, start in its unit)

    def windows(self, u: int) -> range:
        """The plan's windows in unit ``u``."""
        if u < self.ramp:
            return range(u, u + 1)
        first = self.ramp + (u - self.ramp) * self.per_unit
        return range(first, min(self.plan.num_windows, first + self.per_unit))

    def unit_of(self, k: int) -> int:
        """The unit that holds the plan's window ``k``."""
        return k if k < self.ramp else self.ramp + (k - self.ramp) // self.per_unit

    def window_of(self, position: int) -> int:
        return self.unit_of(self.plan.window_of(position))

    def window_bounds(self, u: int) -> tuple[int, int]:
        ks = self.windows(u)
        return self.plan.window_bounds(ks[0])[0], self.plan.window_bounds(ks[-1])[1]

    def batch_bounds(self, i: int) -> tuple[int, int, int]:
        """Batch ``i`` → ``(unit, start, stop)`` in that unit's records."""
        k, a, b = self.plan.batch_bounds(i)
        known = self._shift
        if known[0] != k:  # the batches of a window come one after the other
            u = self.unit_of(k)
            known = self._shift = (k, u, self.plan.window_bounds(k)[0] - self.window_bounds(u)[0])
        return known[1], a + known[2], b + known[2]

    def load_slots(self, u: int) -> tuple[list[Segment], np.ndarray | None, np.ndarray | None]:
        """Unit ``u``'s segments, each record's slot in the unit, each slot's source (None:
        one source): its windows' own, one after the other."""
        segments: list[Segment] = []
        slots: list[np.ndarray] = []
        sources: list[np.ndarray] = []
        offset = 0
        for k in self.windows(u):
            seg, slot, source = self.plan.load_slots(k)
            segments += seg
            if slot is not None:
                slots.append(slot + offset)
            if source is not None:
                sources.append(source)
            a, b = self.plan.window_bounds(k)
            offset += b - a
        return (
            segments,
            np.concatenate(slots) if slots else None,
            np.concatenate(sources) if sources else None,
        )
