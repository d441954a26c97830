"""Benchmark: replay from remote storage, with injected latency, against local disk.

The remote store is ``slow://`` (``benchmarks/slowfs.py``): the same local files, but every
request waits a time to first byte (``--ttfb-ms``, 50) and then transfers at a per-stream
bandwidth (``--mbps``, 100 MB/s); concurrent requests are independent streams, like sockets
to an object store that is never the bottleneck. The page cache is warm under it, so what is
measured is what the reader does about latency and bandwidth, not the disk. The local read
behind each request (a copy from the page cache into a fresh ``bytes``, as a socket read
would make) happens within the modelled time, and its CPU time counts.

A zstd snapshot of the replay benchmark's records (``benchmarks/_common.py``: 3x64x64 uint8 +
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

import argparse
import functools
import gc
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The sibling modules below, also in the --child processes.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # before numpy: pins native thread pools to one thread
import slowfs  # registers slow://
from remote_runs import (
    BATCH_SIZE,
    BATCH_THREADS,
    Meter,
    Run,
    forget_verified_local,
    loader_epochs,
    per_batch,
    sequential,
    shard_paths,
    shared_fetcher,
)
from remote_sweep import Sweep, child, sweep

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.readers import fetch

SCRIPT = os.path.abspath(__file__)
DEFAULT_DATA_DIR = _common.out_dir("remote-data")
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 1.0, 0.2
SHARD_SIZE = 64 << 20
SWEEP_PROCS = 8
WHOLE_CHUNK = 1 << 40  # a fetcher chunk larger than any shard: one GET per shard
GB, MB = _common.GB, 1e6
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


def run_job(
    job: str, repeat: int, local: snap.Snapshot, remote: snap.Snapshot, cache_root: str
) -> list[Run]:
    paths = shard_paths(local)
    # Re-warm the page cache under slow:// too: its latency model assumes the bytes are at hand.
    warm = _common.rewarm(paths)
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
            else functools.partial(per_batch, remote.fs, remote, _common.SEED + repeat)
        )
        with Meter() as m:
            nbytes, records = reads()
        runs = [m.run(JOBS[job][0], repeat, nbytes, records)]
    for r in runs:
        r.warm_gbps = warm
    return runs


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
    _common.print_header(header)
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
            target = _common.verdict(frac >= TARGETS[config], f">= {TARGETS[config]:.2f}")
        rates = _common.runs_text(r.gbps for r in runs if r.config == config)
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
            f"{r.max_per_shard:.2f}x)  {_common.verdict(ok, 'target: each byte once')}"
        )
        print(
            f"  all bytes served {r.served_bytes / MB:.1f} MB in {r.requests} requests "
            f"(shards, manifests, listings); cache fills {r.fills} ({r.fill_bytes / MB:.1f} MB), "
            f"hits {r.hits} (summed over the processes' loader.stats()['cache'])"
        )
    print()
    print("verdicts (loader over slow:// vs local 2nd epoch; sweep bytes vs bytes on disk):")
    for name, v in checks.items():
        print(f"  {name:<44} {v['value']:6.3f}  {_common.verdict(v['ok'], v['target'])}")


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _common.parser(__doc__)
    p.add_argument(
        "--size-gb", type=float, default=None, help=f"uncompressed GB ({DEFAULT_SIZE_GB:g})"
    )
    _common.add_data_dir_option(p, DEFAULT_DATA_DIR)
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
    _common.add_json_option(p)
    _common.add_quick_option(p, f"{QUICK_SIZE_GB} GB")
    p.add_argument("--child", metavar="URL", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    _common.resolve_quick(args, "size_gb", DEFAULT_SIZE_GB, QUICK_SIZE_GB, repeats=5)
    args.jobs = _common.subset(p, "--jobs", args.jobs, list(JOBS))
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
    env = _common.environment()
    load_start = os.getloadavg()
    print(_common.load_at_start(_common.describe(env), load_start))
    # replay.py's records (zstd), with 64 MiB shards, cached in --data-dir.
    local = _common.ensure_snapshot(
        args.data_dir, "zstd", args.size_gb, False, args.workers, SHARD_SIZE
    )
    remote = snap.open(slowfs.url_of(local.root))
    if storage.is_local(remote.fs):
        raise SystemExit("slow:// must not count as local storage")
    cache_root = os.path.join(args.data_dir, "caches")
    os.makedirs(cache_root, exist_ok=True)
    runs: list[Run] = []
    jobs = [j for j in args.jobs if j not in ONCE]
    schedule = []
    for rep in range(args.repeats):
        schedule += [(rep, job) for job in _common.rotated(jobs, rep * 2)]
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
    result = (
        sweep(SCRIPT, remote, local, args.sweep_procs, args.data_dir) if args.sweep_procs else None
    )
    load_end = os.getloadavg()
    summary = summarise(local, runs, CONFIGS)
    print_table(summary, runs, result, args)
    print()
    print(_common.load_summary(_common.describe(env), load_start[0], load_end[0]))
    cold = [r for r in runs if r.warm_gbps < _common.COLD_GBPS]
    print(
        f"page cache re-warmed before every job; {len(cold)} of {len(runs)} runs followed a "
        f"re-warming read below {_common.COLD_GBPS:g} GB/s"
    )
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        doc = {
            "summary": asdict(summary),
            "runs": [{**asdict(r), "gbps": r.gbps} for r in runs],
            "sweep": None if result is None else {**asdict(result), "factor": result.factor},
            "verdicts": verdicts(summary, result),
            "environment": {
                **_common.run_environment(env, (load_start, load_end), args, BATCH_SIZE),
                "ttfb_ms": args.ttfb_ms,
                "mbps_per_stream": args.mbps,
                "fetch_streams": fetch.DEFAULT_STREAMS,
                "fetch_chunk": fetch.DEFAULT_CHUNK,
            },
        }
        _common.write_json(args.json, doc)
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
