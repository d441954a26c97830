"""Benchmark: replay from remote storage, with injected latency, against local disk.

The remote store is ``slow://`` (``benchmarks/slowfs.py``): the same local files, but every
request waits a time to first byte (``--ttfb-ms``, 50) and then transfers at a per-stream
bandwidth (``--mbps``, 100 MB/s); concurrent requests are independent streams, like sockets
to an object store that is never the bottleneck. The page cache is warm under it, so what is
measured is what the reader does about latency and bandwidth, not the disk. The local read
behind each request (a copy from the page cache into a fresh ``bytes``, as a socket read
would make) happens within the modelled time, and its CPU time counts.

A zstd snapshot of the image-like records of ``benchmarks/replay.py`` (3x64x64 uint8 +
int64 label, ~1.2x), ``--size-gb`` uncompressed (1; ``--quick`` 0.2) in 64 MiB shards, is
written once into ``--data-dir`` and reused. Every configuration replays it with shuffle=True,
batch_size 256:

  * local: ``snap.open(local path).loader()``; its 2nd epoch (the same loader's second pass,
    shards already verified, window arrays allocated) is the baseline of the ratios;
  * slow:// loader, default settings: every remote shard is fetched whole as parallel 8 MiB
    range requests through a shared pool of 16 streams (``snapshot_cli/readers/fetch.py``);
    1st and 2nd epoch (the loader keeps up to 1 GiB of fetched shards in memory, so a small
    snapshot's 2nd epoch may download nothing: the "MB down" column says);
  * slow:// loader, num_parallel_reads=16 (the fetcher's stream count), 1st epoch: what the
    "auto" setting leaves (on remote storage it starts at the core count, here 2, and may
    climb to 4x that, but a 1st epoch has only a few windows to climb in);
  * slow:// one request at a time: every shard read with one whole-file ``cat_file`` after the
    other, decoded by pyarrow, no parallelism: what a naive reader gets;
  * slow:// whole shard per request: the loader with a fetcher whose chunk is 1 TiB, so each
    shard is one GET on one stream (1st epoch): why ranges help;
  * slow:// range reads per record batch: each shard opened with ``fs.open(cache_type="none")``
    in a ``pa.PythonFile``, every record batch read in a shuffled order by 8 threads (decode
    only, no shuffle window): the alternative to whole-shard fetches;
  * slow:// loader with ``cache_dir=`` (a fresh directory): 1st epoch (downloads and fills
    the cache) and 2nd epoch (reads the cache);
  * slow:// loader whose in-memory shard budget is half the snapshot (``ShardReaders`` keeps
    at most 1 GiB of fetched shards; cut here to half the snapshot's bytes, as a snapshot over
    2 GiB on disk would be), no cache_dir, 1st epoch: the loader then reads one range per
    record batch; the bytes downloaded against the snapshot's;
  * sweep: ``--sweep-procs`` (8) concurrent processes, each replaying 2 epochs from slow://
    with the same fresh ``cache_dir``; the bytes slow:// served (summed over the processes'
    counters, ``SNAP_SLOW_STATS``) against the snapshot's bytes on disk (target: each byte
    once), the wall time and the loaders' cache fills and hits.

Rates are GB/s (1e9 bytes) of uncompressed column data delivered per epoch (the sum of the
``nbytes`` of the numpy arrays). Configurations alternate within each repeat (the order
rotates between repeats); the table reports medians. This is a report, not a test: nothing
is asserted.

    python benchmarks/remote.py                      # ~5 minutes (the first time also writes 1 GB)
    python benchmarks/remote.py --quick              # smoke run on 0.2 GB, 1 repeat
    python benchmarks/remote.py --ttfb-ms 20 --mbps 200 --json remote.json
"""

from __future__ import annotations

# Pin native thread pools to one thread before numpy is imported (see create.py).
import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import contextlib
import functools
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the sibling modules below, also in the --child processes

import replay  # noqa: E402  (records, page-cache warming, environment line)
import slowfs  # noqa: E402  (registers slow://)

import snapshot_cli as snap  # noqa: E402
from snapshot_cli import storage  # noqa: E402
from snapshot_cli.readers import fetch, shard  # noqa: E402

SCRIPT = os.path.abspath(__file__)
DEFAULT_DATA_DIR = os.path.join(HERE, "out", "remote-data")
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 1.0, 0.2
SHARD_SIZE = 64 << 20
BATCH_SIZE = 256
BATCH_THREADS = 8  # threads of the per-record-batch range reader
SWEEP_PROCS = 8
WHOLE_CHUNK = 1 << 40  # a fetcher chunk larger than any shard: one GET per shard
GB, MB = 1e9, 1e6
TARGET = 0.80  # loader over slow:// >= 0.80 of local (2nd epoch)

LOCAL1 = "local, 1st epoch"
LOCAL2 = "local, 2nd epoch"
SLOW1 = "slow:// loader, 1st epoch"
SLOW2 = "slow:// loader, 2nd epoch"
TUNED = f"slow:// loader reads={fetch.DEFAULT_STREAMS}, 1st epoch"
SEQUENTIAL = "slow:// one request at a time"
WHOLE = "slow:// whole shard per request, 1st"
PER_BATCH = "slow:// range read per record batch"
CACHE1 = "slow:// cache_dir, 1st epoch (fills)"
CACHE2 = "slow:// cache_dir, 2nd epoch (cache)"
BUDGET = "slow:// over budget: ranges, 1st"
BUDGET_FRACTION = 0.5  # the loader's in-memory shard budget, as a fraction of the snapshot
BASELINE = LOCAL2
TARGETS = {SLOW1: TARGET, CACHE2: TARGET}

# Jobs: each run replays (or reads) the snapshot once and times one or two epochs.
JOBS: dict[str, tuple[str, ...]] = {
    "local": (LOCAL1, LOCAL2),
    "loader": (SLOW1, SLOW2),
    "tuned": (TUNED,),
    "sequential": (SEQUENTIAL,),
    "whole": (WHOLE,),
    "batches": (PER_BATCH,),
    "cache": (CACHE1, CACHE2),
    "budget": (BUDGET,),
}
ONCE: tuple[str, ...] = ()  # jobs run once, after the repeats (none now)
CONFIGS = [c for configs in JOBS.values() for c in configs]


# --- the snapshot ---------------------------------------------------------------------------


def ensure_snapshot(data_dir: str, size_gb: float, workers: int) -> snap.Snapshot:
    """replay.py's snapshot of these records (zstd), with 64 MiB shards, cached in data_dir."""
    return replay.ensure_snapshot(data_dir, "zstd", size_gb, False, workers, SHARD_SIZE)


def shard_paths(s: snap.Snapshot) -> list[str]:
    """Protocol-less paths of the shards (local paths: slow:// serves them unchanged)."""
    return [storage.join(s.root, e.path) for e in s.shards]


# --- what is timed --------------------------------------------------------------------------


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
        return self.bytes / GB / max(1e-9, self.seconds)


class Meter:
    """Wall time, CPU time and slow:// traffic of one timed stretch."""

    def __enter__(self) -> Meter:
        self.net = slowfs.stats()
        self.t0, self.c0 = time.perf_counter(), replay.cpu_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.cpu = replay.cpu_time() - self.c0
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
                    nbytes += replay.batch_bytes(batch)
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


def decode(reader: pa.ipc.RecordBatchFileReader, i: int) -> tuple[int, int]:
    """Record batch ``i`` decoded, columns to numpy → (bytes, rows)."""
    batch = reader.get_batch(i)
    image = batch.column("image").storage.flatten().to_numpy()
    label = batch.column("label").to_numpy()
    return image.nbytes + label.nbytes, batch.num_rows


def sequential(fs: Any, paths: list[str]) -> tuple[int, int]:
    """Every shard with one whole-file request after the other, then decoded."""
    nbytes = rows = 0
    for path in paths:
        reader = pa.ipc.open_file(pa.py_buffer(fs.cat_file(path)))
        for i in range(reader.num_record_batches):
            b, r = decode(reader, i)
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
        return decode(reader(i), b)

    try:
        with ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="bench-batch") as pool:
            parts = list(pool.map(work, perm.tolist()))
    finally:
        for f in files:
            f.close()
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def run_job(
    job: str, repeat: int, local: snap.Snapshot, remote: snap.Snapshot, cache_root: str
) -> list[Run]:
    paths = shard_paths(local)
    # Re-warm the page cache under slow:// too: its latency model assumes the bytes are at hand.
    w0 = time.perf_counter()
    warm_bytes, _ = replay.raw_read(paths)
    warm = warm_bytes / GB / max(1e-9, time.perf_counter() - w0)
    gc.collect()
    runs: list[Run]
    if job == "local":
        forget_verified_local()
        runs = loader_epochs(local, JOBS[job], repeat)
    elif job == "loader":
        runs = loader_epochs(remote, JOBS[job], repeat)
    elif job == "tuned":
        runs = loader_epochs(remote, JOBS[job], repeat, num_parallel_reads=fetch.DEFAULT_STREAMS)
    elif job == "whole":
        with shared_fetcher(fetch.Fetcher(chunk=WHOLE_CHUNK)):
            runs = loader_epochs(remote, JOBS[job], repeat)
    elif job == "budget":
        runs = loader_epochs(remote, JOBS[job], repeat, max_bytes=BUDGET_FRACTION)
    elif job == "cache":
        cache_dir = tempfile.mkdtemp(prefix="cache-", dir=cache_root)
        try:
            runs = loader_epochs(remote, JOBS[job], repeat, cache_dir=cache_dir)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    else:
        reads: Callable[[], tuple[int, int]] = (
            functools.partial(sequential, remote.fs, paths)
            if job == "sequential"
            else functools.partial(per_batch, remote.fs, remote, replay.SEED + repeat)
        )
        with Meter() as m:
            nbytes, records = reads()
        runs = [m.run(JOBS[job][0], repeat, nbytes, records)]
    for r in runs:
        r.warm_gbps = warm
    return runs


# --- the sweep: concurrent processes sharing one cache --------------------------------------


def child(url: str, cache_dir: str, epochs: int, seed: int) -> int:
    """In a --child process: replay ``url`` for ``epochs`` epochs; print one JSON line."""
    s = snap.open(url)
    nbytes = records = 0
    t0 = time.perf_counter()
    with s.loader(BATCH_SIZE, shuffle=True, seed=seed, epochs=epochs, cache_dir=cache_dir) as ld:
        for batch in ld:
            nbytes += replay.batch_bytes(batch)
            records += len(batch["label"])
        stats = ld.stats()
    seconds = time.perf_counter() - t0
    print(json.dumps({"bytes": nbytes, "records": records, "seconds": seconds, "stats": stats}))
    slowfs.dump_stats()  # also at exit; written here so a crash in teardown cannot lose it
    slowfs.reset_stats()
    return 0


@dataclass
class Sweep:
    procs: int
    epochs: int
    wall_seconds: float
    delivered_bytes: int  # uncompressed, all processes, all epochs
    served_bytes: int  # every byte slow:// served (shards, manifests, footers)
    served_shard_bytes: int
    requests: int
    file_bytes: int  # the snapshot's shards on disk
    max_per_shard: float  # the most any one shard was downloaded, in copies
    fills: int
    hits: int
    fill_bytes: int
    child_seconds: list[float] = field(default_factory=list)

    @property
    def factor(self) -> float:
        return self.served_shard_bytes / max(1, self.file_bytes)

    @property
    def gbps(self) -> float:
        return self.delivered_bytes / GB / max(1e-9, self.wall_seconds)


def sweep(remote: snap.Snapshot, local: snap.Snapshot, args: argparse.Namespace) -> Sweep:
    replay.raw_read(shard_paths(local))
    work = tempfile.mkdtemp(prefix="sweep-", dir=args.data_dir)
    stats_file = os.path.join(work, "slow-stats.jsonl")
    cache_dir = os.path.join(work, "cache")
    env = {**os.environ, slowfs.ENV_STATS: stats_file}
    try:
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, SCRIPT, "--child", remote.url, "--cache-dir", cache_dir]
                + ["--epochs", "2", "--seed", str(k)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for k in range(args.sweep_procs)
        ]
        outs = [p.communicate() for p in procs]
        wall = time.perf_counter() - t0
        for p, (_, err) in zip(procs, outs, strict=True):
            if p.returncode != 0:
                raise RuntimeError(f"a sweep process failed ({p.returncode}):\n{err}")
        docs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
        lines = slowfs.read_stats(stats_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = {storage.join(remote.root, e.path): e.bytes for e in remote.shards}
    per_path: dict[str, int] = {}
    for line in lines:
        for path, n in line["paths"].items():
            per_path[path] = per_path.get(path, 0) + n
    caches = [d["stats"].get("cache", {}) for d in docs]
    return Sweep(
        procs=args.sweep_procs,
        epochs=2,
        wall_seconds=wall,
        delivered_bytes=sum(d["bytes"] for d in docs),
        served_bytes=sum(line["bytes"] for line in lines),
        served_shard_bytes=sum(n for p, n in per_path.items() if p in sizes),
        requests=sum(line["requests"] for line in lines),
        file_bytes=sum(sizes.values()),
        max_per_shard=max((per_path.get(p, 0) / n for p, n in sizes.items()), default=0.0),
        fills=sum(c.get("fills", 0) for c in caches),
        hits=sum(c.get("hits", 0) for c in caches),
        fill_bytes=sum(c.get("fill_bytes", 0) for c in caches),
        child_seconds=[round(d["seconds"], 2) for d in docs],
    )


# --- summary and table ----------------------------------------------------------------------


@dataclass
class Summary:
    records: int
    shards: int
    record_batches: int
    file_bytes: int
    uncompressed_bytes: int
    median_gbps: dict[str, float] = field(default_factory=dict)
    median_cpu_seconds: dict[str, float] = field(default_factory=dict)
    median_downloaded: dict[str, float] = field(default_factory=dict)
    median_requests: dict[str, float] = field(default_factory=dict)
    median_first_batch: dict[str, float] = field(default_factory=dict)
    fraction: dict[str, float] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)


def summarise(s: snap.Snapshot, runs: list[Run], configs: list[str]) -> Summary:
    m = s.manifest
    out = Summary(m.num_records, m.num_shards, m.num_record_batches, m.bytes, m.uncompressed_bytes)
    for config in configs:
        mine = [r for r in runs if r.config == config]
        if not mine:
            continue
        out.median_gbps[config] = statistics.median(r.gbps for r in mine)
        out.median_cpu_seconds[config] = statistics.median(r.cpu_seconds for r in mine)
        out.median_downloaded[config] = statistics.median(r.downloaded for r in mine)
        out.median_requests[config] = statistics.median(r.requests for r in mine)
        firsts = [r.first_batch for r in mine if r.first_batch is not None]
        if firsts:
            out.median_first_batch[config] = statistics.median(firsts)
        if mine[-1].stats is not None:
            out.settings[config] = mine[-1].stats["settings"]
    base = out.median_gbps.get(BASELINE)
    if base:
        out.fraction = {c: v / base for c, v in out.median_gbps.items()}
    return out


def verdict(ok: bool, text: str) -> str:
    return f"{text} {'ok' if ok else 'MISSED'}"


def verdicts(summary: Summary, result: Sweep | None) -> dict[str, dict[str, Any]]:
    """The targets: loader over slow:// >= 0.80 of local; the sweep downloads each byte once."""
    out: dict[str, dict[str, Any]] = {}
    for config, target in TARGETS.items():
        if config in summary.fraction:
            value = summary.fraction[config]
            out[config] = {"value": value, "target": f">= {target:.2f}", "ok": value >= target}
    if result is not None:
        ok = abs(result.factor - 1.0) < 1e-9 and result.max_per_shard <= 1.0 + 1e-9
        out["sweep: each byte downloaded once"] = {
            "value": result.factor,
            "target": "== 1.00x",
            "ok": ok,
        }
    return out


def print_table(
    summary: Summary, runs: list[Run], result: Sweep | None, args: argparse.Namespace
) -> None:
    print()
    print(
        f"snap remote replay benchmark: {args.size_gb:g} GB uncompressed, zstd, "
        f"{summary.shards} shards of <= {SHARD_SIZE >> 20} MiB, shuffle=True, batch_size "
        f"{BATCH_SIZE}, median of {args.repeats};\n"
        f"slow:// = the same files with {args.ttfb_ms:g} ms to first byte and {args.mbps:g} MB/s "
        f"per stream per request; GB/s = 1e9 bytes/s of uncompressed column data delivered"
    )
    header = (
        f"{'configuration':<38} {'GB/s':>6} {'x local':>7} {'cpu s':>6} {'MB down':>8} "
        f"{'requests':>8} {'1st batch':>9}  {'target':<14} {'runs (GB/s)':<20} note"
    )
    print(header)
    print("-" * (len(header) + 30))
    notes = {
        LOCAL1: "includes the crc32c pass over every shard",
        LOCAL2: "the baseline",
        TUNED: "hand-tuned: one read thread per fetch stream",
        SEQUENTIAL: "one whole-shard GET at a time, then pyarrow decode; no parallelism",
        WHOLE: "fetcher chunk 1 TiB: one GET (one stream) per shard",
        PER_BATCH: f"{BATCH_THREADS} threads, fs.open(cache_type='none') + PythonFile; decode only",
        CACHE1: "downloads, writes, fsyncs and checksums the cache entries",
        CACHE2: "reads the local cache entries",
        BUDGET: "in-memory shard budget cut to half the snapshot (as for a snapshot "
        "over 2 GiB on disk); MB down / on disk = "
        f"{summary.median_downloaded.get(BUDGET, 0) / max(1, summary.file_bytes):.1f}x",
    }
    for config in CONFIGS:
        if config not in summary.median_gbps:
            continue
        frac = summary.fraction.get(config)
        target = ""
        if config in TARGETS and frac is not None:
            target = verdict(frac >= TARGETS[config], f">= {TARGETS[config]:.2f}")
        rates = " ".join(f"{r.gbps:.2f}" for r in runs if r.config == config)
        note = notes.get(config, "")
        if config in summary.settings:
            st = summary.settings[config]
            auto = f"reads={st['parallel_reads']} prefetch={st['prefetch']}"
            note = f"{note}; {auto}" if note else auto
        if config == SLOW2 and summary.median_downloaded[config] == 0:
            note = "no download: the loader still holds the shards in memory (<= 1 GiB); " + note
        frac_text = f"{frac:7.2f}" if frac is not None else f"{'':>7}"
        first = summary.median_first_batch.get(config)
        first_text = f"{first:8.2f}s" if first is not None else f"{'':>9}"
        print(
            f"{config:<38} {summary.median_gbps[config]:6.2f} {frac_text} "
            f"{summary.median_cpu_seconds[config]:6.2f} "
            f"{summary.median_downloaded[config] / MB:8.0f} "
            f"{summary.median_requests[config]:8.0f} {first_text}  {target:<14} {rates:<20} {note}"
        )
    ratio = summary.uncompressed_bytes / max(1, summary.file_bytes)
    print(
        f"{summary.records} records, {summary.shards} shards, {summary.record_batches} record "
        f"batches, {summary.file_bytes / GB:.3f} GB on disk (ratio {ratio:.2f}); fetcher: "
        f"{fetch.DEFAULT_STREAMS} streams x {fetch.DEFAULT_CHUNK >> 20} MiB ranges"
    )
    print(
        "MB down, requests: what slow:// served during the epoch; 1st batch: seconds from the "
        "epoch's start to its first batch (a shuffled window mixes record batches of nearly "
        "every shard, so the first one waits for nearly every shard)"
    )
    checks = verdicts(summary, result)
    if result is not None:
        r = result
        ok = checks["sweep: each byte downloaded once"]["ok"]
        print()
        print(
            f"sweep: {r.procs} processes x {r.epochs} epochs from slow://, one fresh cache_dir: "
            f"{r.wall_seconds:.1f} s wall, {r.gbps:.2f} GB/s delivered in all "
            f"(per process {', '.join(f'{x:.1f}' for x in r.child_seconds)} s)"
        )
        print(
            f"  shard bytes served {r.served_shard_bytes / MB:.1f} MB / on disk "
            f"{r.file_bytes / MB:.1f} MB = {r.factor:.3f}x (most-fetched shard "
            f"{r.max_per_shard:.2f}x)  {verdict(ok, 'target: each byte once')}"
        )
        print(
            f"  all bytes served {r.served_bytes / MB:.1f} MB in {r.requests} requests "
            f"(shards, manifests, listings); cache fills {r.fills} ({r.fill_bytes / MB:.1f} MB), "
            f"hits {r.hits} (summed over the processes' loader.stats()['cache'])"
        )
    print()
    print("verdicts (loader over slow:// vs local 2nd epoch; sweep bytes vs bytes on disk):")
    for name, v in checks.items():
        print(f"  {name:<44} {v['value']:6.3f}  {verdict(v['ok'], v['target'])}")


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size-gb", type=float, default=None, help=f"uncompressed GB ({DEFAULT_SIZE_GB:g})"
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where the snapshot is cached")
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (5)")
    p.add_argument(
        "--jobs",
        default=",".join(JOBS),
        help=f"comma-separated subset of {','.join(JOBS)} (default: all)",
    )
    p.add_argument(
        "--ttfb-ms",
        type=float,
        default=slowfs.DEFAULT_TTFB_MS,
        help="slow:// time to first byte, ms (50)",
    )
    p.add_argument(
        "--mbps", type=float, default=slowfs.DEFAULT_MBPS, help="slow:// MB/s per stream (100)"
    )
    p.add_argument(
        "--sweep-procs", type=int, default=SWEEP_PROCS, help="sweep processes (8; 0: no sweep)"
    )
    p.add_argument("--workers", type=int, default=2, help="processes writing the snapshot (2)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the numbers here")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_SIZE_GB} GB, 1 repeat")
    p.add_argument("--child", metavar="URL", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.size_gb is None:
        args.size_gb = QUICK_SIZE_GB if args.quick else DEFAULT_SIZE_GB
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    args.jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if not args.jobs or any(j not in JOBS for j in args.jobs):
        p.error(f"--jobs must be a comma-separated subset of {','.join(JOBS)}")
    if args.size_gb <= 0 or args.repeats < 1 or args.sweep_procs < 0 or args.workers < 0:
        p.error("need --size-gb > 0, --repeats >= 1, --sweep-procs >= 0, --workers >= 0")
    if args.ttfb_ms < 0 or args.mbps < 0:
        p.error("need --ttfb-ms >= 0 and --mbps >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args.child, args.cache_dir, args.epochs, args.seed)
    # Before any slow:// filesystem exists; the sweep's processes inherit them.
    os.environ[slowfs.ENV_TTFB] = repr(args.ttfb_ms)
    os.environ[slowfs.ENV_MBPS] = repr(args.mbps)
    os.environ.pop(slowfs.ENV_ROOT, None)
    os.environ.pop(slowfs.ENV_STATS, None)
    env = replay.environment()
    load_start = os.getloadavg()
    print(f"{replay.describe(env)}; load average {load_start[0]:.2f} {load_start[1]:.2f} at start")
    local = ensure_snapshot(args.data_dir, args.size_gb, args.workers)
    remote = snap.open(slowfs.url_of(local.root))
    if storage.is_local(remote.fs):
        raise SystemExit("slow:// must not count as local storage")
    cache_root = os.path.join(args.data_dir, "caches")
    os.makedirs(cache_root, exist_ok=True)
    runs: list[Run] = []
    jobs = [j for j in args.jobs if j not in ONCE]
    schedule = []
    for rep in range(args.repeats):
        k = (rep * 2) % max(1, len(jobs))
        # Alternate, rotating the order between repeats.
        schedule += [(rep, job) for job in jobs[k:] + jobs[:k]]
    schedule += [(0, job) for job in args.jobs if job in ONCE]
    for rep, job in schedule:
        for run in run_job(job, rep, local, remote, cache_root):
            runs.append(run)
            print(
                f"  {'once' if job in ONCE else f'repeat {rep + 1}/{args.repeats}'} "
                f"{run.config:<38} {run.gbps:6.2f} GB/s "
                f"{run.seconds:6.2f} s (cpu {run.cpu_seconds:.2f} s, "
                f"{run.downloaded / MB:.0f} MB in {run.requests} requests, "
                f"re-warm {run.warm_gbps:.1f} GB/s)",
                file=sys.stderr,
                flush=True,
            )
    result = sweep(remote, local, args) if args.sweep_procs else None
    load_end = os.getloadavg()
    summary = summarise(local, runs, CONFIGS)
    print_table(summary, runs, result, args)
    print()
    print(
        f"{replay.describe(env)}; 1-min load average {load_start[0]:.2f} at start, "
        f"{load_end[0]:.2f} at end"
    )
    cold = [r for r in runs if r.warm_gbps < replay.COLD_GBPS]
    print(
        f"page cache re-warmed before every job; {len(cold)} of {len(runs)} runs followed a "
        f"re-warming read below {replay.COLD_GBPS:g} GB/s"
    )
    if args.quick:
        print("(--quick: a smoke run; start-up costs weigh more, so take the targets lightly)")
    if args.json:
        with open(args.json, "w") as f:
            doc = {
                "summary": asdict(summary),
                "runs": [{**asdict(r), "gbps": r.gbps} for r in runs],
                "sweep": None if result is None else {**asdict(result), "factor": result.factor},
                "verdicts": verdicts(summary, result),
                "environment": {
                    **env,
                    "load_average_start": load_start,
                    "load_average_end": load_end,
                    "size_gb": args.size_gb,
                    "repeats": args.repeats,
                    "batch_size": BATCH_SIZE,
                    "ttfb_ms": args.ttfb_ms,
                    "mbps_per_stream": args.mbps,
                    "fetch_streams": fetch.DEFAULT_STREAMS,
                    "fetch_chunk": fetch.DEFAULT_CHUNK,
                },
            }
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
