"""Benchmark: replay speed of the snap loader against decode + one copy, per codec.

A snapshot of image-like records (``image`` uint8 [3, 64, 64]: a smooth pattern plus noise,
~1.2x with zstd; ``label`` int64; with ``--tokens`` also ragged int32 ``tokens``) of
``--size-gb`` uncompressed is written once per codec (zstd level 1, lz4, none) into
``--data-dir`` and reused by later runs. With the page cache warm (every shard file is read
again right before each timed run: idle file pages may be evicted within a minute), every
codec gets:

  * page-cache read: every shard file read with plain 1 MiB ``readinto`` calls (the
    disk/page-cache limit; reported as GB/s of file bytes);
  * pyarrow alone: every record batch of every shard decoded by ``pa.ipc`` from a memory map,
    2 threads on different shards, no shuffle, columns converted to numpy (for ``none`` it is
    zero-copy: only per-batch overhead);
  * pyarrow alone + one copy ("decode + one copy"): the same, each column copied once into a
    new array. This is the baseline of the ratios (issue 16): the least a loader that hands
    out batches of its own must do;
  * snap loader, batch_size 256, default ("auto") settings, shuffle=True, the first epoch of a
    new process (a child: nothing verified or allocated before; the modules a loader's first
    call imports are imported before its clock, ``_common.LOADER_MODULES``), with and without
    verify (targets: >= 0.85 of the baseline for zstd and lz4, >= 0.70 for none; verify/no-verify
    >= 0.95; first batch within 0.3 s of iter());
  * the loader's second epoch, timed alone (an untimed first epoch runs before it), shuffled
    and not: every later epoch of a training run (targets >= 0.90, none >= 0.80);
  * a Python-busy consumer: the second epoch again, with a consumer that spends twice the
    loader's own cost per batch (its CPU time, all threads) in pure Python (holding the GIL,
    as kernel launches, logging and optimizer code do); reported is the % of the epoch it
    waited (target <= 5 %);
  * snap loader, shuffle=True, 2nd epoch, hand-tuned over num_parallel_reads x prefetch: the
    best of the grid, and how "auto" (2nd epoch) compares to it (target: within 10%). The
    grid's best is the largest of eight medians, so on a noisy machine it is biased up (the
    winner's curse): after the grid, "auto" and that best setting run again head to head,
    alternating, as many times as the repeats, and auto/best is the ratio of those medians;
  * the global order (``global_batch_size=256``) and a 3-way mixture (the snapshot opened
    three times, mixed whole: an epoch of 3x the bytes), 2nd epoch, against the per-rank
    order's 2nd epoch (issue 17: at most 5 % slower);
  * for the uncompressed snapshot, which the loader reads through gathered windows after its
    first epoch (a first epoch reads slot windows either way), the shuffled 1st epoch (new
    process) and 2nd epoch again with slot windows only (as without the compiled gather),
    and gathered against slot windows.

Rates are GB/s (1e9 bytes) of uncompressed column data delivered (the sum of the ``nbytes``
of the numpy arrays). Configurations alternate within each repeat (the order rotates between
repeats); the table reports medians. This is a report, not a test: nothing is asserted.

``--memory`` instead replays snapshots of 0.2 GB, 1 GB and ``--size-gb`` of each codec with
shuffle=True, three epochs each in a fresh subprocess, and prints the child's peak RSS growth
in the first epoch (VmHWM; before 2026-11-30 ru_maxrss, which starts at the parent's RSS at
the fork: the growth counted from there was too low by up to the parent's size), split into
anonymous memory and file-backed pages (mapped shard files), sampled from /proc/self/status,
and the peak growth in the epochs after it (sampled: an uncompressed snapshot's are
gathered), against the memory the loader holds by design (issue 16: its windows, the
prefetched batches and 64 MiB).

    python benchmarks/replay.py                  # ~7 minutes the first time (writes 3 x 2 GB)
    python benchmarks/replay.py --quick          # smoke run on 0.2 GB, 1 repeat
    python benchmarks/replay.py --memory         # peak RSS vs snapshot size
    python benchmarks/replay.py --codecs zstd --repeats 5 --json replay.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Before numpy: importing _common pins native thread pools to one thread (the loader and the
# baseline choose their own threads; a BLAS pool would only add noise).
import _common
from _common import GB, Stopwatch, raw_read, rewarm, shard_paths, timed_epoch

import snapshot_cli as snap
from snapshot_cli.readers import gather, procs

SCRIPT = os.path.abspath(__file__)
DEFAULT_DATA_DIR = _common.SHARED_DATA_DIR

CODECS = ("zstd", "lz4", "none")
DEFAULT_SIZE_GB, QUICK_SIZE_GB, MEMORY_SMALL_GB = 2.0, 0.2, 0.2
MEMORY_EPOCHS = 3  # the --memory child's epochs: the first, and later ones (gathered: none)
BATCH_SIZE = 256
TUNE_READS = (1, 2, 3, 4)
TUNE_PREFETCH = (2, 8)

RAW = "page-cache read"
BASE = "pyarrow alone"
BASE_COPY = "pyarrow alone + one copy"
# Issue 16's configurations. "new process": the first epoch of a fresh process (child), as a
# sweep trial or a one-epoch run starts; nothing verified or allocated before. "2nd epoch": the
# same loader's second pass, timed alone: every later epoch of a training run.
FRESH = "snap shuffle=True, 1st epoch, new process"
FRESH_NOVERIFY = "snap ... verify=False, 1st epoch, new process"
STEADY_ORDERED = "snap shuffle=False, 2nd epoch"
STEADY = "snap shuffle=True, 2nd epoch"
STEADY_PROCS = "snap shuffle=True, 2nd epoch, processes=2"
BUSY = "snap shuffle=True, 2nd epoch, busy step"
BUSY_PROCS = "snap ... busy step, processes=2"
BUSY_CONFIGS = {BUSY: 0, BUSY_PROCS: 2}  # config → decode processes
# Uncompressed snapshots are read through gathered windows (snapshot_cli.readers.gather); the
# same configurations with slot windows, as before them (and as without the compiled gather).
FRESH_SLOT = "snap ... slot windows, 1st epoch, new process"
STEADY_SLOT = "snap shuffle=True, 2nd epoch, slot windows"
SLOT_CONFIGS = {FRESH_SLOT: FRESH, STEADY_SLOT: STEADY}  # → the configuration it compares with
# Issue 17: the global order and a mixture, against STEADY (today's per-rank order).
GLOBAL = "snap global_batch_size=256, 2nd epoch"
MIX3 = "snap 3-way mix (3 x the same), 2nd epoch"
ORDER_TARGET = 0.95  # GLOBAL and MIX3 cost at most 5 % against STEADY
# Targets as fractions of "decode + one copy" (BASE_COPY): (zstd and lz4, none).
TARGETS = {FRESH: (0.85, 0.70), STEADY_ORDERED: (0.90, 0.80), STEADY: (0.90, 0.80)}
VERIFY_TARGET = 0.95  # FRESH / FRESH_NOVERIFY
FIRST_BATCH_TARGET = 0.3  # seconds from iter() to the first batch, new process
INPUT_BOUND_TARGET = 5.0  # % of a Python-busy consumer's epoch spent waiting for batches
BUSY_FACTOR = 2.0  # the busy step is this many times the loader's own time per batch
AUTO_TARGET = 0.90  # auto >= 0.90 of the best hand-tuned setting (both 2nd epochs)
LOADER_CONFIGS = (
    FRESH, FRESH_NOVERIFY, STEADY_ORDERED, STEADY, STEADY_PROCS, BUSY, BUSY_PROCS, GLOBAL, MIX3,
    FRESH_SLOT, STEADY_SLOT,
)  # fmt: skip


def target_for(config: str, codec: str) -> float | None:
    pair = TARGETS.get(config)
    return None if pair is None else pair[1 if codec == "none" else 0]


def tuned_name(reads: int, prefetch: int) -> str:
    return f"tuned reads={reads} prefetch={prefetch}, 2nd epoch"


TUNED = [tuned_name(r, p) for r in TUNE_READS for p in TUNE_PREFETCH]
# After the grid: "auto" and the grid's best again, alternating (auto/best from these).
CONFIRM_AUTO = "auto again, head to head, 2nd epoch"
CONFIRM_BEST = "best hand-tuned again, head to head"


# --- what is timed ------------------------------------------------------------------------


@dataclass
class Run:
    """One timed run of one configuration."""

    codec: str
    config: str
    seconds: float
    cpu_seconds: float
    bytes: int  # uncompressed column bytes delivered (file bytes for the page-cache read)
    records: int
    warm_gbps: float = 0.0  # the re-warming read just before the run (low: it was cold)
    stats: dict[str, Any] | None = None  # loader.stats() after the epoch
    first_batch: float | None = None  # seconds from iter() to the first batch
    input_bound_pct: float | None = None  # BUSY: % of the epoch the consumer waited
    step_ms: float | None = None  # BUSY: the consumer's pure-Python time per batch

    @property
    def gbps(self) -> float:
        return _common.rate_gbps(self.bytes, self.seconds)


def loader_options(config: str) -> dict[str, Any]:
    fixed: dict[str, dict[str, Any]] = {
        STEADY_ORDERED: {"shuffle": False, "warm": True},
        STEADY: {"shuffle": True, "warm": True},
        STEADY_PROCS: {"shuffle": True, "warm": True, "processes": 2},
        STEADY_SLOT: {"shuffle": True, "warm": True},
    }
    if config in fixed:
        return fixed[config]
    reads, prefetch = (int(part.split("=")[1].rstrip(",")) for part in config.split()[1:3])
    return {"shuffle": True, "num_parallel_reads": reads, "prefetch": prefetch, "warm": True}


def spin(seconds: float) -> None:
    """Hold the GIL for ``seconds`` in pure Python, like a training step's Python code."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i


def busy_epoch(s: snap.Snapshot, processes: int = 0) -> tuple[int, int, float, float, float, float]:
    """A warm loader's second epoch with a consumer that spends BUSY_FACTOR x the loader's own
    cost per batch in pure Python → (bytes, records, seconds, cpu, input-bound %, step ms).

    The loader's cost per batch is the CPU time (all its threads) per batch of an untimed
    epoch of the default loader (threads) with an idle consumer: the same step for
    ``processes=0`` and ``processes=2``. (Its wall time per batch would leave no slack at all
    on 2 cores: the loader's threads keep both busy, so a consumer step of twice that needs
    the whole machine, and any hand-off shows up as waiting.)"""
    with s.loader(BATCH_SIZE, shuffle=True) as loader:
        cpu0 = _common.cpu_time()
        batches = sum(1 for _ in loader)
        step = BUSY_FACTOR * (_common.cpu_time() - cpu0) / max(1, batches)
    if processes:
        procs.pool().wait_ready(processes)  # started (the first pass would use threads)
    with s.loader(BATCH_SIZE, shuffle=True, processes=processes) as loader:
        sum(1 for _ in loader)  # untimed first epoch
        waited = nbytes = records = 0
        before = _common.process_cpu(loader)
        with Stopwatch() as sw:
            it = iter(loader)
            while True:
                t0 = time.perf_counter()
                batch = next(it, None)
                waited += time.perf_counter() - t0
                if batch is None:
                    break
                nbytes += _common.batch_bytes(batch)
                records += len(next(iter(batch.values())))
                spin(step)
        cpu = sw.cpu + _common.process_cpu(loader) - before  # the decode processes' too
    return nbytes, records, sw.seconds, cpu, 100 * waited / sw.seconds, 1000 * step


def epoch_child(path: str, verify: bool, slot: bool = False) -> int:
    """In a fresh process: one shuffled epoch (``slot``: with slot windows); prints its
    figures as JSON."""
    gather.ENABLED = gather.ENABLED and not slot
    _common.import_loader_modules()
    s = snap.open(path)
    nbytes = records = 0
    first = None
    with Stopwatch() as sw, s.loader(BATCH_SIZE, shuffle=True, verify=verify) as loader:
        started = time.perf_counter()
        for batch in loader:
            if first is None:
                first = time.perf_counter() - started
            nbytes += _common.batch_bytes(batch)
            records += len(next(iter(batch.values())))
        stats = loader.stats()
    doc = {"seconds": sw.seconds, "cpu": sw.cpu, "bytes": nbytes, "records": records}
    print(json.dumps({**doc, "first": first, "stats": stats}))
    return 0


def run_config(
    codec: str, config: str, s: snap.Snapshot, tokens: bool, like: str | None = None
) -> Run:
    """One timed run of ``config`` (with the loader options of ``like`` where given)."""
    paths = shard_paths(s)
    # Re-warm the page cache right before every run: the other codecs' runs take longer than
    # the OS keeps idle file pages.
    warm_gbps = rewarm(paths)
    gc.collect()
    if config in (RAW, BASE, BASE_COPY):
        with Stopwatch() as sw:
            if config == RAW:
                nbytes, records = raw_read(paths)
            else:
                nbytes, records = _common.pyarrow_alone(paths, tokens, copy=config == BASE_COPY)
        return Run(codec, config, sw.seconds, sw.cpu, nbytes, records, warm_gbps)
    if config in (FRESH, FRESH_NOVERIFY, FRESH_SLOT):
        verify = "0" if config == FRESH_NOVERIFY else "1"
        slot = ["slot"] if config == FRESH_SLOT else []
        doc = _common.run_child([SCRIPT, "--epoch-child", s.root, verify, *slot], config)
        return Run(codec, config, doc["seconds"], doc["cpu"], doc["bytes"], doc["records"],
                   warm_gbps, doc["stats"], first_batch=doc["first"])  # fmt: skip
    if config in (GLOBAL, MIX3):
        # MIX3: the snapshot opened three times and mixed, every record of each once (an
        # epoch of 3x the bytes, in GB/s as the rest): what the mixing machinery costs, on
        # the same data. (With a third of each instead, the 2nd epoch would still meet record
        # batches the 1st did not: their first checksum and layout parse, not mixing.)
        src: Any = s
        if config == MIX3:
            src = snap.mix([s, snap.open(s.root), snap.open(s.root)])
        size = {"global_batch_size": BATCH_SIZE} if config == GLOBAL else {}
        nbytes, records, stats, seconds, cpu = timed_epoch(
            src, None if size else BATCH_SIZE, warm=True, shuffle=True, **size
        )
        return Run(codec, config, seconds, cpu, nbytes, records, warm_gbps, stats)
    if config in BUSY_CONFIGS:
        nbytes, records, seconds, cpu, bound, step_ms = busy_epoch(s, BUSY_CONFIGS[config])
        return Run(codec, config, seconds, cpu, nbytes, records, warm_gbps,
                   input_bound_pct=bound, step_ms=step_ms)  # fmt: skip
    options = loader_options(like or config)
    if options.get("processes"):
        procs.pool().wait_ready(options["processes"])
    enabled = gather.ENABLED
    gather.ENABLED = enabled and config != STEADY_SLOT
    try:
        nbytes, records, stats, seconds, cpu = timed_epoch(s, BATCH_SIZE, **options)
    finally:
        gather.ENABLED = enabled
    return Run(codec, config, seconds, cpu, nbytes, records, warm_gbps, stats)


# --- summary and table --------------------------------------------------------------------


@dataclass
class CodecSummary:
    codec: str
    shards: int
    record_batches: int
    records: int
    file_bytes: int
    uncompressed_bytes: int
    median_gbps: dict[str, float] = field(default_factory=dict)
    median_cpu_seconds: dict[str, float] = field(default_factory=dict)
    fraction: dict[str, float] = field(default_factory=dict)  # of the pyarrow-alone baseline
    best_tuned: str = ""
    auto_vs_best: float = 0.0
    auto_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_bound_pct: dict[str, float] = field(default_factory=dict)
    stage_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    first_batch: dict[str, float] = field(default_factory=dict)  # median seconds
    verify_ratio: float = 0.0  # FRESH / FRESH_NOVERIFY (rates)
    busy_input_bound_pct: dict[str, float] = field(default_factory=dict)
    busy_step_ms: dict[str, float] = field(default_factory=dict)


def summarise(codec: str, s: snap.Snapshot, runs: list[Run], configs: list[str]) -> CodecSummary:
    m = s.manifest
    out = CodecSummary(
        codec, m.num_shards, m.num_record_batches, m.num_records, m.bytes, m.uncompressed_bytes
    )
    for config in configs:
        mine = [r for r in runs if r.codec == codec and r.config == config]
        if not mine:  # not run for this codec
            continue
        out.median_gbps[config] = statistics.median(r.gbps for r in mine)
        out.median_cpu_seconds[config] = statistics.median(r.cpu_seconds for r in mine)
        with_stats = [r.stats for r in mine if r.stats]
        if with_stats:
            out.input_bound_pct[config] = statistics.median(
                st["input_bound_pct"] for st in with_stats
            )
            last = with_stats[-1]
            out.stage_seconds[config] = last["stage_seconds"]
            if config in LOADER_CONFIGS:
                out.auto_settings[config] = last["settings"]
        firsts = [r.first_batch for r in mine if r.first_batch is not None]
        if firsts:
            out.first_batch[config] = statistics.median(firsts)
        if config in BUSY_CONFIGS:
            bound = statistics.median(r.input_bound_pct or 0 for r in mine)
            out.busy_input_bound_pct[config] = bound
            out.busy_step_ms[config] = statistics.median(r.step_ms or 0 for r in mine)
    base = out.median_gbps[BASE_COPY]
    out.fraction = {c: v / base for c, v in out.median_gbps.items() if c != RAW}
    if FRESH in out.median_gbps and FRESH_NOVERIFY in out.median_gbps:
        out.verify_ratio = out.median_gbps[FRESH] / out.median_gbps[FRESH_NOVERIFY]
    best = best_tuned(runs, codec)
    if best:
        out.best_tuned = best
        out.auto_vs_best = out.median_gbps[STEADY] / out.median_gbps[best]
    again = [r for r in runs if r.codec == codec and r.config in (CONFIRM_AUTO, CONFIRM_BEST)]
    if again:  # head to head after the grid: what auto/best is measured from
        for config in (CONFIRM_AUTO, CONFIRM_BEST):
            rates = [r.gbps for r in again if r.config == config]
            out.median_gbps[config] = statistics.median(rates)
            out.median_cpu_seconds[config] = statistics.median(
                r.cpu_seconds for r in again if r.config == config
            )
            out.fraction[config] = out.median_gbps[config] / base
        out.auto_vs_best = out.median_gbps[CONFIRM_AUTO] / out.median_gbps[CONFIRM_BEST]
    return out


def best_tuned(runs: list[Run], codec: str) -> str:
    """The hand-tuned setting with the highest median rate ("" where the grid was not run)."""
    grid = {c: [r.gbps for r in runs if r.codec == codec and r.config == c] for c in TUNED}
    medians = {c: statistics.median(v) for c, v in grid.items() if v}
    return max(medians, key=lambda c: medians[c]) if medians else ""


def head_to_head(codec: str, s: snap.Snapshot, runs: list[Run], args: argparse.Namespace) -> None:
    """After the grid: "auto" and the grid's best setting again, alternating, ``repeats``
    times each (the best of eight medians alone would flatter the hand-tuned side)."""
    best = best_tuned(runs, codec)
    if not best:
        return
    for rep in range(args.repeats):
        pair = [(CONFIRM_AUTO, STEADY), (CONFIRM_BEST, best)]
        for config, like in pair if rep % 2 == 0 else pair[::-1]:
            run = run_config(codec, config, s, args.tokens, like=like)
            runs.append(run)
            print(
                f"  head to head {rep + 1}/{args.repeats} {codec:<5} {config:<38} "
                f"({like}) {run.gbps:6.2f} GB/s",
                file=sys.stderr,
                flush=True,
            )


def verdict(value: float, target: float) -> str:
    return _common.verdict(value >= target, f">= {target:.2f}")


def print_tables(summaries: list[CodecSummary], runs: list[Run], args: argparse.Namespace) -> None:
    print()
    print(
        f"snap replay benchmark: {args.size_gb:g} GB uncompressed, batch_size {BATCH_SIZE}, "
        f"page cache warm (re-read before each run), median of {args.repeats};\n"
        f"GB/s = 1e9 bytes/s of uncompressed column data delivered (higher is better); "
        f"x copy = GB/s / decode + one copy's GB/s (higher is better; 1.00 = as fast)"
    )
    header = (
        f"{'codec':<5} {'configuration':<42} {'GB/s':>6} {'x copy':>6} {'cpu s':>6}  "
        f"{'target':<14} {'runs (GB/s)':<20} note"
    )
    _common.print_header(header)
    for cs in summaries:
        ratio = cs.uncompressed_bytes / max(1, cs.file_bytes)
        shown = [RAW, BASE, BASE_COPY, *LOADER_CONFIGS]
        if cs.best_tuned:
            shown += [cs.best_tuned, CONFIRM_AUTO, CONFIRM_BEST]
        for config in shown:
            if config not in cs.median_gbps:
                continue
            gbps = cs.median_gbps[config]
            frac = cs.fraction.get(config)
            goal = target_for(config, cs.codec)
            target = verdict(frac, goal) if goal is not None and frac else ""
            rates = _common.runs_text(
                r.gbps for r in runs if r.codec == cs.codec and r.config == config
            )
            note = ""
            if config == RAW:
                note = f"file bytes (x{ratio:.2f} = {gbps * ratio:.2f} GB/s uncompressed)"
            elif config == BASE:
                note = "the machine's limit: 2 threads, no shuffle"
                if cs.codec == "none":
                    note += " (zero-copy: overhead only)"
            elif config == BASE_COPY:
                note = "the baseline of 'x copy': decode + one copy, no shuffle"
            elif config in BUSY_CONFIGS:
                bound = cs.busy_input_bound_pct[config]
                note = (
                    f"consumer: {cs.busy_step_ms[config]:.2f} ms of pure Python per batch; "
                    f"input-bound {bound:.1f}% "
                    + _common.verdict(bound <= INPUT_BOUND_TARGET, f"<= {INPUT_BOUND_TARGET}%")
                )
            elif config in SLOT_CONFIGS and SLOT_CONFIGS[config] in cs.median_gbps:
                vs = cs.median_gbps[SLOT_CONFIGS[config]] / gbps
                note = f"gathered windows ({SLOT_CONFIGS[config]}) x these: {vs:.2f}"
            elif config == STEADY_PROCS and STEADY in cs.median_gbps:
                note = f"x threads (shuffle=True, 2nd epoch): {gbps / cs.median_gbps[STEADY]:.2f}"
            elif config in (GLOBAL, MIX3) and STEADY in cs.median_gbps:
                vs = gbps / cs.median_gbps[STEADY]
                target = verdict(vs, ORDER_TARGET)
                note = f"x the per-rank order (shuffle=True, 2nd epoch): {vs:.2f}"
            elif config in cs.first_batch:
                first = cs.first_batch[config]
                note = f"first batch {first:.3f} s " + _common.verdict(
                    first <= FIRST_BATCH_TARGET, f"<= {FIRST_BATCH_TARGET} s"
                )
                if config == FRESH:
                    note += f"; verify/no-verify {cs.verify_ratio:.2f} " + _common.verdict(
                        cs.verify_ratio >= VERIFY_TARGET, f">= {VERIFY_TARGET}"
                    )
            elif config in cs.auto_settings:
                st = cs.auto_settings[config]
                note = (
                    f"auto: reads={st['parallel_reads']} prefetch={st['prefetch']} "
                    f"window={st['window_rows']}; input-bound "
                    f"{cs.input_bound_pct.get(config, 0):.0f}%"
                )
            elif config == CONFIRM_AUTO:
                note = "auto's settings again, alternating with the best (next row)"
            elif config == cs.best_tuned and CONFIRM_BEST in cs.median_gbps:
                note = "the grid's best (the largest of its medians: biased up by noise)"
            elif config in (cs.best_tuned, CONFIRM_BEST):
                target = verdict(cs.auto_vs_best, AUTO_TARGET)
                note = (
                    f"{cs.best_tuned.split(', ')[0]}; target: auto/best = "
                    f"{cs.auto_vs_best:.2f} >= {AUTO_TARGET:.2f}"
                )
            frac_text = f"{frac:6.2f}" if frac is not None else f"{'':>6}"
            print(
                f"{cs.codec:<5} {config:<42} {gbps:6.2f} {frac_text} "
                f"{cs.median_cpu_seconds[config]:6.2f}  {target:<14} {rates:<20} {note}"
            )
        print(
            f"{'':<5} {cs.records} records, {cs.shards} shards, {cs.record_batches} record "
            f"batches, {cs.file_bytes / GB:.2f} GB on disk (ratio {ratio:.2f})"
        )
        print()
    tuned_summaries = [cs for cs in summaries if cs.best_tuned]
    if tuned_summaries:
        print("hand-tuned, shuffle=True, 2nd epoch: GB/s by num_parallel_reads x prefetch")
        cols = " ".join(f"{'p=' + str(p):>7}" for p in TUNE_PREFETCH)
        print(f"{'codec':<5} {'reads':>5} {cols}")
        for cs in tuned_summaries:
            for r in TUNE_READS:
                cells = " ".join(
                    f"{cs.median_gbps.get(tuned_name(r, p), float('nan')):7.2f}"
                    for p in TUNE_PREFETCH
                )
                print(f"{cs.codec:<5} {r:>5} {cells}")
        print()
    print("stage seconds of the last run (read_decode is summed wall time of window loads):")
    for cs in summaries:
        for config in LOADER_CONFIGS:
            if config in cs.stage_seconds:
                st = cs.stage_seconds[config]
                print(
                    f"  {cs.codec:<5} {config:<42} read_decode {st['read_decode']:.2f} s, "
                    f"gather {st['gather']:.2f} s"
                )


# --- memory mode --------------------------------------------------------------------------


def memory_child(path: str) -> int:
    """In a fresh process: MEMORY_EPOCHS shuffled epochs of ``path`` (the first timed);
    print peak memory as JSON: of the first epoch, and of the epochs after it (sampled)."""
    fields = ("RssAnon", "RssFile", "VmRSS")
    s = snap.open(path)
    before = _common.proc_status_kib(fields)
    # (VmHWM: this process's own peak since its exec; ru_maxrss begins at the parent's RSS)
    hwm_before = _common.proc_status_kib(("VmHWM",))["VmHWM"]
    peak = dict(before)
    later = dict(before)  # the peaks of the epochs after the first
    done, first_done = threading.Event(), threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            now = _common.proc_status_kib(fields)
            into = later if first_done.is_set() else peak
            for k, v in now.items():
                into[k] = max(into[k], v)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with s.loader(BATCH_SIZE, shuffle=True) as loader:
        with Stopwatch() as sw:
            nbytes, records = _common.drain(loader)
        hwm_first = _common.proc_status_kib(("VmHWM",))["VmHWM"]
        first_done.set()
        for _ in range(MEMORY_EPOCHS - 1):
            _common.drain(loader)
        stats = loader.stats()
        pool = loader._context.windows
        held = [pool.allocated, pool.batches.allocated]
    seconds = sw.seconds
    done.set()
    sampler.join()
    doc = {
        "gathered": pool.gather,
        "held": held,  # slabs made (slot windows), batch buffers made (gathered windows)
        "path": path,
        "uncompressed_bytes": s.manifest.uncompressed_bytes,
        "file_bytes": s.manifest.bytes,
        "records": records,
        "gbps": _common.rate_gbps(nbytes, seconds),
        "hwm_kib_before": hwm_before,
        "hwm_kib": hwm_first,
        "before_kib": before,
        "peak_kib": peak,
        "later_peak_kib": later,
        "settings": stats["settings"],
    }
    print(json.dumps(doc))
    return 0


def memory_mode(args: argparse.Namespace) -> int:
    results = []
    for codec in args.codecs:
        for size in args.memory_sizes:
            s = _common.ensure_snapshot(args.data_dir, codec, size, args.tokens, args.workers)
            raw_read(shard_paths(s))  # warm the page cache: measure memory, not the disk
            folios = _common.large_folio_share(shard_paths(s)[0])
            try:
                doc = _common.run_child([SCRIPT, "--memory-child", s.root], "--memory-child")
            except _common.ChildError as err:
                print(err.stderr, file=sys.stderr)
                return err.returncode
            results.append({**doc, "codec": codec, "large_folio_share": folios})
    mib = 1024  # KiB per MiB
    print()
    print(
        f"peak memory of {MEMORY_EPOCHS} shuffled epochs (default settings), each snapshot in a "
        "fresh process: the first epoch, and the epochs after it"
    )
    header = (
        f"{'codec':<5} {'snapshot':>8} {'GB/s':>5} {'growth':>7} {'anon':>6} {'file':>6} "
        f"{'later':>7} {'window':>6} {'prefetch':>8} {'budget':>7}  target"
        f"{'':<26}held"
    )
    _common.print_header(header, 10)
    for r in results:
        growth = (r["hwm_kib"] - r["hwm_kib_before"]) / mib
        st = r["settings"]
        row = max(1, r["uncompressed_bytes"] // max(1, r["records"]))
        window = min(st["window_rows"], r["records"]) * row / (1 << 20)
        prefetch = st["prefetch"] * BATCH_SIZE * row / (1 << 20)
        # The windows a loader holds by design: a slot window being served and one being
        # filled (the next starts in the first one's slab once the consumer has let go of
        # it); a gathered window's pages of the shard files, for the window served and the
        # one being read.
        windows = 2
        budget = windows * window + prefetch + 64
        held = f"{r['held'][0]} slabs, {r['held'][1]} batch buffers"
        later = (r["later_peak_kib"]["VmRSS"] - r["before_kib"]["VmRSS"]) / mib
        ok = growth <= budget and later <= budget
        print(
            f"{r['codec']:<5} {r['uncompressed_bytes'] / GB:6.2f}GB {r['gbps']:5.2f} "
            f"{growth:4.0f}MiB {(r['peak_kib']['RssAnon'] - r['before_kib']['RssAnon']) / mib:3.0f}"
            f"MiB {(r['peak_kib']['RssFile'] - r['before_kib']['RssFile']) / mib:3.0f}MiB "
            f"{later:4.0f}MiB {window:3.0f}MiB {prefetch:5.0f}MiB {budget:4.0f}MiB  "
            f"{_common.verdict(ok, f'growth, later <= {windows} x window + ...'):<30} "
            f"{held}"
        )
    print(
        "growth = the peak RSS (VmHWM) after the first epoch minus before it; anon, file = the "
        "peak growth of anonymous memory (windows, batches, decode buffers) and of file-backed "
        "pages mapped (shard files) in it; later = the peak growth of VmRSS in the epochs after "
        "it (sampled every 5 ms); window = the shuffle window of fixed-width columns (a snapshot "
        "smaller than the window is one window); budget = the windows the loader holds by design "
        "(2 slot windows, or the mapped pages of 2 gathered ones) + prefetched batches + 64 MiB"
    )
    shares = [
        f"{r['codec']} {r['uncompressed_bytes'] / GB:.2f}GB {100 * r['large_folio_share']:.0f} %"
        for r in results
        if r["large_folio_share"] is not None
    ]
    if shares:
        print(
            "the shards' page cache in 2 MiB folios, which a map takes whole (the first shard, "
            f"before the run): {', '.join(shares)}. Shards read back from disk are cached so, "
            "shards just written are not; the later epochs of an uncompressed snapshot then "
            "map about twice the bytes they read (README: Memory)"
        )
    if args.json:
        _common.write_json(args.json, {"memory": results, "environment": _common.environment()})
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _common.parser(__doc__)
    p.add_argument(
        "--size-gb",
        type=float,
        default=None,
        help=f"uncompressed GB of image+label ({DEFAULT_SIZE_GB})",
    )
    _common.add_data_dir_option(p, DEFAULT_DATA_DIR)
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (3)")
    p.add_argument(
        "--codecs", default=",".join(CODECS), help="comma-separated subset of zstd,lz4,none"
    )
    p.add_argument("--no-tune", action="store_true", help="skip the hand-tuned grid")
    p.add_argument(
        "--orders", action="store_true", help="only the per-rank and global orders and the mix"
    )
    p.add_argument("--tokens", action="store_true", help="add a ragged int32 tokens column")
    p.add_argument("--workers", type=int, default=2, help="processes writing the snapshots (2)")
    _common.add_json_option(p)
    _common.add_quick_option(p, f"{QUICK_SIZE_GB} GB")
    p.add_argument(
        "--memory",
        action="store_true",
        help="peak RSS of replays of --memory-sizes snapshots instead",
    )
    p.add_argument(
        "--memory-sizes",
        default=None,
        help=f"GB of the --memory snapshots (default {MEMORY_SMALL_GB:g},1,--size-gb)",
    )
    p.add_argument("--memory-child", metavar="PATH", default=None, help=argparse.SUPPRESS)
    p.add_argument("--epoch-child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    _common.resolve_quick(args, "size_gb", DEFAULT_SIZE_GB, QUICK_SIZE_GB, repeats=3)
    try:
        sizes = (
            [float(x) for x in args.memory_sizes.split(",") if x.strip()]
            if args.memory_sizes
            else [MEMORY_SMALL_GB, 1.0, args.size_gb]
        )
    except ValueError:
        p.error("--memory-sizes must be comma-separated numbers of GB, e.g. 0.2,1,2")
    args.memory_sizes = sorted({x for x in sizes if x > 0})
    args.codecs = _common.subset(p, "--codecs", args.codecs, CODECS)
    if args.size_gb <= 0 or args.repeats < 1 or args.workers < 0:
        p.error("need --size-gb > 0, --repeats >= 1, --workers >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        return memory_child(args.memory_child)
    if args.epoch_child:
        return epoch_child(args.epoch_child[0], args.epoch_child[1] == "1",
                           args.epoch_child[2:] == ["slot"])  # fmt: skip
    env = _common.environment()
    load_start = os.getloadavg()
    print(_common.load_at_start(_common.describe(env), load_start))
    if args.memory:
        code = memory_mode(args)
        print(f"load average {os.getloadavg()[0]:.2f} at end (1 min)")
        _common.print_data_kept(args.data_dir)
        return code

    snapshots = {
        c: _common.ensure_snapshot(args.data_dir, c, args.size_gb, args.tokens, args.workers)
        for c in args.codecs
    }
    configs = [RAW, BASE, BASE_COPY, *LOADER_CONFIGS] + ([] if args.no_tune else TUNED)
    if args.orders:
        configs = [BASE_COPY, STEADY, GLOBAL, MIX3]
    if args.tokens:  # (decode processes take fixed-width columns only: README, processes=)
        configs = [c for c in configs if c not in (STEADY_PROCS, BUSY_PROCS)]
        print("--tokens: the processes=2 configurations are left out (decode processes take "
              "columns of numbers and tensors only)", file=sys.stderr)  # fmt: skip
    runs: list[Run] = []
    for rep in range(args.repeats):
        order = _common.rotated(configs, rep * 3)
        for codec, s in snapshots.items():
            for config in order:
                if config in SLOT_CONFIGS and codec != "none":
                    continue  # compressed snapshots are read through slot windows anyway
                run = run_config(codec, config, s, args.tokens)
                runs.append(run)
                print(
                    f"  repeat {rep + 1}/{args.repeats} {codec:<5} {config:<42} "
                    f"{run.gbps:6.2f} GB/s {run.seconds:6.2f} s (cpu {run.cpu_seconds:.2f} s, "
                    f"re-warm {run.warm_gbps:.1f} GB/s)",
                    file=sys.stderr,
                    flush=True,
                )
    if not args.no_tune and not args.orders:
        for codec, s in snapshots.items():
            head_to_head(codec, s, runs, args)
    load_end = os.getloadavg()
    cold = [r for r in runs if r.warm_gbps < _common.COLD_GBPS]
    summaries = [summarise(c, s, runs, configs) for c, s in snapshots.items()]
    print_tables(summaries, runs, args)
    print(_common.load_summary(_common.describe(env), load_start[0], load_end[0]))
    print(
        f"page cache re-warmed before every run; {len(cold)} of {len(runs)} re-warming reads "
        f"ran below {_common.COLD_GBPS:g} GB/s (the cache had been partly evicted meanwhile)"
    )
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        doc = {
            "summaries": [asdict(cs) for cs in summaries],
            "runs": [{**asdict(r), "gbps": r.gbps} for r in runs],
            "environment": _common.run_environment(env, (load_start, load_end), args, BATCH_SIZE),
        }
        _common.write_json(args.json, doc)
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
