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

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import storage
from ..errors import OptionError
from . import ranks
from .autotune import ParallelismTuner, PrefetchTuner
from .cache import ShardCache
from .direct import Placement
from .fetch import DEFAULT_STREAMS as FETCH_STREAMS
from .options import LoaderOptions
from .plan import Blocks, EpochPlan, PlanOptions
from .prefetch import Closed
from .run import Run, RunContext
from .shard import ShardReaders
from .stats import Stats
from .trace import Tracer
from .window import WindowPool, row_bytes

if TYPE_CHECKING:
    from .snapshot import Snapshot

Batch = dict[str, np.ndarray]
SHUFFLE_BUFFER_BYTES = 256 << 20  # default shuffle window: 256 MiB of records
ORDERED_WINDOW_BYTES = 32 << 20  # window when not shuffling: just enough to read ahead
# An epoch's first shuffle window: 32 MiB of records, decoded in a few tens of milliseconds;
# each next window is twice the last, up to the shuffle buffer (plan.py's ramp).
FIRST_WINDOW_BYTES = 32 << 20
PREFETCH_BYTES = 64 << 20  # "auto" prefetch keeps at most this much in ready batches


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
        options: LoaderOptions | None = None,
        trace: Tracer | None = None,
    ) -> None:
        options = LoaderOptions() if options is None else options
        self.snapshot, self.options, self.trace = snapshot, options, trace
        schema, m = snapshot.schema, snapshot.manifest
        rank, world_size = options.rank, options.world_size
        if rank == "auto" or world_size == "auto":
            auto_rank, auto_size, _ = ranks.detect()
            rank = auto_rank if rank == "auto" else rank
            world_size = auto_size if world_size == "auto" else world_size
        self.columns = options.column_names(list(schema.names))
        bytes_per_row = max(
            1, row_bytes(schema, self.columns), m.uncompressed_bytes // max(1, m.num_records)
        )
        buffer_rows = options.count_or_none(options.shuffle_buffer)
        if buffer_rows is None:
            target = SHUFFLE_BUFFER_BYTES if options.shuffle else ORDERED_WINDOW_BYTES
            buffer_rows = max(1, target // bytes_per_row)
        try:
            self.plan_options = PlanOptions(
                batch_size=batch_size,
                shuffle=bool(options.shuffle),
                seed=options.seed,
                rank=rank,
                world_size=world_size,
                drop_last=bool(options.drop_last),
                window_rows=buffer_rows,
                first_window_rows=(
                    max(1, FIRST_WINDOW_BYTES // bytes_per_row) if options.shuffle else 0
                ),
            )
        except ValueError as err:
            raise OptionError(str(err)) from err
        self.map, self.epochs, self.verify = options.map, options.epochs, options.verify
        self.blocks = Blocks.from_manifest(m)
        self.cache = (
            ShardCache(options.cache_dir, options.cache_bytes) if options.cache_dir else None
        )
        readers = ShardReaders(
            snapshot.fs, snapshot.root, m.shards, schema, verify=options.verify, cache=self.cache
        )
        depth = options.count_or_none(options.prefetch)
        prefetch = PrefetchTuner(
            start=depth or 2,
            high=depth or max(2, min(16, PREFETCH_BYTES // max(1, bytes_per_row * batch_size))),
            fixed=depth is not None,
        )
        # "auto": on local disk (and from a cache), decoding is CPU-bound and one thread per
        # core is best; the hill climber's explorations cost more than they found there
        # (benchmarks/replay.py). Remote reads wait on the network: threads waiting cost no
        # CPU, so start at the fetch pool's width (more for one request per record batch)
        # and let the climber move (benchmarks/remote.py).
        reads = options.count_or_none(options.num_parallel_reads)
        cores = os.cpu_count() or 1
        floor = min(cores, 16)
        local = storage.is_local(snapshot.fs)
        wide = 4 * FETCH_STREAMS if readers.ranged else 2 * FETCH_STREAMS
        tuner = ParallelismTuner(
            start=reads or (floor if local else wide if readers.ranged else FETCH_STREAMS),
            low=reads or floor,
            high=reads or (4 * floor if local else wide),
            fixed=reads is not None or local,
        )
        self._stats = Stats()
        self._stats.window_rows = EpochPlan(self.blocks, self.plan_options, 0).window_rows
        self._context = RunContext(
            blocks=self.blocks,
            plan_options=self.plan_options,
            schema=schema,
            columns=tuple(self.columns),
            readers=readers,
            tuner=tuner,
            prefetch=prefetch,
            stats=self._stats,
            windows=WindowPool(
                schema,
                self.columns,
                rows=self._stats.window_rows,
            ),
            map=options.map,
            map_takes_rng=options.map_takes_rng,
            map_threads=cores,
            bytes_per_row=bytes_per_row,
            trace=trace,
            placement=Placement.of(schema, self.columns),
        )
        self._epoch = 0
        self._batch = 0
        self._pass_end: int | None = None
        self._run: Run | None = None

    @property
    def reads_by_range(self) -> bool:
        """Whether shards are read one record batch at a time (a remote snapshot whose
        shards do not fit the memory budget) rather than whole."""
        return bool(self._context.readers.ranged)

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
            "first_window_rows": o.first_window_rows,
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
        s.parallel_reads, s.prefetch = self._context.tuner.current, self._context.prefetch.current
        if self._run is not None:
            s.consumer_wait = self._run.buffer.consumer_wait + self._run.wait_before
        out = s.to_dict()
        out["bytes_read"] = self._context.readers.bytes_read
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
        run = Run(self._context, self._epoch, self._batch, self._pass_end)
        self._run = run
        if not self._stats.started:
            self._stats.started = time.perf_counter()
        s = self._stats
        try:
            while True:
                waited = time.perf_counter()
                try:
                    group = run.buffer.get()
                except Closed:
                    break
                if self.trace is not None:
                    self.trace.add("wait for batch", waited, time.perf_counter(), batch=group[0][1])
                for epoch, index, batch, nbytes in group:
                    per_epoch = run.batches_in(epoch)
                    self._epoch, self._batch = (
                        (epoch + 1, 0) if index + 1 >= per_epoch else (epoch, index + 1)
                    )
                    s.batches += 1
                    s.records += len(next(iter(batch.values())))
                    s.bytes += nbytes
                    yield batch
            if self._pass_end is not None and self._epoch >= self._pass_end:
                self._pass_end = None
        finally:
            self._stats.consumer_wait = run.buffer.consumer_wait + run.wait_before
            run.close()
            if self._run is run:  # a newer pass may have started since; leave its run alone
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

    def to_tf(self, features: str | list[str] | None = None, label: str | None = None) -> Any:
        """A ``tf.data.Dataset`` of ``x`` or ``(x, label)`` batches; see readers/tf.py.

        ``x`` is the tensor of ``features`` (a column name) or a dict (a list of names, or
        None: every column but the label). Each pass yields ``len(self)`` batches, and the
        dataset keeps ``state_dict``/``load_state_dict``/``set_epoch``/``stats``/``close``.
        """
        from .tf import to_dataset

        return to_dataset(self, features=features, label=label)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        run = getattr(self, "_run", None)
        if run is not None:
            run.close()
