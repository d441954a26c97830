"""The timed runs of ``benchmarks/remote.py``: a loader's epochs, and the readers it is
compared with (one request at a time, whole-shard GETs, range reads per record batch).

Each run also counts what ``slow://`` served while it ran (``benchmarks/slowfs.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import _common
import numpy as np
import pyarrow as pa
import slowfs  # registers slow://

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.readers import fetch, shard

BATCH_SIZE = 256
BATCH_THREADS = 8  # threads of the per-record-batch range reader


def shard_paths(s: snap.Snapshot) -> list[str]:
    """Protocol-less paths of the shards (local paths: slow:// serves them unchanged)."""
    return [storage.join(s.root, e.path) for e in s.shards]


@dataclass
class Run:
    """One timed epoch (or pass) of one configuration."""

    config: str
    repeat: int
    seconds: float
    cpu_seconds: float
    bytes: int  # uncompressed column bytes delivered
    records: int
    downloaded: int = 0  # bytes slow:// served during the epoch
    requests: int = 0  # requests slow:// served during the epoch
    first_batch: float | None = None  # seconds from the start of the epoch to its 1st batch
    warm_gbps: float = 0.0  # the page-cache re-warming read before the job
    stats: dict[str, Any] | None = None  # loader.stats() after the epoch

    @property
    def gbps(self) -> float:
        return _common.rate_gbps(self.bytes, self.seconds)


class Meter(_common.Stopwatch):
    """Wall time, CPU time and slow:// traffic of one timed stretch."""

    def __enter__(self) -> Meter:
        self.net = slowfs.stats()
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        net = slowfs.stats()
        self.downloaded = net["bytes"] - self.net["bytes"]
        self.requests = net["requests"] - self.net["requests"]

    def run(self, config: str, repeat: int, nbytes: int, records: int, **extra: Any) -> Run:
        return Run(
            config=config,
            repeat=repeat,
            seconds=self.seconds,
            cpu_seconds=self.cpu,
            bytes=nbytes,
            records=records,
            downloaded=self.downloaded,
            requests=self.requests,
            **extra,
        )


def forget_verified_local() -> None:
    """Make the next local loader checksum its shards again, as a remote one always does.

    snap remembers, per process, the local shards it has verified (by path, size and mtime);
    without this only the first repeat's local 1st epoch would include the crc32c pass.
    """
    cache = getattr(shard, "_verified_local", None)
    if isinstance(cache, set):
        cache.clear()


def loader_epochs(
    s: snap.Snapshot,
    configs: tuple[str, ...],
    repeat: int,
    max_bytes: float | None = None,
    **options: Any,
) -> list[Run]:
    """One loader, one timed epoch per config (the 2nd continues with the same loader).

    ``max_bytes``: shrink the loader's in-memory budget of fetched shards (``ShardReaders``,
    1 GiB, no option) to this fraction of the snapshot's bytes: a snapshot that many times
    larger than the budget, without writing one.
    """
    runs = []
    saved_budget = shard.MEMORY_BUDGET
    if max_bytes is not None:  # over the budget the loader reads record batches by range
        shard.MEMORY_BUDGET = int(max_bytes * s.manifest.bytes)
    try:
        loader = s.loader(BATCH_SIZE, shuffle=True, **options)
    finally:
        shard.MEMORY_BUDGET = saved_budget
    with loader:
        for config in configs:
            nbytes = records = 0
            first = None
            with Meter() as m:
                for batch in loader:
                    if first is None:
                        first = time.perf_counter() - m.t0
                    nbytes += _common.batch_bytes(batch)
                    records += len(batch["label"])
            stats = loader.stats()
            runs.append(m.run(config, repeat, nbytes, records, first_batch=first, stats=stats))
    return runs


@contextlib.contextmanager
def shared_fetcher(fetcher: fetch.Fetcher) -> Iterator[None]:
    """Make ``fetcher`` the process's shared one while the block runs.

    The loader has no option for its fetcher; ``ShardReaders`` uses ``shared_fetcher()``.
    """
    saved = fetch._shared, getattr(fetch, "_shared_pid", None)
    with fetch._shared_lock:
        fetch._shared = fetcher
        if saved[1] is not None:
            fetch._shared_pid = os.getpid()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        fetcher.close()
        with fetch._shared_lock:
            fetch._shared = saved[0]
            if saved[1] is not None:
                fetch._shared_pid = saved[1]  # type: ignore[attr-defined]


def sequential(fs: Any, paths: list[str]) -> tuple[int, int]:
    """Every shard with one whole-file request after the other, then decoded."""
    nbytes = rows = 0
    for path in paths:
        b, r = _common.decode_file(pa.ipc.open_file(pa.py_buffer(fs.cat_file(path))))
        nbytes, rows = nbytes + b, rows + r
    return nbytes, rows


def per_batch(fs: Any, s: snap.Snapshot, seed: int) -> tuple[int, int]:
    """Every record batch read with its own range requests, shuffled, by BATCH_THREADS threads.

    Each shard is opened once (a HEAD and the footer reads) by the first thread that needs it;
    ``cache_type="none"`` makes every read of the Arrow reader one request.
    """
    paths = shard_paths(s)
    order = [(i, b) for i, e in enumerate(s.shards) for b in range(e.record_batches)]
    perm = np.random.default_rng(seed).permutation(len(order))
    readers: dict[int, pa.ipc.RecordBatchFileReader] = {}
    gates = [threading.Lock() for _ in paths]
    files: list[Any] = []

    def reader(i: int) -> pa.ipc.RecordBatchFileReader:
        with gates[i]:
            if i not in readers:
                f = fs.open(paths[i], "rb", cache_type="none")
                files.append(f)
                readers[i] = pa.ipc.open_file(pa.PythonFile(f, mode="r"))
            return readers[i]

    def work(k: int) -> tuple[int, int]:
        i, b = order[k]
        return _common.decode_batch(reader(i).get_batch(b))

    try:
        with ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="bench-batch") as pool:
            parts = list(pool.map(work, perm.tolist()))
    finally:
        for f in files:
            f.close()
    return sum(p[0] for p in parts), sum(p[1] for p in parts)
