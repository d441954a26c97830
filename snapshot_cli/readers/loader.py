"""The loader: shuffled, interleaved, prefetched replay of a snapshot as numpy batches.

    manifest → plan(epoch, seed, rank, world_size) → parallel block reads into a window
             → window permutation → batch gather → [map] → prefetch buffer → consumer

Threads (all named ``snap-*``, stopped by ``close()``, the context manager, breaking out of
the loop, or garbage collection): ``snap-batch`` walks the plan and assembles batches,
``snap-read_N`` decode record batches into the next window while the current one is served,
``snap-map_N`` apply ``map``. The order is the plan's, never thread timing's: ``state_dict()``
(epoch, batch) resumes exactly."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import forks, storage
from ..cores import cores as cpus
from ..errors import OptionError
from ..units import integer
from . import gather, memory, procs, procs_check, ranks, resume, switching
from .adapter import FrameworkAdapters
from .autotune import ParallelismTuner, PrefetchTuner
from .elastic import GlobalOptions, GlobalPlan
from .fetch import DEFAULT_STREAMS as FETCH_STREAMS
from .mix import Mixture
from .options import LoaderOptions, checked_tracer
from .plan import EpochPlan, PlanOptions
from .prefetch import Closed
from .run import Run, RunContext
from .slabs import WindowPool
from .sources import ReadSet, resolve
from .stats import Stats, records_in
from .trace import Tracer
from .window import fixed_width, row_bytes

if TYPE_CHECKING:
    from .snapshot import Snapshot

Batch = dict[str, np.ndarray]
SHUFFLE_BUFFER_BYTES = 256 << 20  # default shuffle window: 256 MiB of records
ORDERED_WINDOW_BYTES = 32 << 20  # window when not shuffling: just enough to read ahead
# An epoch's first shuffle window: 32 MiB of records (whole records: a first read checks all
# of each record batch, whatever columns it keeps; columns=["label"] of images waited 0.76 s
# for every record batch to be checked), decoded in a few tens of milliseconds; each next
# window is twice the last, up to the shuffle buffer (plan.py's ramp).
FIRST_WINDOW_BYTES = 32 << 20
# ... at most 2**20 records (each costs a permutation slot and a scattered write: 8M 4-byte
# records took 0.9 s to the first batch, 1M ~0.1 s), and those of at most 256 shards (a small
# one costs ~0.5 ms to open: 20,000 one-record shards took 9.7 s to the first batch) and of
# 2,048 record batches (~35 us each: --batch-rows 1 took 6.2 s to the first batch, 0.1 s)
FIRST_WINDOW_ROWS, FIRST_WINDOW_SHARDS, FIRST_WINDOW_BLOCKS = 1 << 20, 256, 2048
PREFETCH_BYTES = 64 << 20  # "auto" prefetch keeps at most this much in ready batches
SUPERSEDED = (
    "this pass over the loader was superseded: iter(), load_state_dict() or set_epoch() was "
    "called on the loader since it started; iterate the loader again"
)


class Loader(FrameworkAdapters):
    """Iterate to get batches ``dict[str, np.ndarray]``; see :meth:`Snapshot.loader`.

    Each ``for batch in loader`` runs ``epochs`` epochs (``None``: forever), continuing the
    epoch counter, so every pass gets a fresh shuffle. Breaking out and iterating again
    continues where the consumer stopped.
    """

    def __init__(
        self,
        source: Snapshot | Mixture,
        batch_size: int | None,
        options: LoaderOptions | None = None,
        trace: Tracer | None = None,
    ) -> None:
        options = LoaderOptions() if options is None else options
        self.options, self.trace, self._source = options, checked_tracer(trace), source
        self._batch_size, self._made_in = batch_size, forks.count
        rank, world_size = ranks.auto_pair(options.rank, options.world_size)
        ranks.warn_if_every_rank_reads_all(options.rank, options.world_size)
        self.reading = reading = resolve(source, options)
        self.snapshot: Snapshot | None = None if isinstance(source, Mixture) else source
        self.schema, self.columns = reading.schema, reading.columns
        bytes_per_row = reading.bytes_per_row()
        everywhere = options.global_batch_size is not None or reading.counts is not None
        # in order, a window's size changes no order: sized by the largest records, else
        # by the average (the order of a shuffle is a function of it)
        in_order, densest = not options.shuffle and not everywhere, reading.densest_row_bytes()
        per_row = densest if in_order else bytes_per_row
        buffer_rows = options.shuffle_rows(per_row)  # None: "auto" (memory.auto_window)
        target = SHUFFLE_BUFFER_BYTES if options.shuffle else ORDERED_WINDOW_BYTES
        target, self._capped = memory.auto_window(target, buffer_rows is None and not everywhere)
        buffer_rows = buffer_rows or max(1, target // per_row)
        # the first window ramps up kept in order too: 32 MiB of 4-byte records is 8,000
        # record batches to decode before the first batch (0.7-1.3 s)
        first_rows = reading.first_rows(
            FIRST_WINDOW_BYTES, FIRST_WINDOW_ROWS, FIRST_WINDOW_SHARDS, FIRST_WINDOW_BLOCKS
        )
        self.blocks = reading.blocks
        self._layouts = [resume.layout(b.rows) for b in reading.source_blocks]  # (a state's)
        counts = reading.counts or (reading.sources[0].num_records,)
        self.plan_options = options.plan_options(
            batch_size, rank, world_size, buffer_rows, first_rows, counts, reading.counts is None
        )
        self.map, self.epochs, self.verify = options.map, options.epochs, options.verify
        self.cache, readers = reading.cache, reading.readers
        depth = options.count_or_none(options.prefetch)
        batch = self.plan_options.batch_size
        prefetch = PrefetchTuner(
            start=depth or 2,
            high=depth or max(2, min(16, PREFETCH_BYTES // max(1, bytes_per_row * batch))),
            fixed=depth is not None,
        )
        # "auto": on local disk (and from a cache), decoding is CPU-bound and one thread per
        # core is best; the hill climber's explorations cost more than they found there
        # (benchmarks/replay.py). Remote reads wait on the network: threads waiting cost no
        # CPU, so start at the fetch pool's width (more for one request per record batch)
        # and let the climber move (benchmarks/remote.py).
        reads = options.count_or_none(options.num_parallel_reads)
        cores = cpus()
        floor = min(cores, 16)
        self._local = local = all(storage.is_local(s.fs) for s in reading.sources)
        wide = 4 * FETCH_STREAMS if readers.ranged else 2 * FETCH_STREAMS
        tuner = ParallelismTuner(
            start=reads or (floor if local else wide if readers.ranged else FETCH_STREAMS),
            low=reads or floor,
            high=reads or (4 * floor if local else wide),
            fixed=reads is not None or local,
        )
        processes = procs_check.checked_count(options.processes, reading)
        # kept in order, a gather copies runs of records, whatever the size of their values
        value_bytes = row_bytes(reading.schema, self.columns) / max(1, len(self.columns))
        value_bytes = value_bytes if options.shuffle else float("inf")
        gathers = not processes and gather.suits(reading.sources, self._fixed_only(), value_bytes)
        self._stats = Stats(sources=reading.names if reading.counts else [])
        # a window never holds more than a rank's epoch: a batch larger than the snapshot
        # must not size the slabs (batch_size=10**7 over 500 records asked for 120 GB)
        first = self._make_plan(0)
        self._epoch_batches = first.num_batches  # (every epoch's: records are dealt alike)
        self._stats.window_rows = max(1, min(first.window_rows, first.num_rows))
        if depth is not None:  # batches held ready may each have memory of their own
            held = depth if self.epochs is None else min(depth, first.num_batches * self.epochs)
            what = f"prefetch={depth} ({held} batches of {batch:,} records)"
            memory.check(held * bytes_per_row * batch, what, "lower prefetch (or leave it auto)")
        windows = WindowPool(
            reading.schema, self.columns, self._stats.window_rows, processes > 0, gathers
        )
        o = self.plan_options  # (a map's rng: a DataLoader worker's own, not its rank's)
        self._context = RunContext(
            blocks=self.blocks,
            make_plan=functools.partial(_plan, self.plan_options, self.reading, self.blocks),
            map_key=(o.seed, o.part if isinstance(o, PlanOptions) else o.rank),
            schema=reading.schema,
            columns=tuple(self.columns),
            readers=readers,
            tuner=tuner,
            prefetch=prefetch,
            stats=self._stats,
            windows=windows,
            map=options.map,
            map_takes_rng=options.map_takes_rng,
            map_threads=cores,
            bytes_per_row=bytes_per_row,
            record_bytes=reading.record_bytes(),
            densest_row_bytes=densest,
            trace=trace,
            sources=len(reading.sources),
            processes=processes,
            checked=np.zeros(len(self.blocks.rows), bool) if processes else None,
            gather_threads=cores,
        )
        self._epoch = 0
        self._batch = 0
        self._pass_end: int | None = None
        self._run: Run | None = None
        self._passes = 0  # iter(), load_state_dict() and set_epoch() each start a new one
        self._loaded = False  # a state loaded, no pass begun since (set_epoch may keep it)
        self._starting = threading.Lock()  # (two threads' iter(): one pass is the newest)

    def _fixed_only(self) -> bool:
        return all(fixed_width(self.schema.field(c).type) for c in self.columns)

    def _make_plan(self, epoch: int) -> EpochPlan | GlobalPlan:
        return _plan(self.plan_options, self.reading, self.blocks, epoch)

    @property
    def reads_by_range(self) -> bool:
        """Whether shards are read one record batch at a time (a remote snapshot whose
        shards do not fit the memory budget) rather than whole."""
        return bool(self._context.readers.ranged)

    # --- sizes and state ----------------------------------------------------------------

    def batches_per_epoch(self) -> int:
        """Batches one epoch yields to this rank (``len(loader)`` is this x ``epochs``)."""
        return self._epoch_batches

    def __repr__(self) -> str:
        o, at = self.plan_options, f"at epoch {self._epoch} batch {self._batch}"
        return (
            f"Loader({self._source!r}, batch_size={o.batch_size}, shuffle={o.shuffle}, "
            f"seed={o.seed}, rank={o.rank}/{o.world_size}, {at})"
        )

    def __len__(self) -> int:
        if self.epochs is None:
            raise TypeError(
                "an endless loader (epochs=None) has no length; "
                "loader.batches_per_epoch() is an epoch's batches"
            )
        return self.batches_per_epoch() * self.epochs

    def _config(self) -> dict[str, Any]:
        return resume.config(self.plan_options, self.reading.fingerprints, self._layouts)

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the next batch to yield (an adapter's consumer, behind the
        loader by the batches the adapter took ahead: :meth:`consumer`). A few integers."""
        return self.consumer() or self._position()

    def _position(self) -> dict[str, Any]:
        return {
            "version": 1,
            "epoch": self._epoch,
            "batch": self._batch,
            "pass_end": self._pass_end,
            "config": self._config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken (README, Determinism): a pass begun
        before it ends where it would have; ``epochs`` sets the passes after."""
        state = resume.plain(state)
        problem = resume.malformed(state) or resume.mismatch(
            self._config(), state["config"], self.reading.sources, self._capped,
            self.plan_options.world_size,
        )  # fmt: skip
        if problem or (problem := resume.past_the_end(state, self._epoch_batches)):
            raise OptionError(problem)
        self._in_this_process()  # (before the lock: a forked child's may be held for good)
        with self._starting:
            self._passes += 1  # (first: the pass it stops must see it has been superseded)
            self._stop()
            self._consumer = None
            self._epoch, self._batch = state["epoch"], state["batch"]
            self._pass_end, self._loaded = state["pass_end"], True

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at ``epoch`` (like DistributedSampler.set_epoch), unless a
        state just loaded is within it (:func:`.resume.keeps_position`)."""
        epoch = integer(epoch)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise OptionError(f"epoch must be an integer >= 0, got {epoch!r}")
        self._in_this_process()
        with self._starting:
            at = self._epoch, self._batch, self._pass_end
            if self._loaded and resume.keeps_position(epoch, at, self.epochs):
                return
            self._loaded, self._consumer = False, None
            self._passes += 1  # (first: the pass it stops must see it has been superseded)
            self._stop()
            self._epoch, self._batch, self._pass_end = epoch, 0, None

    def stats(self) -> dict[str, Any]:
        """Throughput, time waiting for data, per-stage seconds and the settings in use."""
        s = self._stats
        s.parallel_reads, s.prefetch = self._context.tuner.current, self._context.prefetch.current
        if self._run is not None:
            s.consumer_wait = self._run.buffer.consumer_wait + self._run.wait_before
        out = s.to_dict()
        out["bytes_read"] = self._context.readers.bytes_read + s.process_bytes_read
        if self.cache is not None:
            c = self.cache
            out["cache"] = {"dir": str(c.dir), "hits": c.hits, "fills": c.fills,
                            "fill_bytes": c.fill_bytes, "evicted": c.evicted,
                            "uncached": c.uncached}  # fmt: skip
        return out

    # --- iteration ----------------------------------------------------------------------

    def _in_this_process(self) -> None:
        """A forked child's copy of the loader (``multiprocessing`` or ``os.fork`` after a
        pass began) has none of its parent's threads, and a lock one of them held at the fork
        stays held in the child: the child makes its reading machinery afresh, once, keeping
        the position, so its next batch is the one after the last its parent handed over
        (``stats()`` count the child's own)."""
        if self._made_in == forks.count:
            return
        where = self._epoch, self._batch, self._pass_end, self._passes, self._loaded
        self._run = None  # (not closed: its threads and locks are the parent's)
        Loader.__init__(self, self._source, self._batch_size, self.options, self.trace)
        self._epoch, self._batch, self._pass_end, self._passes, self._loaded = where

    def _one_pass(self) -> Iterator[Batch]:
        """One pass (``iter(loader)``). A pass superseded by a newer one (``iter()``,
        ``load_state_dict``, ``set_epoch``) raises RuntimeError if used again, rather than
        hand out stale batches and move the loader's position; after ``close()`` it ends.
        A pass the parent began, resumed in a forked child, goes on in the child's own pass
        from the same place."""
        self._in_this_process()
        here = forks.count  # (read per batch: see forks.py)
        with self._starting:  # the newest pass is the one whose run the loader keeps
            self._passes += 1  # (first: the pass it stops must see it has been superseded)
            self._stop()
            mine, loaded, self._loaded = self._passes, self._loaded, False
            if self._pass_end is None or self._epoch >= self._pass_end:
                if loaded and self._pass_end is not None:  # a state taken after its pass's
                    self._pass_end = None  # last batch, before its end: the pass ends here
                    return
                self._pass_end = None if self.epochs is None else self._epoch + self.epochs
            run = Run(self._context, self._epoch, self._batch, self._pass_end)  # (no thread yet)
            self._run = run
        s = self._stats
        switching.enter(self._local)  # the GIL's switch interval: 1 ms (switching.py)
        try:  # (its threads started in it: a Ctrl-C in their start has them stopped below)
            run.start()
            s.started = s.started or time.perf_counter()
            while True:
                waited = time.perf_counter()
                try:
                    group = run.buffer.get()
                except Closed:  # the pass is over, or another one stopped it
                    if self._passes != mine:  # (a thread waiting here ended with no word)
                        raise RuntimeError(SUPERSEDED) from None
                    break
                if self.trace is not None:
                    self.trace.add("wait for batch", waited, time.perf_counter(), batch=group[0][1])
                for epoch, index, batch, nbytes, counts in group:
                    if self._passes != mine:
                        raise RuntimeError(SUPERSEDED)
                    if self._run is not run:  # close() was called: this pass is over
                        return
                    per_epoch = run.batches_in(epoch)
                    after = (epoch + 1, 0) if index + 1 >= per_epoch else (epoch, index + 1)
                    s.batches += 1
                    s.records += records_in(batch)
                    s.bytes += nbytes
                    if counts is not None:
                        s.add_sources(counts)
                    elif s.sources:  # (a mixture of one, a sample: no counts from the plan)
                        s.add_sources((records_in(batch),))
                    # last, no call before the yield: a Ctrl-C never leaves it past a batch
                    self._epoch, self._batch = after  # not handed over (see test_interrupts)
                    yield batch
                    if forks.count != here:  # resumed in a forked child: see _in_this_process
                        yield from self._one_pass()
                        return
            if self._pass_end is not None and self._epoch >= self._pass_end:
                self._pass_end = None
        finally:
            switching.leave(self._local)
            if forks.count == here:  # (a forked child's copy: _in_this_process)
                run.close()
            if self._run is run:  # a newer pass may have started since; leave it alone
                self._stats.consumer_wait = run.buffer.consumer_wait + run.wait_before
                self._run = None

    def close(self) -> None:
        """Stop the background threads, close the shard files and let go of the memory kept
        for the next pass (each freed once no batch refers to it); iteration may start again."""
        self._stop()
        self._context.windows.drop()
        self._context.readers.close()
        procs.forget_readers(self._context.readers)  # decode processes close theirs too

    def _stop(self) -> None:
        """Stop the pass running, keeping its memory for the next (a new pass, a state or an
        epoch set)."""
        self._in_this_process()
        run = self._run
        if run is not None:
            self._stats.consumer_wait = run.buffer.consumer_wait + run.wait_before
            run.close()
            self._run = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        run = getattr(self, "_run", None)
        if run is not None and getattr(self, "_made_in", None) == forks.count:
            run.close()


def _plan(o: Any, reading: ReadSet, blocks: Any, epoch: int) -> EpochPlan | GlobalPlan:
    """Epoch ``epoch``'s plan. A function of the loader's parts, not a method: the run
    context holds it, and a method would tie the loader into a cycle that only the cyclic
    garbage collector frees (its windows and maps, 360 MiB for 586 MiB of records, stayed
    after ``del loader``)."""
    if isinstance(o, GlobalOptions):
        return GlobalPlan(reading.source_blocks, o, epoch)
    return EpochPlan(blocks, o, epoch)
