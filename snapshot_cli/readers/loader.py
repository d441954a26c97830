"""The loader: shuffled, interleaved, prefetched replay of a snapshot as numpy batches.

    manifest → plan(epoch, seed, rank, world_size) → parallel block reads into a window
             → window permutation → batch gather → [map] → prefetch buffer → consumer

Threads (all named ``snap-*``, stopped by ``close()``, the context manager, breaking out of
the loop, or garbage collection): ``snap-batch`` walks the plan and assembles batches,
``snap-read_N`` decode record batches into the next window while the current one is served,
``snap-map_N`` apply ``map``. The order of batches is a function of the plan only, never of
thread timing, so ``state_dict()`` (epoch, batch) is enough to resume exactly.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import storage
from ..errors import OptionError
from ..writers.options import parse_size
from . import ranks
from .autotune import ParallelismTuner, PrefetchTuner
from .cache import ShardCache
from .fetch import DEFAULT_STREAMS as FETCH_STREAMS
from .plan import Blocks, EpochPlan, PlanOptions
from .prefetch import Closed, PrefetchBuffer
from .shard import ShardReaders
from .stats import Stats
from .trace import Tracer
from .window import Window, WindowPool, row_bytes

if TYPE_CHECKING:
    from .snapshot import Snapshot

Batch = dict[str, np.ndarray]
SHUFFLE_BUFFER_BYTES = 256 << 20  # default shuffle window: 256 MiB of records
ORDERED_WINDOW_BYTES = 32 << 20  # window when not shuffling: just enough to read ahead
PREFETCH_BYTES = 64 << 20  # "auto" prefetch keeps at most this much in ready batches


def _auto_or_int(value: Any, name: str, minimum: int) -> int | None:
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OptionError(f"{name} must be 'auto' or an integer >= {minimum}, got {value!r}")
    return value


class Loader:
    """Iterate to get batches ``dict[str, np.ndarray]``; see :meth:`Snapshot.loader`.

    Each ``for batch in loader`` runs ``epochs`` epochs (``None``: forever), continuing the
    epoch counter, so every pass gets a fresh shuffle. Breaking out and iterating again
    continues where the consumer stopped.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        epochs: int | None = 1,
        rank: int | str = 0,
        world_size: int | str = 1,
        drop_last: bool = False,
        columns: list[str] | None = None,
        shuffle_buffer: int | str = "auto",
        num_parallel_reads: int | str = "auto",
        prefetch: int | str = "auto",
        map: Callable[..., Batch] | None = None,  # noqa: A002
        verify: bool = True,
        trace: Tracer | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.trace = trace
        schema = snapshot.schema
        if rank == "auto" or world_size == "auto":
            auto_rank, auto_size, _ = ranks.detect()
            rank = auto_rank if rank == "auto" else rank
            world_size = auto_size if world_size == "auto" else world_size
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1
        ):
            raise OptionError(f"epochs must be None (forever) or an integer >= 1, got {epochs!r}")
        self.columns = list(schema.names) if columns is None else list(columns)
        unknown = [c for c in self.columns if c not in schema.names]
        if unknown or (not self.columns and schema.names):
            raise OptionError(
                f"unknown columns {unknown or '(none selected)'}; the snapshot has {schema.names}"
            )
        if map is not None and not callable(map):
            raise OptionError(f"map must be a function of a batch, got {map!r}")
        m = snapshot.manifest
        bytes_per_row = max(
            1, row_bytes(schema, self.columns), m.uncompressed_bytes // max(1, m.num_records)
        )
        buffer_rows = _auto_or_int(shuffle_buffer, "shuffle_buffer", 1)
        if buffer_rows is None:
            target = SHUFFLE_BUFFER_BYTES if shuffle else ORDERED_WINDOW_BYTES
            buffer_rows = max(1, target // bytes_per_row)
        try:
            self.plan_options = PlanOptions(
                batch_size=batch_size,
                shuffle=bool(shuffle),
                seed=seed,
                rank=rank,  # type: ignore[arg-type]
                world_size=world_size,  # type: ignore[arg-type]
                drop_last=bool(drop_last),
                window_rows=buffer_rows,
            )
        except ValueError as err:
            raise OptionError(str(err)) from err
        reads = _auto_or_int(num_parallel_reads, "num_parallel_reads", 1)
        cores = os.cpu_count() or 1
        self._cores = cores
        depth = _auto_or_int(prefetch, "prefetch", 1)
        batch_bytes = bytes_per_row * batch_size
        self._prefetch = PrefetchTuner(
            start=depth or 2,
            high=depth or max(2, min(16, PREFETCH_BYTES // max(1, batch_bytes))),
            fixed=depth is not None,
        )
        self.map = map
        self._map_takes_rng = map is not None and _accepts_rng(map)
        self.epochs = epochs
        self.verify = verify
        self.blocks = Blocks.from_manifest(m)
        self._bytes_per_row = bytes_per_row
        cache = None
        if cache_dir is not None:
            try:
                limit = None if cache_limit is None else parse_size(cache_limit, "cache_limit")
            except ValueError as err:
                raise OptionError(str(err)) from err
            cache = ShardCache(cache_dir, limit)
        elif cache_limit is not None:
            raise OptionError("cache_limit needs cache_dir (the directory to cache shards in)")
        self.cache = cache
        self._readers = ShardReaders(
            snapshot.fs, snapshot.root, m.shards, verify=verify, cache=cache
        )
        # "auto": on local disk (and from a cache), decoding is CPU-bound and one thread per
        # core is best; the hill climber's explorations cost more than they found there
        # (benchmarks/replay.py). Remote reads wait on the network: threads waiting cost no
        # CPU, so start at the fetch pool's width (more for one request per record batch)
        # and let the climber move (benchmarks/remote.py).
        floor = min(cores, 16)
        local = storage.is_local(snapshot.fs)
        wide = 4 * FETCH_STREAMS if self._readers.ranged else 2 * FETCH_STREAMS
        self._tuner = ParallelismTuner(
            start=reads or (floor if local else wide if self._readers.ranged else FETCH_STREAMS),
            low=reads or floor,
            high=reads or (4 * floor if local else wide),
            fixed=reads is not None or local,
        )
        self._windows = WindowPool(schema, self.columns, contiguous=bool(shuffle))
        self._epoch = 0
        self._batch = 0
        self._pass_end: int | None = None
        self._run: _Run | None = None
        self._stats = Stats()
        self._stats.window_rows = EpochPlan(self.blocks, self.plan_options, 0).window_rows

    # --- sizes and state ----------------------------------------------------------------

    def batches_per_epoch(self) -> int:
        return EpochPlan(self.blocks, self.plan_options, 0).num_batches

    def __len__(self) -> int:
        if self.epochs is None:
            raise TypeError("an endless loader (epochs=None) has no length")
        return self.batches_per_epoch() * self.epochs

    def _config(self) -> dict[str, Any]:
        o = self.plan_options
        return {
            "fingerprint": self.snapshot.manifest.fingerprint,
            "batch_size": o.batch_size,
            "shuffle": o.shuffle,
            "seed": o.seed,
            "rank": o.rank,
            "world_size": o.world_size,
            "drop_last": o.drop_last,
            "window_rows": o.window_rows,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the next batch to yield. Small: a few integers."""
        return {
            "version": 1,
            "epoch": self._epoch,
            "batch": self._batch,
            "pass_end": self._pass_end,
            "config": self._config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken (same snapshot and settings required)."""
        if not isinstance(state, dict) or state.get("version") != 1:
            raise OptionError("not a snap loader state (missing or unknown 'version')")
        mine, theirs = self._config(), state.get("config", {})
        diff = sorted(k for k in mine if mine[k] != theirs.get(k))
        if diff:
            raise OptionError(
                f"the state was saved by a loader with other {', '.join(diff)}: "
                f"{ {k: theirs.get(k) for k in diff} } vs { {k: mine[k] for k in diff} }"
            )
        self.close()
        self._epoch, self._batch, self._pass_end = state["epoch"], state["batch"], state["pass_end"]

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at ``epoch`` (like DistributedSampler.set_epoch)."""
        self.close()
        self._epoch, self._batch, self._pass_end = epoch, 0, None

    def stats(self) -> dict[str, Any]:
        """Throughput, time waiting for data, per-stage seconds and the settings in use."""
        s = self._stats
        s.parallel_reads, s.prefetch = self._tuner.current, self._prefetch.current
        if self._run is not None:
            s.consumer_wait = self._run.buffer.consumer_wait + self._run.wait_before
        out = s.to_dict()
        out["bytes_read"] = self._readers.bytes_read
        if self.cache is not None:
            c = self.cache
            out["cache"] = {"dir": str(c.dir), "hits": c.hits, "fills": c.fills,
                            "fill_bytes": c.fill_bytes, "evicted": c.evicted}  # fmt: skip
        return out

    # --- iteration ----------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        self.close()
        if self._pass_end is None or self._epoch >= self._pass_end:
            self._pass_end = None if self.epochs is None else self._epoch + self.epochs
        run = _Run(self, self._epoch, self._batch, self._pass_end)
        self._run = run
        if not self._stats.started:
            self._stats.started = time.perf_counter()
        try:
            while True:
                waited = time.perf_counter()
                try:
                    epoch, index, batch, nbytes = run.buffer.get()
                except Closed:
                    break
                if self.trace is not None:
                    self.trace.add("wait for batch", waited, time.perf_counter(), batch=index)
                per_epoch = run.batches_in(epoch)
                self._epoch, self._batch = (
                    (epoch + 1, 0) if index + 1 >= per_epoch else (epoch, index + 1)
                )
                s = self._stats
                s.batches += 1
                s.records += len(next(iter(batch.values())))
                s.bytes += nbytes
                yield batch
            if self._pass_end is not None and self._epoch >= self._pass_end:
                self._pass_end = None
        finally:
            self._stats.consumer_wait = run.buffer.consumer_wait + run.wait_before
            run.close()
            self._run = None

    def close(self) -> None:
        """Stop the background threads (iteration can start again later)."""
        if self._run is not None:
            self._run.close()
            self._run = None

    # framework adapters (each imports its framework only when called) -----------------

    def to_torch(self, device: Any = None, prefetch: int = 2) -> Any:
        """``dict[str, torch.Tensor]`` batches, copied to ``device`` ahead; see readers/torch.py."""
        from .torch import TorchBatches

        return TorchBatches(self, device=device, prefetch=prefetch)

    def to_jax(self, sharding: Any = None, prefetch: int = 2) -> Any:
        """``dict[str, jax.Array]`` batches placed ahead of use; see readers/jax.py."""
        from .jax import JaxBatches

        return JaxBatches(self, sharding=sharding, prefetch=prefetch)

    def to_tf(self) -> Any:
        """A ``tf.data.Dataset`` of this loader's batches; see readers/tf.py."""
        from .tf import to_dataset

        return to_dataset(self)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        run = getattr(self, "_run", None)
        if run is not None:
            run.close()


def _accepts_rng(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


@dataclass
class _Pending:
    """A window being decoded by the read threads."""

    window: Window
    futures: list[Future[float]]
    started: float
    nbytes: int


class _Run:
    """One iteration's threads. Shares only immutable plan data with the Loader."""

    def __init__(self, loader: Loader, epoch: int, batch: int, end: int | None) -> None:
        self.blocks, self.options = loader.blocks, loader.plan_options
        self.schema, self.columns = loader.snapshot.schema, loader.columns
        self.readers, self.tuner, self.prefetch = loader._readers, loader._tuner, loader._prefetch
        self.stats, self.map, self.map_takes_rng = loader._stats, loader.map, loader._map_takes_rng
        self.bytes_per_row = loader._bytes_per_row
        self.trace = loader.trace
        self.start_epoch, self.start_batch, self.end = epoch, batch, end
        self.stop = threading.Event()
        self.buffer = PrefetchBuffer(self.prefetch.current)
        self.wait_before = loader._stats.consumer_wait
        self._plans: dict[int, EpochPlan] = {}
        self.windows = loader._windows  # kept by the loader: later passes reuse the arrays
        self.read_pool = ThreadPoolExecutor(self.tuner.high, thread_name_prefix="snap-read")
        self.map_pool = (
            ThreadPoolExecutor(loader._cores, thread_name_prefix="snap-map") if self.map else None
        )
        self.thread = threading.Thread(target=self._produce, name="snap-batch", daemon=True)
        self.thread.start()

    def plan(self, epoch: int) -> EpochPlan:
        if epoch not in self._plans:
            self._plans = {e: p for e, p in self._plans.items() if e >= epoch - 1}
            self._plans[epoch] = EpochPlan(self.blocks, self.options, epoch)
        return self._plans[epoch]

    def batches_in(self, epoch: int) -> int:
        return self.plan(epoch).num_batches

    # --- producer thread ----------------------------------------------------------------

    def _windows(self) -> Iterator[tuple[EpochPlan, int, int, int]]:
        """(plan, window, first batch, end batch) in order, from the start position."""
        epoch, first = self.start_epoch, self.start_batch
        while self.end is None or epoch < self.end:
            plan = self.plan(epoch)
            per_window = plan.window_rows // self.options.batch_size
            if plan.num_batches and first < plan.num_batches:
                for k in range(first // per_window, plan.num_windows):
                    lo = max(first, k * per_window)
                    hi = min(plan.num_batches, (k + 1) * per_window)
                    if lo < hi:
                        yield plan, k, lo, hi
            elif plan.num_batches == 0 and self.end is None:
                return  # an empty rank part: an endless loop would spin
            epoch, first = epoch + 1, 0

    def _produce(self) -> None:
        try:
            # One window decodes while the previous one is served: two windows at most, and
            # the read threads never decode two windows at once (their rate is measurable).
            windows = self._windows()
            current = next(windows, None)
            pending = self._load(current) if current else None
            while current is not None and pending is not None and not self.stop.is_set():
                window = self._finish(pending)
                upcoming = next(windows, None)
                pending = self._load(upcoming) if upcoming else None
                self._serve(current, window)
                self.windows.put(window)
                current = upcoming
            self.buffer.close()
        except Closed:
            pass
        except BaseException as err:  # reaches the consumer with its traceback
            try:
                self.buffer.put(None, err)
                self.buffer.close()
            except Closed:
                pass

    def _load(self, key: tuple[EpochPlan, int, int, int]) -> _Pending:
        plan, k, _, _ = key
        segments = plan.window(k)
        a, b = plan.window_bounds(k)
        window = self.windows.get(b - a)
        offsets = np.concatenate([[0], np.cumsum([s.rows for s in segments])[:-1]]).tolist()
        work = iter(list(zip(offsets, segments, strict=True)))
        lock = threading.Lock()
        blocks, trace = self.blocks, self.trace

        def worker() -> float:
            while not self.stop.is_set():
                with lock:
                    item = next(work, None)
                if item is None:
                    break
                offset, seg = item
                shard, batch = int(blocks.shard[seg.block]), int(blocks.batch[seg.block])
                t0 = time.perf_counter()
                rb = self.readers.read_batch(shard, batch, int(blocks.rows[seg.block]))
                t1 = time.perf_counter()
                window.fill(offset, rb.select(self.columns), seg.start, seg.stop)
                if trace is not None:
                    trace.add("read+decode", t0, t1, shard=shard, record_batch=batch)
                    trace.add("copy to window", t1, time.perf_counter(), rows=seg.rows)
            return time.perf_counter()

        n = max(1, min(self.tuner.current, len(segments)))
        started = time.perf_counter()
        futures = [self.read_pool.submit(worker) for _ in range(n)]
        return _Pending(window, futures, started, (b - a) * self.bytes_per_row)

    def _finish(self, pending: _Pending) -> Window:
        waited = time.perf_counter()
        done = max([f.result() for f in pending.futures], default=pending.started)
        if self.trace is not None:
            self.trace.add("wait for window", waited, time.perf_counter())
        pending.window.finish()
        seconds = max(1e-9, done - pending.started)
        self.stats.read_seconds += seconds
        self.stats.windows += 1
        self.tuner.observe(pending.nbytes / seconds)
        return pending.window

    def _serve(self, key: tuple[EpochPlan, int, int, int], window: Window) -> None:
        plan, k, lo, hi = key
        perm = plan.permutation(k)
        in_flight: deque[tuple[int, int, Future[Batch], int]] = deque()
        for i in range(lo, hi):
            if self.stop.is_set():
                return
            _, a, b = plan.batch_bounds(i)
            started = time.perf_counter()
            batch = window.take(slice(a, b) if perm is None else perm[a:b])
            gathered = time.perf_counter()
            self.stats.gather_seconds += gathered - started
            if self.trace is not None:
                self.trace.add("gather batch", started, gathered, epoch=plan.epoch, batch=i)
            nbytes = sum(v.nbytes for v in batch.values())
            if self.map_pool is None:
                self._put(plan.epoch, i, batch, nbytes)
                continue
            in_flight.append(
                (plan.epoch, i, self.map_pool.submit(self._apply, plan.epoch, i, batch), nbytes)
            )
            while len(in_flight) > self.prefetch.current:
                e, j, fut, nb = in_flight.popleft()
                self._put(e, j, fut.result(), nb)
        while in_flight:
            e, j, fut, nb = in_flight.popleft()
            self._put(e, j, fut.result(), nb)

    def _apply(self, epoch: int, index: int, batch: Batch) -> Batch:
        started = time.perf_counter()
        fn: Callable[..., Batch] = self.map  # type: ignore[assignment]
        if self.map_takes_rng:
            o = self.options
            rng = np.random.default_rng([o.seed, epoch, o.rank, index, 0x6D6170])
            out = fn(batch, rng)
        else:
            out = fn(batch)
        ended = time.perf_counter()
        self.stats.map_seconds += ended - started
        if self.trace is not None:
            self.trace.add("map", started, ended, epoch=epoch, batch=index)
        if not isinstance(out, dict):
            raise TypeError(f"map must return a dict of arrays, returned {type(out).__name__}")
        return out

    def _put(self, epoch: int, index: int, batch: Batch, nbytes: int) -> None:
        before = self.buffer.consumer_waits
        started = time.perf_counter()
        self.buffer.put((epoch, index, batch, nbytes))
        ended = time.perf_counter()
        if self.trace is not None and ended - started > 1e-4:  # blocked: the consumer is slower
            self.trace.add("wait for room (prefetch full)", started, ended, batch=index)
        if self.buffer.consumer_waits > before:  # the consumer starved: keep more ready
            self.buffer.resize(self.prefetch.consumer_waited())

    # --- shutdown -----------------------------------------------------------------------

    def close(self) -> None:
        self.stop.set()
        self.buffer.discard()
        if self.thread is not threading.current_thread():
            self.thread.join()
        self.read_pool.shutdown(wait=True, cancel_futures=True)
        if self.map_pool is not None:
            self.map_pool.shutdown(wait=True, cancel_futures=True)
