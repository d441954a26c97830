"""Benchmark: shuffled replay of small records, where the cost per batch is the limit (issue 16).

For small records the loader's cost per batch, not per byte, decides its speed. A snapshot of
``--rows`` records of 48 bytes (``id`` int64, the record's global index; ``x`` float32[8], a
fixed-shape array per record: a smooth wave plus a little noise; ``label`` int64) is written
once per codec (``snap.create`` defaults otherwise) into ``--data-dir`` and reused by later
runs. With the page cache warm (every shard file is read again right before each timed run),
every codec gets:

  * decode + one copy (the baseline): every record batch of every shard decoded by ``pa.ipc``
    from a memory map, 2 threads on different shards, no shuffle, each column converted to
    numpy and copied once (``x`` to an (n, 8) array): the least a loader that hands out its
    own batches must do;
  * snap loader, ``shuffle=True``, default ("auto") settings, batch_size 256 and 4,096: the
    loader's second epoch, timed alone after an untimed first one (every epoch of a training
    run after the first). Targets: loader / baseline >= 0.50 at batch 256, >= 0.80 at 4,096.

Rates are records per second. Configurations alternate within each repeat (the order rotates
between repeats); the table reports medians and the raw runs. This is a report, not a test:
nothing is asserted.

    python benchmarks/small_records.py           # ~1 minute (the first time also ~8 s to write
                                                 # 3 snapshots of 4M records, 0.5 GB in all)
    python benchmarks/small_records.py --quick   # smoke run on 400,000 records, 1 repeat
    python benchmarks/small_records.py --codecs zstd --repeats 5 --json small_records.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Before numpy: importing _common pins native thread pools to one thread (the loader and the
# baseline choose their own threads; a BLAS pool would only add noise).
import _common  # the benchmarks' shared scaffolding
import numpy as np
import pyarrow as pa

import snapshot_cli as snap
from snapshot_cli.readers import procs
from snapshot_cli.readers.options import LoaderOptions

CODECS = ("zstd", "lz4", "none")
DEFAULT_ROWS, QUICK_ROWS = 4_000_000, 400_000
DEFAULT_DATA_DIR = _common.out_dir("small-records")

# The records. Bump DATA_VERSION whenever make_small changes what it writes: a cached
# snapshot is reused when its params (which include it) match.
DATA_VERSION = 1
SEED = 1234
FEATURES = 8
ROW_BYTES = 8 + 4 * FEATURES + 8  # id + x + label
CHUNK_ROWS = 50_000  # records per call of make_small (one input)

BASE = "decode + one copy"
BATCH_SIZES = (256, 4096)
TARGETS = {256: 0.50, 4096: 0.80}  # loader / BASE, records per second


PROCESSES = (0, 2)  # read threads decode (the default), or 2 decode processes


def loader_config(batch_size: int, processes: int = 0) -> str:
    extra = f", processes={processes}" if processes else ""
    return f"snap shuffle=True, batch {batch_size}, 2nd epoch{extra}"


LOADERS = {loader_config(b, p): (b, p) for b in BATCH_SIZES for p in PROCESSES}
CONFIGS = [BASE, *LOADERS]
TARGET_OF = {c: TARGETS[b] for c, (b, _) in LOADERS.items()}


# --- the records (imported by snap's worker processes, by file path) ------------------------


def make_small(item: list[int], seed: int, version: int) -> Iterator[snap.Batch]:
    """Input ``[index, rows]`` → one batch of ``rows`` deterministic small records.

    id: the global record index (chunk ``index`` starts at ``index * CHUNK_ROWS``). x: float32
    [8], ``a sin(f k + phase)`` over k = 0..7 with per-record a, f, phase, plus noise of 0.01.
    label: int64 in [0, 1000).
    """
    del version  # part of the params only, so that changing the data changes the fingerprint
    index, rows = item
    rng = np.random.default_rng([seed, index])
    start = index * CHUNK_ROWS
    k = np.arange(FEATURES, dtype=np.float32)
    amplitude = rng.uniform(0.5, 2.0, size=(rows, 1)).astype(np.float32)
    frequency = rng.uniform(0.1, 0.6, size=(rows, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=(rows, 1)).astype(np.float32)
    x = amplitude * np.sin(frequency * k + phase)
    x += rng.normal(0, 0.01, size=(rows, FEATURES)).astype(np.float32)
    yield snap.Batch(
        id=np.arange(start, start + rows, dtype=np.int64),
        x=x.astype(np.float32, copy=False),
        label=rng.integers(0, 1000, size=rows, dtype=np.int64),
    )


def chunk_items(records: int) -> list[list[int]]:
    """The inputs: ``[index, rows]`` per chunk of CHUNK_ROWS records."""
    return [[i, min(CHUNK_ROWS, records - a)] for i, a in enumerate(range(0, records, CHUNK_ROWS))]


def _matches(m: snap.Manifest, params: dict[str, Any], codec: str, records: int) -> bool:
    return (
        m.pipeline.get("function") == make_small.__name__
        and m.pipeline.get("params") == params
        and m.compression.get("codec") == codec
        and m.num_records == records
        and all(e.batch_crc32c for e in m.shards)  # format 1 shards are checked whole
    )


def ensure_small(data_dir: str, codec: str, records: int) -> snap.Snapshot:
    """Open the cached snapshot of ``records`` small records, writing it first if needed.

    The fingerprint snap.create checks includes the hash of this file, so an edit to the
    benchmark alone would force a rewrite; a snapshot of the same records (params, data
    version, codec, count) is reused instead.
    """
    path = os.path.join(data_dir, f"{codec}-{records}")
    params = {"seed": SEED, "version": DATA_VERSION}
    existing = None
    if os.path.exists(os.path.join(path, "manifest.json")):
        try:
            existing = snap.open(path)
        except snap.SnapError:
            existing = None
    if existing is not None and _matches(existing.manifest, params, codec, records):
        return existing
    items = chunk_items(records)
    # Inputs per task so that a task writes about one shard (tasks never share shards), and
    # at least MIN_SHARDS shards for the baseline's 2 threads.
    chunk_bytes = CHUNK_ROWS * ROW_BYTES
    per_task = max(1, min(_common.SHARD_TARGET // chunk_bytes, len(items) // _common.MIN_SHARDS))
    print(f"writing {path} ({records} records, {codec}) ...", file=sys.stderr, flush=True)
    with _common.Stopwatch() as sw:
        # By file spec: worker processes import this file by path.
        info = snap.create(
            f"{os.path.abspath(__file__)}:make_small",
            path,
            inputs=items,
            params=params,
            workers=2,
            compression=codec,
            shard_size=_common.SHARD_TARGET,
            inputs_per_task=per_task,
            overwrite=existing is not None,
        )
    print(
        f"  {info.num_shards} shards, {info.bytes / _common.GB:.3f} GB on disk "
        f"(ratio {info.uncompressed_bytes / max(1, info.bytes):.2f}), {sw.seconds:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return snap.open(path)


def check_schema(s: snap.Snapshot) -> None:
    """``x`` must be stored as an (8,)-shaped fixed_shape_tensor of float32, as the baseline
    reads it."""
    t = s.schema.field("x").type
    if not (
        isinstance(t, pa.FixedShapeTensorType)
        and list(t.shape) == [FEATURES]
        and t.value_type == pa.float32()
    ):
        raise RuntimeError(f"{s.url}: x is {t}, not a fixed_shape_tensor of float32 [8]")


# --- what is timed --------------------------------------------------------------------------


@dataclass
class Run:
    """One timed run of one configuration."""

    codec: str
    config: str
    seconds: float
    cpu_seconds: float
    records: int
    warm_gbps: float  # the re-warming read just before the run (low: it was cold)
    settings: dict[str, Any] = field(default_factory=dict)  # the loader's, after the epoch

    @property
    def rows_per_s(self) -> float:
        return self.records / max(1e-9, self.seconds)


def copy_shard(path: str) -> int:
    """Every record batch of one shard, memory-mapped, decoded, each column copied once into
    numpy → records."""
    reader = pa.ipc.open_file(pa.memory_map(path, "r"))
    records = 0
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        n = batch.num_rows
        x = batch.column("x").storage.flatten().to_numpy().reshape(n, FEATURES)
        columns = [batch.column("id").to_numpy().copy(), x.copy()]
        columns.append(batch.column("label").to_numpy().copy())
        records += len(columns[0])
    return records


def baseline_run(codec: str, paths: list[str]) -> Run:
    warm = _common.rewarm(paths)
    with _common.Stopwatch() as sw, ThreadPoolExecutor(2) as pool:
        records = sum(pool.map(copy_shard, paths))
    return Run(codec, BASE, sw.seconds, sw.cpu, records, warm)


def loader_run(
    codec: str,
    s: snap.Snapshot,
    batch_size: int,
    processes: int,
    paths: list[str],
    shuffle_buffer: int | str = "auto",
) -> Run:
    """The second epoch of one loader (default settings but ``shuffle_buffer``), timed alone."""
    if processes:
        procs.pool().wait_ready(processes)
    with s.loader(batch_size, shuffle=True, seed=1, processes=processes,
                  shuffle_buffer=shuffle_buffer) as loader:  # fmt: skip
        first = True
        for batch in loader:  # epoch 1, untimed: verifies the shards, allocates the windows
            if first and batch["x"].shape[1:] != (FEATURES,):
                raise RuntimeError(f"the loader's x has shape {batch['x'].shape}")
            first = False
        warm = _common.rewarm(paths)
        records = 0
        before = _common.process_cpu(loader)
        with _common.Stopwatch() as sw:
            for batch in loader:  # epoch 2: each pass over the loader is the next epoch
                records += len(batch["id"])
        settings = loader.stats()["settings"]
        cpu = sw.cpu + _common.process_cpu(loader) - before  # the decode processes' too
    config = loader_config(batch_size, processes)
    return Run(codec, config, sw.seconds, cpu, records, warm, settings)


def run_config(
    codec: str, config: str, s: snap.Snapshot, paths: list[str], shuffle_buffer: int | str
) -> Run:
    if config == BASE:
        run = baseline_run(codec, paths)
    else:
        batch_size, processes = LOADERS[config]
        run = loader_run(codec, s, batch_size, processes, paths, shuffle_buffer)
    if run.records != s.num_records:
        raise RuntimeError(f"{codec} {config}: {run.records} records of {s.num_records}")
    return run


# --- the table ------------------------------------------------------------------------------


@dataclass
class Summary:
    """The medians of one codec's runs."""

    codec: str
    stats: dict[str, Any]
    median_rows_per_s: dict[str, float]
    median_cpu_seconds: dict[str, float]
    ratio: dict[str, float]  # loader configurations: median / the baseline's median
    ok: dict[str, bool]
    settings: dict[str, dict[str, Any]]  # loader configurations: of the last run


def summarise(codec: str, s: snap.Snapshot, runs: list[Run]) -> Summary:
    mine = [r for r in runs if r.codec == codec]
    med = {c: statistics.median(r.rows_per_s for r in mine if r.config == c) for c in CONFIGS}
    cpu = {c: statistics.median(r.cpu_seconds for r in mine if r.config == c) for c in CONFIGS}
    ratio = {c: med[c] / med[BASE] for c in CONFIGS if c != BASE}
    ok = {c: ratio[c] >= TARGET_OF[c] for c in ratio}
    settings = {c: [r for r in mine if r.config == c][-1].settings for c in ratio}
    return Summary(codec, s.stats(), med, cpu, ratio, ok, settings)


def print_table(summaries: list[Summary], runs: list[Run], args: argparse.Namespace) -> None:
    print()
    print(
        f"snap small-records benchmark: {args.rows:,} records of {ROW_BYTES} bytes (id int64, "
        f"x float32[{FEATURES}], label int64);\n"
        f'loader: shuffle=True, default ("auto") settings, 2nd epoch; x base = loader / '
        f"decode + one copy (rows/s; higher is better);\npage cache warm (re-read before each "
        f"run), median of "
        f"{args.repeats}"
    )
    header = (
        f"{'codec':<5} {'configuration':<54} {'M rows/s':>8} {'x base':>6} {'cpu s':>6}  "
        f"{'target':<14} {'runs (M rows/s)':<20} note"
    )
    _common.print_header(header)
    for cs in summaries:
        for config in CONFIGS:
            rate = cs.median_rows_per_s[config] / 1e6
            rates = _common.runs_text(
                (r.rows_per_s / 1e6 for r in runs if r.codec == cs.codec and r.config == config),
                2,
            )
            if config == BASE:
                ratio_text, target = f"{'':>6}", ""
                note = "2 threads on different shards, no shuffle, each column copied once"
            else:
                ratio_text = f"{cs.ratio[config]:6.2f}"
                target = _common.verdict(cs.ok[config], f">= {TARGET_OF[config]:.2f}")
                st = cs.settings[config]
                note = (
                    f"auto: reads={st['parallel_reads']} prefetch={st['prefetch']} "
                    f"window={st['window_rows']}"
                )
            print(
                f"{cs.codec:<5} {config:<54} {rate:8.2f} {ratio_text} "
                f"{cs.median_cpu_seconds[config]:6.2f}  {target:<14} {rates:<20} {note}"
            )
        st = cs.stats
        print(
            f"{'':<5} {st['records']} records, {st['shards']} shards, {st['record_batches']} "
            f"record batches, {st['bytes'] / _common.GB:.3f} GB on disk (ratio {st['ratio']:.2f})"
        )
        print()


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _common.parser(__doc__)
    p.add_argument("--rows", type=int, default=None, help=f"records ({DEFAULT_ROWS:,})")
    _common.add_data_dir_option(p, DEFAULT_DATA_DIR)
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (3)")
    p.add_argument(
        "--codecs", default=",".join(CODECS), help="comma-separated subset of zstd,lz4,none"
    )
    p.add_argument(
        "--shuffle-buffer",
        default="auto",
        help="the loaders' shuffle_buffer: auto, records (1024) or a size (4MiB)",
    )
    _common.add_json_option(p)
    _common.add_quick_option(p, f"{QUICK_ROWS:,} records")
    args = p.parse_args(argv)
    if args.shuffle_buffer.isdigit():
        args.shuffle_buffer = int(args.shuffle_buffer)
    try:  # checked before any snapshot is written, as the loader checks it
        LoaderOptions(shuffle_buffer=args.shuffle_buffer)
    except snap.OptionError as err:
        p.error(str(err))
    _common.resolve_quick(args, "rows", DEFAULT_ROWS, QUICK_ROWS, repeats=3)
    args.codecs = _common.subset(p, "--codecs", args.codecs, CODECS)
    if args.rows < 1 or args.repeats < 1:
        p.error("need --rows >= 1 and --repeats >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = _common.environment()
    load_start = os.getloadavg()
    print(_common.load_at_start(_common.describe(env), load_start))
    print(f"loaders' shuffle_buffer: {args.shuffle_buffer}")
    snapshots = {c: ensure_small(args.data_dir, c, args.rows) for c in args.codecs}
    for s in snapshots.values():
        check_schema(s)
    paths = {c: _common.shard_paths(s) for c, s in snapshots.items()}
    runs: list[Run] = []
    with _common.Stopwatch() as total:
        for rep in range(args.repeats):
            order = _common.rotated(CONFIGS, rep)
            for codec, s in snapshots.items():
                for config in order:
                    run = run_config(codec, config, s, paths[codec], args.shuffle_buffer)
                    runs.append(run)
                    print(
                        f"  repeat {rep + 1}/{args.repeats} {codec:<5} {config:<40} "
                        f"{run.rows_per_s / 1e6:6.2f} M rows/s {run.seconds:6.2f} s "
                        f"(cpu {run.cpu_seconds:.2f} s, re-warm {run.warm_gbps:.1f} GB/s)",
                        file=sys.stderr,
                        flush=True,
                    )
    load_end = os.getloadavg()
    summaries = [summarise(c, s, runs) for c, s in snapshots.items()]
    print_table(summaries, runs, args)
    cold = [r for r in runs if r.warm_gbps < _common.COLD_GBPS]
    print(_common.load_summary(_common.describe(env), load_start[0], load_end[0]))
    print(
        f"page cache re-warmed before every run; {len(cold)} of {len(runs)} re-warming reads "
        f"ran below {_common.COLD_GBPS:g} GB/s; timed runs took {total.seconds:.0f} s"
    )
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        doc = {
            "environment": {
                **env,
                "load_average_start": load_start,
                "load_average_end": load_end,
                "rows": args.rows,
                "shuffle_buffer": args.shuffle_buffer,
                "repeats": args.repeats,
                "batch_sizes": list(BATCH_SIZES),
            },
            "targets": {loader_config(b): t for b, t in TARGETS.items()},
            "summaries": [asdict(cs) for cs in summaries],
            "runs": [{**asdict(r), "rows_per_s": r.rows_per_s} for r in runs],
        }
        _common.write_json(args.json, doc)
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
