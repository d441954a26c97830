"""Serving a window: its batches made, mapped and handed to the consumer, in order.

A slot window's batches are views of it (:mod:`.window`: no work); a gathered window's are
copies (:mod:`.gather`), made a group of consecutive batches at a time (small batches cost per
call, not per byte) by ``snap-gather_N`` threads at once (the copy runs in C, without the
GIL), and a batch of large records in parts, by all of them at once. ``map`` runs in
``snap-map_N`` threads. Batches go to the bounded prefetch buffer the consumer reads in groups
of up to ``GROUP_MAX`` (one lock and one wake-up per group), and the buffer grows whenever the
consumer had to wait for one (``prefetch="auto"``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from .gather import GatherWindow
from .map_outputs import MapOutputs, map_rng, not_a_dict_hint
from .prefetch import Closed, PrefetchBuffer, weakly

if TYPE_CHECKING:
    from typing import TypeAlias

    from .loader import Batch
    from .run import Plan, RunContext
    from .slabs import WindowPool
    from .trace import Tracer
    from .window import Window

    # batches made from a window, when their making started and ended
    Made: TypeAlias = tuple[list[Batch], float, float]
    Bounds: TypeAlias = list[tuple[int, int, int]]  # (batch index, first slot, end slot)
    Mapped: TypeAlias = tuple[Batch, frozenset[str]]  # a map's batch, its given columns

# Small batches go to the consumer in groups of up to GROUP_MAX, GROUP_BYTES at most.
GROUP_BYTES, GROUP_MAX = 1 << 20, 64
# A gathered window's batches are made in groups of about this many bytes (GROUP_MAX at most):
# each group costs a few takes of the GIL, which a consumer running Python holds for up to
# 5 ms each time (8 MiB: 9-10 % input-bound with a Python-busy step, 14-16 % at 1 MiB).
GATHER_BYTES = 8 << 20
INLINE_MAP = 20e-6  # a map whose calls take less (seconds) runs in the serving thread
# With a map, a group holds about this many seconds of map calls at most: a group waits for
# its last batch's map (64 batches of a 50 ms map held the first batch 1.7 s). Not less: a
# consumer woken for every batch of a 0.5 ms map took the GIL from the map threads (1 ms:
# 0.79-0.80 of groups by bytes, benchmarks/map_groups.py).
GROUP_MAP_SECONDS = 10e-3
# A batch of at least this many bytes (large records) is gathered in parts of GATHER_BYTES, by
# every gather thread at once: gathered whole, one thread copied it while the other waited (a
# window kept in order holds one such batch: 8 MiB records, batch 8, 5.4 GB/s, two threads
# 8.1, measured).
SPLIT_BYTES = 2 * GATHER_BYTES

# What the consumer gets: (epoch, batch index, batch, bytes, records per source or None).
Item = tuple[int, int, "Batch", int, "np.ndarray | None"]


class Server:
    """The serving half of a :class:`~.run.Run`: its threads, and the prefetch buffer."""

    def __init__(self, ctx: RunContext, batch_size: int, stop: threading.Event) -> None:
        self.stats, self.prefetch, self._trace = ctx.stats, ctx.prefetch, weakly(ctx.trace)
        self._map, self.map_takes_rng = weakly(ctx.map), ctx.map_takes_rng
        self.map_key = ctx.map_key
        self.mixed, self.stop = ctx.sources, stop
        self.batch_bytes = max(1, ctx.bytes_per_row * batch_size)
        self.group = max(1, min(GROUP_MAX, GROUP_BYTES // self.batch_bytes))
        self._group: list[Item] = []
        self._between: Callable[[], None] | None = None
        self.map_pool = (
            ThreadPoolExecutor(ctx.map_threads, thread_name_prefix="snap-map") if ctx.map else None
        )
        self.outputs = MapOutputs()
        self._map_calls, self._map_time = 0, 0.0
        self._sized_for = self._group_now()  # (the group size the buffer's depth is for)
        self.buffer = PrefetchBuffer(self._groups(self.prefetch.current))
        self.gather_threads = ctx.gather_threads
        self.gather_pool = ThreadPoolExecutor(self.gather_threads, thread_name_prefix="snap-gather")

    @property
    def trace(self) -> Tracer | None:
        return self._trace()

    def serve(
        self,
        key: tuple[Plan, int, int, int],
        window: Window | GatherWindow,
        sources: np.ndarray | None,
        between: Callable[[], None] | None = None,
    ) -> None:
        """Batches ``[lo, hi)`` of ``key = (plan, window, lo, hi)`` from ``window`` (each
        slot's source: ``sources``, a mixture) into the buffer; ``between()`` is called after
        each hand-over to the buffer."""
        plan, _, lo, hi = key
        self._between = between
        gathering = isinstance(window, GatherWindow)
        taking: deque[tuple[Bounds, Future[Made]]] = deque()
        in_flight: deque[tuple[int, int, Future[Mapped], int, np.ndarray | None]] = deque()

        def take(group: Bounds) -> Made:
            started = time.perf_counter()
            if isinstance(window, GatherWindow):
                made = window.take_group([(a, b) for _, a, b in group])
            else:
                made = [window.take(a, b) for _, a, b in group]
            return made, started, time.perf_counter()

        def hand_on(group: Bounds, made: Made) -> None:
            batches, started, gathered = made
            self.stats.gather_seconds += gathered - started
            if self.trace is not None:
                self.trace.add("gather batch", started, gathered, epoch=plan.epoch,
                               batch=group[0][0], batches=len(group))  # fmt: skip
            for (i, a, b), batch in zip(group, batches, strict=True):
                nbytes = sum(v.nbytes for v in batch.values())
                counts = (
                    None if sources is None else np.bincount(sources[a:b], minlength=self.mixed)
                )
                if self.map_pool is None:
                    self._put((plan.epoch, i, batch, nbytes, counts))
                    continue
                if not in_flight and self._map_calls >= 8 and self._map_time < INLINE_MAP * 8:
                    # a map cheaper than handing a batch to a map thread and back (~40 us):
                    # here, in order (a running mean that a costlier map soon moves up)
                    self._mapped(plan.epoch, i, self._apply(plan.epoch, i, batch), nbytes, counts)
                    continue
                future = self.map_pool.submit(self._apply, plan.epoch, i, batch)
                in_flight.append((plan.epoch, i, future, nbytes, counts))
                while len(in_flight) > self.prefetch.current:
                    e, j, fut, nb, c = in_flight.popleft()
                    self._mapped(e, j, fut.result(), nb, c)

        per_group = min(GROUP_MAX, max(1, GATHER_BYTES // self.batch_bytes)) if gathering else 1
        group: Bounds = []
        for i in range(lo, hi):
            if self.stop.is_set():
                return
            _, a, b = plan.batch_bounds(i)
            group.append((i, a, b))
            if len(group) < per_group and i + 1 < hi:
                continue
            if not gathering:
                hand_on(group, take(group))
            else:
                taking.append((group, self._take(window, group, take)))
                while len(taking) > 2 * self.gather_threads:
                    done, making = taking.popleft()
                    hand_on(done, making.result())
            group = []
        while taking:
            if self.stop.is_set():
                return
            done, making = taking.popleft()
            hand_on(done, making.result())
        while in_flight:
            e, j, fut, nb, c = in_flight.popleft()
            self._mapped(e, j, fut.result(), nb, c)
        self._flush()

    def _take(
        self, window: Window | GatherWindow, group: Bounds, take: Callable[[Bounds], Made]
    ) -> Future[Made]:
        """A group gathered by a gather thread, or a large batch in parts by all of them."""
        split = isinstance(window, GatherWindow) and self.batch_bytes >= SPLIT_BYTES
        if not split or len(group) > 1:
            return self.gather_pool.submit(take, group)
        assert isinstance(window, GatherWindow)
        _, a, b = group[0]
        parts = min(b - a, -(-self.batch_bytes // GATHER_BYTES))
        batch, jobs = window.take_parts(a, b, parts)
        whole: Future[Made] = Future()
        left, started, lock = [len(jobs)], time.perf_counter(), threading.Lock()

        def done(part: Future[None]) -> None:
            with lock:
                left[0] -= 1
                if whole.done():
                    return
                if part.cancelled():  # the pass was stopped (close(), a break): so is this
                    whole.cancel()
                elif part.exception() is not None:
                    whole.set_exception(part.exception())
                elif not left[0]:
                    whole.set_result(([batch], started, time.perf_counter()))

        for job in jobs:
            self.gather_pool.submit(job).add_done_callback(done)
        if not jobs:  # (a batch has records: never, but never a future left pending)
            whole.set_result(([batch], started, started))
        return whole

    def _apply(self, epoch: int, index: int, batch: Batch) -> Mapped:
        """The map's batch, and the names of the columns it returned as they were given (the
        loader's own memory, which it reuses only once let go: no check needed)."""
        started = time.perf_counter()
        given = dict(batch)  # (before the map may add to it; the arrays kept: ids not reused)
        fn = self._map()
        if fn is None:  # the loader is gone (its map, held by it alone, with it): so is the pass
            raise Closed
        try:
            if self.map_takes_rng:
                seed, rank = self.map_key
                out = fn(batch, map_rng(seed, epoch, rank, index))
            else:
                out = fn(batch)
        except StopIteration as err:  # would end the loader's pass as "generator raised..."
            raise RuntimeError(
                "map raised StopIteration (a next() on an exhausted iterator in it?); "
                "a map cannot end the epoch: return the batch"
            ) from err
        ended = time.perf_counter()
        self.stats.map_seconds += ended - started
        self._map_calls += 1  # ~8x the mean of the last calls (racy updates: a rough figure)
        self._map_time += ended - started - (self._map_time / 8 if self._map_calls > 8 else 0)
        if self.trace is not None:
            self.trace.add("map", started, ended, epoch=epoch, batch=index)
        if not isinstance(out, dict):
            hint = not_a_dict_hint(out)
            raise TypeError(
                f"map must return a dict of arrays, returned {type(out).__name__}{hint}"
            )
        if not all(isinstance(k, str) for k in out):  # (to_jax() failed sorting them, to_tf()
            keys = ", ".join(repr(k) for k in out if not isinstance(k, str))  # in its graph)
            raise TypeError(f"map must return a dict keyed by column names (str), returned keys "
                            f"{keys[:200]}: name each column with a str")  # fmt: skip
        return out, frozenset(k for k, v in out.items() if given.get(k) is v)

    def _mapped(self, epoch: int, index: int, mapped: Mapped, nbytes: int, counts: Any) -> None:
        """Queue a batch the map returned, once it is known not to be in the memory of one it
        returned before that is still in use."""
        out, given = mapped
        self.outputs.check(out, index, given)
        self._put((epoch, index, out, nbytes, counts))

    def _put(self, item: Item) -> None:
        """Queue a batch ``(epoch, index, batch, bytes, per-source counts)`` for the consumer;
        batches go over in groups of ``group`` (small batches cost per hand-off, not per
        byte: one lock and one wake-up per group)."""
        self._group.append(item)
        if len(self._group) >= self._group_now():
            self._flush()

    def _group_now(self) -> int:
        """Batches a hand-over groups: ``group``, or fewer with a map that costs more than
        ``GROUP_MAP_SECONDS`` a group; one by one until its cost is known (8 calls)."""
        if self.map_pool is None:
            return self.group
        if self._map_calls < 8:
            return 1
        mean = self._map_time / 8  # (the running figure of _apply)
        return max(1, min(self.group, int(GROUP_MAP_SECONDS / max(mean, 1e-9))))

    def hand_over(self) -> None:
        """The batches made but not yet handed over (a group of a window being served), to
        the consumer: before an error (a map's that failed on a later batch) reaches it."""
        self._between = None
        self._flush()

    def _flush(self) -> None:
        if not self._group:
            return
        items, self._group = self._group, []
        before = self.buffer.consumer_waits
        started = time.perf_counter()
        self.buffer.put(items)
        ended = time.perf_counter()
        if self.trace is not None and ended - started > 1e-4:  # blocked: the consumer is slower
            self.trace.add("wait for room (prefetch full)", started, ended, batch=items[0][1])
        if self.buffer.consumer_waits > before:  # the consumer starved: keep more ready
            self.buffer.resize(self._groups(self.prefetch.consumer_waited()))
        elif self._sized_for != (now := self._group_now()):  # (a map's groups: as many batches)
            self._sized_for = now
            self.buffer.resize(self._groups(self.prefetch.current))
        if self._between is not None:
            self._between()

    def _groups(self, batches: int) -> int:
        """Prefetch depth in groups, from a depth in batches."""
        return max(1, -(-batches // self._group_now()))

    def close(self) -> None:
        """After the producer has stopped: stop the gather and map threads, and let go of
        ``between`` (the run's method: a cycle that would keep the run, and through it the
        loader's windows and maps, until the cyclic garbage collector runs)."""
        self._between = None
        self.gather_pool.shutdown(wait=True, cancel_futures=True)
        if self.map_pool is not None:
            self.map_pool.shutdown(wait=True, cancel_futures=True)


class Later:
    """The next window, to be started (``load()``) in the slab the consumer lets go of (see
    :meth:`.slabs.WindowPool.short`): as soon as it does, while the current window is served
    (:meth:`when_free`, between hand-overs), else once it has been served (:meth:`now`)."""

    def __init__(
        self, load: Callable[[], Any], windows: WindowPool, buffer: PrefetchBuffer, rows: int
    ) -> None:
        self.load, self.windows, self.buffer, self.rows = load, windows, buffer, rows
        self.pending: Any = None

    def when_free(self) -> None:
        """Start the window if the slab is free now, or once the consumer takes its next
        batch (which hands it the GIL: it lets go of the window before as it moves on)."""
        if self.pending is None:
            if self.windows.short(self.rows):
                self.buffer.taken()
                if self.windows.short(self.rows):
                    return
            self.pending = self.load()

    def now(self) -> Any:
        """Start the window now that the served one has been handed over whole: once the
        consumer has taken every batch (a consumer that keeps batches gets a new slab)."""
        if self.pending is None:
            self.buffer.drained()
            if self.windows.short(self.rows):  # it keeps batches: new slabs from now on
                self.windows.kept = True
            self.pending = self.load()
        return self.pending
