"""One pass of a loader: its threads, from the epoch plan to the prefetch buffer.

``snap-batch`` walks the plan window by window: ``snap-read_N`` threads decode the next
window's record batches while the current window is served (:mod:`.serve`: its batches made,
optionally mapped, into the bounded prefetch buffer the consumer reads); ``snap-plan_0``
plans the window after that meanwhile (its ``load_slots``; from disk, :mod:`.readahead`
asks for its record batches), so the read threads never wait for it. A :class:`Run` gets
what it uses from its :class:`~.loader.Loader` as one explicit :class:`RunContext`:
immutable plan data, plus the objects that outlive a pass (the tuners and stats it updates,
the window arrays it reuses, the shard readers).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import faults, shortages
from . import handoff, procs
from .decode import chunked, decode_segment, decode_segments, gather_known, groups, open_bound
from .gather import GatherWindow, populate
from .prefetch import Closed, weak_thread
from .readahead import Readahead
from .serve import Later, Server, weakly
from .units import Units, grouped
from .window import Window

if TYPE_CHECKING:
    from typing import TypeAlias

    import pyarrow as pa

    from .autotune import ParallelismTuner, PrefetchTuner
    from .elastic import GlobalPlan
    from .loader import Batch
    from .plan import Blocks, EpochPlan, Segment

    Plan: TypeAlias = EpochPlan | GlobalPlan | Units  # (Units: of the others, see grouped)
    # a window's segments, each record's slot (None: kept in order), each slot's source
    Loaded: TypeAlias = tuple[list[Segment], np.ndarray | None, np.ndarray | None]
    from .shard import ShardReaders
    from .slabs import WindowPool
    from .sources import MultiReaders
    from .stats import Stats
    from .trace import Tracer


# Decode processes take a window in chunks of about this many bytes of records (a quarter of
# a window's share per process, within these bounds).
CHUNK_MIN, CHUNK_MAX = 1 << 20, 16 << 20
GROUP_BYTES = 4 << 20  # records a read thread decodes at once (see Run._load)
STARTING = 1.0  # seconds a started thread may take to run (a close() waits for it)


@dataclass(frozen=True)
class RunContext:
    """What a loader's passes share; made once by the loader, handed to each :class:`Run`."""

    blocks: Blocks
    make_plan: Callable[[int], EpochPlan | GlobalPlan]  # epoch → its plan
    map_key: tuple[int, int]  # (seed, part: rank or DataLoader worker): map's rng, with epoch
    schema: pa.Schema
    columns: tuple[str, ...]
    readers: ShardReaders | MultiReaders
    tuner: ParallelismTuner
    prefetch: PrefetchTuner
    stats: Stats
    windows: WindowPool
    map: Callable[..., Batch] | None
    map_takes_rng: bool
    map_threads: int
    bytes_per_row: int
    record_bytes: int  # a whole record's (what a first read of it checks)
    densest_row_bytes: int  # the bytes per row of the shard with the largest records
    trace: Tracer | None
    sources: int = 1  # snapshots mixed
    processes: int = 0  # decode processes (:mod:`.procs`); 0: read threads decode
    # Record batches whose checksum some process of this loader has checked (processes=N:
    # each decode process would otherwise check again the ones it had not met itself).
    checked: np.ndarray | None = None
    gather_threads: int = 1  # threads gathering batches from a gathered window (:mod:`.gather`)


@dataclass
class _Pending:
    """A window being decoded by the read threads."""

    window: Window | GatherWindow
    futures: list[Future[float]]
    started: float
    nbytes: int
    sources: np.ndarray | None  # each slot's source (a mixture), else None
    blocks: np.ndarray | None = None  # the record batches it reads (processes=N)


class Run:
    """One iteration's threads, working from a :class:`RunContext`."""

    def __init__(self, ctx: RunContext, epoch: int, batch: int, end: int | None) -> None:
        self.blocks, self.make_plan = ctx.blocks, ctx.make_plan
        self.schema, self.columns = ctx.schema, list(ctx.columns)
        self.readers, self.tuner, self.stats = ctx.readers, ctx.tuner, ctx.stats
        self.unit_row_bytes, self._trace = ctx.densest_row_bytes, weakly(ctx.trace)
        self.read_per_row = max(ctx.bytes_per_row, ctx.record_bytes)  # what reads touch
        self.checked, self.processes = ctx.checked, ctx.processes
        self.start_epoch, self.start_batch, self.end = epoch, batch, end
        self.stop = threading.Event()
        if self.processes:
            self.pool = procs.pool()
            self.pool.start(self.processes)
            self.process_key = procs.reader_key(self.readers)
        self._plans: dict[int, Plan] = {}
        self.server = Server(ctx, self.plan(epoch).batch_size, self.stop)
        self.buffer = self.server.buffer
        self.wait_before = ctx.stats.consumer_wait
        self.windows = ctx.windows  # kept by the loader: later passes reuse the arrays
        threads = max(self.tuner.high, self.processes)
        self.read_pool = ThreadPoolExecutor(threads, thread_name_prefix="snap-read")
        self.plan_pool = ThreadPoolExecutor(1, thread_name_prefix="snap-plan")
        self.readahead = Readahead(self.readers, self.blocks, self.stop, ctx.stats)
        self.thread = weak_thread(self, "_produce", "snap-batch")  # (see weak_thread)
        self._began = threading.Event()  # snap-batch is running (see _join)
        self._closing = threading.Lock()  # one close at a time does the joining

    def start(self) -> None:
        """Start the pass's threads, once whoever stops it holds the run: a Ctrl-C may land
        in ``Thread.start`` after the thread began (its wait for it), and :meth:`close` then
        stops it (it was left filling the buffer for good, with its window)."""
        try:
            self.thread.start()
        except RuntimeError as err:
            faults.raise_no_thread("the loader", err)
            raise
        except BaseException:
            shortages.forget_unstarted(self.thread)
            raise

    @property
    def trace(self) -> Tracer | None:
        return self._trace()

    def plan(self, epoch: int) -> Plan:
        if epoch not in self._plans:
            self._plans = {e: p for e, p in self._plans.items() if e >= epoch - 1}
            self._plans[epoch] = grouped(self.make_plan(epoch), self.unit_row_bytes)
        return self._plans[epoch]

    def batches_in(self, epoch: int) -> int:
        return self.plan(epoch).num_batches

    def _windows(self) -> Iterator[tuple[Plan, int, int, int]]:
        """(plan, window, first batch, end batch) in order, from the start position."""
        epoch, first = self.start_epoch, self.start_batch
        while self.end is None or epoch < self.end:
            plan = self.plan(epoch)
            b = plan.batch_size
            if plan.num_batches and first < plan.num_batches:
                for k in range(plan.window_of(first * b), plan.num_windows):
                    a, z = plan.window_bounds(k)  # window sizes are multiples of b
                    lo, hi = max(first, a // b), min(plan.num_batches, -(-z // b))
                    if lo < hi:
                        yield plan, k, lo, hi
            elif plan.num_batches == 0:  # an empty rank part, every epoch (records are
                return  # dealt alike): endless, it spun; epochs=10**9 took hours of nothing
            epoch, first = epoch + 1, 0

    def _produce(self) -> None:
        self._began.set()
        if self.stop.is_set():  # closed before it ran (an interrupted start): nothing to do
            return
        try:
            # One window decodes while the previous one is served: two windows at most, and
            # the read threads never decode two windows at once (their rate is measurable).
            # The window after it is worked out meanwhile (0.1-0.2 s for 2M small records).
            # Where it needs a third slab, it is started once the consumer lets go of the
            # slab of the window before (:class:`.serve.Later`), not in a new one.
            windows = self._windows()
            current = next(windows, None)
            pending = self._load(current, None) if current else None
            upcoming = next(windows, None) if current else None
            planned = self._ahead(upcoming)
            while current is not None and pending is not None and not self.stop.is_set():
                window, sources = self._finish(pending)
                later = None
                if upcoming and self.windows.short(rows := self._rows(upcoming)):
                    load = functools.partial(self._load, upcoming, planned)
                    later = Later(load, self.windows, self.buffer, rows)
                pending = self._load(upcoming, planned) if upcoming and not later else None
                after = next(windows, None) if upcoming else None
                planned = self._ahead(after)
                between = later.when_free if later else lambda: self.windows.between(self.read_pool)
                self.server.serve(current, window, sources, between)
                if later is not None and not self.stop.is_set():
                    pending = later.now()
                self.windows.put(window, self.read_pool)
                current, upcoming = upcoming, after
            self.buffer.close()
        except Closed:
            pass
        except BaseException as err:  # reaches the consumer with its traceback
            err = faults.threads_said("the loader", err)  # (pools start threads as work comes)
            try:
                self.server.hand_over()  # (the batches made before it first: a map's error)
                self.buffer.put(None, err)
                self.buffer.close()
            except Closed:
                pass

    @staticmethod
    def _rows(key: tuple[Plan, int, int, int]) -> int:
        a, b = key[0].window_bounds(key[1])
        return b - a

    def _ahead(self, key: tuple[Plan, int, int, int] | None) -> Future[Loaded] | None:
        return self.plan_pool.submit(self._planned, key) if key else None

    def _planned(self, key: tuple[Plan, int, int, int]) -> Loaded:
        self.readahead.advise(key[:2], (loaded := key[0].load_slots(key[1]))[0])
        return loaded

    def _load(self, key: tuple[Plan, int, int, int], planned: Future[Loaded] | None) -> _Pending:
        plan, k, _, _ = key
        segments, slots, sources = planned.result() if planned else plan.load_slots(k)
        self.readahead.advise(key[:2], segments)  # (if planned before reads were seen)
        a, b = plan.window_bounds(k)
        window = self.windows.get(b - a, inverse=slots, segments=len(segments))
        offsets = np.concatenate([[0], np.cumsum([s.rows for s in segments])[:-1]]).tolist()
        nbytes = (b - a) * self.read_per_row  # records read (columns=[...] of whole ones)
        # Decoded shard by shard, each opened once a window (in the window's order a snapshot
        # of more shards than stay open reopened one for about every record batch: 2x slower)
        pairs = sorted(zip(offsets, segments, strict=True), key=lambda p: p[1].block)
        if self.processes:
            children = self.pool.ready(self.processes)  # (none yet: threads decode it)
            if children and isinstance(window, Window):
                at, by = [o for o, _ in pairs], [s for _, s in pairs]
                index = np.fromiter((s.block for s in by), np.int64, len(by))
                futures = self._in_processes(children, window, at, by, index, nbytes)
                return _Pending(window, futures, time.perf_counter(), nbytes, sources, index)
        blocks, trace, columns = self.blocks, self.trace, self.columns
        if isinstance(window, GatherWindow):  # a later epoch: every segment known already?
            t0 = time.perf_counter()
            index = np.fromiter((s.block for s in segments), np.int64, len(segments))
            starts = np.fromiter((s.start for s in segments), np.int64, len(segments))
            lengths = np.fromiter((s.rows for s in segments), np.int64, len(segments))
            if gather_known(self.readers, window, blocks.shard[index], blocks.batch[index],
                            starts, lengths):  # fmt: skip
                self.windows.gathering()
                if trace is not None:
                    trace.add("place window", t0, time.perf_counter(), segments=len(segments))
                return _Pending(window, [], t0, nbytes, sources)
            # A first epoch: read into a slot window, which notes where each record batch is
            # for the gathered windows of later epochs (as fast as a gathered first epoch,
            # and no shard pages mapped while it is served: half the peak RSS, measured).
            window.close()
            window = self.windows.get(b - a, inverse=slots, gathered=False)
        assert isinstance(window, Window)
        # Segments a read thread takes at once: ~GROUP_BYTES of records, so that it waits for
        # the GIL once per group (a consumer running Python keeps it up to 5 ms each time),
        # and at least 4 groups per thread, so that the threads finish together; of at most
        # half the shards the readers keep open, all threads' together (decode.groups).
        per_segment = max(1, nbytes // max(1, len(segments)))
        n_threads = max(1, min(self.tuner.current, len(segments)))
        group_size = max(1, min(GROUP_BYTES // per_segment, len(segments) // (4 * n_threads)))
        work = groups(pairs, blocks.shard, group_size, open_bound(self.readers) // (2 * n_threads))
        lock = threading.Lock()
        fresh = iter(window.fresh)

        def worker() -> float:
            while (part := next(fresh, None)) is not None:  # first: the slab's new pages
                t0 = time.perf_counter()
                populate(*part)
                if trace is not None:
                    trace.add("map new pages", t0, time.perf_counter(), bytes=part[2])
            while not self.stop.is_set():
                with lock:  # a group: decoded in one compiled call where it can be
                    group = next(work, [])
                if not group:
                    break
                jobs = [
                    (offset, int(blocks.shard[seg.block]), int(blocks.batch[seg.block]),
                     int(blocks.rows[seg.block]), seg.start, seg.stop)
                    for offset, seg in group
                ]  # fmt: skip
                t0 = time.perf_counter()
                hows = decode_segments(self.readers, window, columns, jobs)
                if trace is not None:
                    rows = sum(seg.rows for _, seg in group)
                    trace.add("read+decode", t0, time.perf_counter(), segments=len(jobs),
                              rows=rows, how=sorted(set(hows)))  # fmt: skip
            return time.perf_counter()

        started = time.perf_counter()
        futures = [self.read_pool.submit(worker) for _ in range(n_threads)]
        return _Pending(window, futures, started, nbytes, sources)

    def _in_processes(
        self,
        children: list[Any],
        window: Window,
        offsets: list[int],
        segments: list[Segment],
        index: np.ndarray,
        nbytes: int,
    ) -> list[Future[float]]:
        """Hand the window's segments to the decode processes, a chunk at a time, from one
        read thread per process (which waits on its socket, without the GIL)."""
        jobs = handoff.jobs_of(self.blocks, index, offsets, segments, self.checked)
        target = max(CHUNK_MIN, min(CHUNK_MAX, nbytes // (4 * len(children))))
        chunks = chunked(jobs, self.read_per_row, target)
        lock = threading.Lock()

        def next_chunk() -> np.ndarray | None:
            with lock:
                return next(chunks, None)

        def here(job: np.ndarray) -> None:  # a chunk of a process that died
            for offset, shard, batch, rows, start, stop, _ in job.tolist():
                decode_segment(self.readers, window, self.columns, offset, shard, batch, rows,
                               start, stop)  # fmt: skip

        def worker(child: Any) -> float:
            t0 = time.perf_counter()
            done, cpu, read = handoff.decode_window(
                child, self.process_key, self._spec, window, next_chunk, self.stop, here
            )
            with lock:
                self.stats.process_cpu_seconds += cpu
                self.stats.process_bytes_read += read
            if self.trace is not None:
                self.trace.add("decode in process", t0, done, process=child.proc.pid, cpu=cpu)
            return done

        return [self.read_pool.submit(worker, c) for c in children]

    def _spec(self) -> dict[str, Any]:
        from .decoder import readers_spec  # (the decode process's module: loaded if used)

        return readers_spec(self.readers, self.schema, self.columns)

    def _finish(self, pending: _Pending) -> tuple[Window | GatherWindow, np.ndarray | None]:
        waited = time.perf_counter()
        done = max([f.result() for f in pending.futures], default=pending.started)
        if self.trace is not None:
            self.trace.add("wait for window", waited, time.perf_counter())
        pending.window.finish()
        self.readers.release()  # the window's reads are done: their mapped pages leave RSS
        if self.checked is not None and pending.blocks is not None:
            self.checked[pending.blocks] = True  # every read of the window passed
        seconds = max(1e-9, done - pending.started)
        self.stats.read_seconds += seconds
        self.stats.windows += 1
        self.readahead.turn(pending.nbytes)
        self.tuner.observe(pending.nbytes / seconds)
        return pending.window, pending.sources

    def close(self) -> None:
        """Stop the pass: its threads end and what they hold is let go before this returns.
        Called in one of snap's threads (the garbage collector ran a loader's or a pass's
        finalizer there, a ``map`` allocating), it only tells them to stop: that thread may
        be one the others wait for (a map call, a read), so a ``snap-close`` thread does the
        joining (joined there, they waited for each other for good)."""
        self.stop.set()
        self.server.buffer.discard()
        if threading.current_thread().name.startswith("snap-"):
            closer = threading.Thread(target=self._shut, name="snap-close", daemon=True)
            with contextlib.suppress(RuntimeError):  # (at exit: the threads go with it)
                closer.start()
            return
        self._shut()

    def _shut(self) -> None:
        with self._closing:
            self._join()
            self.read_pool.shutdown(wait=True, cancel_futures=True)
            self.windows.unmapped(cancelled=True)  # any window not unmapped yet
            self.windows.let_go()  # slabs not given back (a batch held one), however it ended
            self.plan_pool.shutdown(wait=True, cancel_futures=True)
            self.readahead.close()
            self.server.close()

    def _join(self) -> None:
        """Wait for snap-batch to end. A Ctrl-C in ``Thread.start`` may leave it started but
        not running yet (it then finds ``stop`` set and ends at once), or never to run (one
        before the start of the OS thread: then listed as starting for good, by CPython)."""
        thread = self.thread
        if thread is threading.current_thread():
            return
        starting = thread.ident is None and thread in threading.enumerate()  # (or never runs)
        if thread.ident is None and not (starting and self._began.wait(STARTING)):
            return
        self._began.wait()  # (started: running soon; joined before, join() would refuse)
        thread.join()
