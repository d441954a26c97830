"""Benchmark: the materialisation overhead of ``snap create`` on a CPU-heavy pipeline.

Compares the wall time of
  * a plain loop: the pipeline called over every input in this process, every yielded
    record consumed (array sizes summed) and nothing written;
  * ``snapshot_cli.create(..., workers=1)``: the same work in one worker process, written
    as zstd Arrow shards; its ratio to the loop is the overhead (target <= 1.10);
  * ``snapshot_cli.create(..., workers=2)``: its speedup over workers=1 (target >= 1.7x on a
    2-core machine);
  * with ``--ray``: ``executor="ray"`` on a local 2-CPU Ray cluster started for the run,
    with 1 and 2 tasks in flight: Ray's overhead per task against the local executor, and
    its scaling from 1 to 2 CPUs.

The configurations alternate within each repeat (the order rotates between repeats) and the
table reports medians. Every snap run writes into a fresh temporary directory that is removed
afterwards: snap would otherwise reuse a snapshot with the same fingerprint and do no work.
This is a report, not a test: nothing is asserted.

    python benchmarks/create.py                 # ~1-2 minutes
    python benchmarks/create.py --quick         # smoke run, a few seconds
    python benchmarks/create.py --inputs 800 --repeats 5 --json results.json
    python benchmarks/create.py --ray            # adds --executor ray on a local Ray cluster
    python benchmarks/create.py --incremental    # growing a snapshot (issue 18), see below

``--incremental`` instead times, per repeat in a fresh directory, a full create of the
inputs, then the same create with 5 % more inputs (appended, as a new day of data is), then
with one input replaced (another seed in the middle of the list): what the incremental
creates cost against the full one (targets: <= 10 % for 5 % more; <= 2 tasks' work for one
changed input), with the tasks each computed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Before numpy: importing _common pins native thread pools to one thread, so that the loop and
# workers=1 use one core each and workers=2 does not oversubscribe the machine. Worker
# processes are spawned and inherit this environment. (The pipeline avoids BLAS anyway.)
import _common
import numpy as np

import snapshot_cli as snap

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE_FILE = os.path.join(HERE, "cpu_pipeline.py")
PIPELINE_SPEC = f"{PIPELINE_FILE}:preprocess"  # what the worker processes import

DEFAULT_INPUTS = 400  # ~12 s of plain loop at ~30 ms per input
QUICK_INPUTS = 16
LOOP = "loop"


@dataclass
class Run:
    """One timed run of one configuration."""

    config: str
    seconds: float
    cpu_seconds: float  # this process + its (reaped) children
    records: int
    bytes: int = 0  # shard bytes on disk (snap runs)
    uncompressed_bytes: int = 0
    shards: int = 0
    tasks: int = 0


@dataclass
class Summary:
    """Medians per configuration and the derived ratios."""

    inputs: int
    passes: int
    repeats: int
    workers: int
    compression: str
    median_seconds: dict[str, float] = field(default_factory=dict)
    median_cpu_seconds: dict[str, float] = field(default_factory=dict)
    overhead_ratio: float = 0.0  # snap workers=1 / loop
    speedup: float = 0.0  # snap workers=1 / snap workers=N
    machine_speedup: float = 0.0  # loop / plain loop in N processes: what the cores allow
    records: int = 0
    bytes: int = 0
    uncompressed_bytes: int = 0
    shards: int = 0
    tasks: int = 0


def load_pipeline() -> ModuleType:
    """Import cpu_pipeline.py from this directory, however this script was started."""
    spec = importlib.util.spec_from_file_location("bench_cpu_pipeline", PIPELINE_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {PIPELINE_FILE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def consume(records: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """Touch every record like a writer would have to: → (records, array bytes)."""
    count = nbytes = 0
    for record in records:
        count += 1
        for value in record.values():
            if isinstance(value, np.ndarray):
                nbytes += value.nbytes
    return count, nbytes


def run_loop(fn: Callable[..., Iterable[dict[str, Any]]], items: list[int], passes: int) -> Run:
    records = 0
    with _common.Stopwatch(children=True) as sw:
        for item in items:
            n, _ = consume(fn(item, passes=passes))
            records += n
    return Run(LOOP, sw.seconds, sw.cpu, records)


def _loop_chunk(items: list[int], passes: int) -> int:
    """Worker side of the plain parallel loop: the function over a chunk, records counted."""
    fn = load_pipeline().preprocess
    return sum(consume(fn(item, passes=passes))[0] for item in items)


def run_parallel_loop(config: str, items: list[int], passes: int, workers: int) -> Run:
    """The machine's own parallel scaling: the plain loop in ``workers`` spawned processes,
    the inputs cut into 32 chunks like snap's tasks, nothing written."""
    ctx = multiprocessing.get_context("spawn")
    chunks = [items[i::32] for i in range(32) if items[i::32]]
    with (
        _common.Stopwatch(children=True) as sw,
        ProcessPoolExecutor(workers, mp_context=ctx) as pool,
    ):
        records = sum(pool.map(_loop_chunk, chunks, [passes] * len(chunks)))
    return Run(config, sw.seconds, sw.cpu, records)


def run_snap(
    config: str,
    make_inputs: Callable[[], list[int]],
    passes: int,
    workers: int,
    compression: str,
    tmp_root: str | None,
    ray_address: str | None = None,
) -> Run:
    tmp = tempfile.mkdtemp(prefix="snap-bench-", dir=tmp_root)
    try:
        output = os.path.join(tmp, "snapshot")
        with _common.Stopwatch(children=True) as sw:
            info = snap.create(
                PIPELINE_SPEC,
                output,
                inputs_from=make_inputs,
                params={"passes": passes},
                workers=workers,
                compression=compression,
                progress=False,
                **({"executor": "ray", "ray_address": ray_address} if ray_address else {}),
            )
        seconds, cpu = sw.seconds, sw.cpu
        if info.reused:  # cannot happen with a fresh directory; would make the numbers void
            raise RuntimeError(f"snap reused an existing snapshot at {output}")
        return Run(
            config,
            seconds,
            cpu,
            info.num_records,
            info.bytes,
            info.uncompressed_bytes,
            info.num_shards,
            info.tasks,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(cpus: int, tmp_root: str | None = None) -> Iterator[str]:
    """A local Ray head node (``ray start --head --block``) with its own temp dir under
    ``tmp_root``, stopped afterwards; yields its address.

    Only this node is stopped, never ``ray stop``, which stops every Ray process on the
    machine (a cluster or job the user runs beside the benchmark too): ``ray start --block``
    stays in the foreground in a process group of its own, its GCS, raylet and monitors in
    that group and bound to it (they die with it; the Ray workers exit with the raylet). The
    group is killed while its leader is still this process's unreaped child, so its id cannot
    have been reused by another process.

    Raises:
        ChildError: ``ray start`` failed (e.g. Ray's socket paths under ``tmp_root`` too long).
    """
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="snapray-", dir=tmp_root)  # short: Ray's socket paths
    try:
        start = subprocess.Popen(
            [ray_bin, "start", "--head", "--block", f"--num-cpus={cpus}", f"--port={port}",
             f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        said: list[str] = []
        up = False
        try:
            out = start.stdout
            if out is None:  # (never: stdout=PIPE)
                raise RuntimeError("ray start: no stdout")
            for line in out:  # until it blocks: the node is up (or it exited)
                said.append(line)
                if "block forever" in line:
                    up = True
                    break
            if up:
                yield f"127.0.0.1:{port}"
        finally:
            with contextlib.suppress(ProcessLookupError):  # (its leader not reaped yet)
                os.killpg(start.pid, signal.SIGKILL)
            said.append(start.communicate()[0])  # what it said since; closes the pipe
        if not up:
            raise _common.ChildError("ray start --head", start.returncode, "".join(said))
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def summarise(args: argparse.Namespace, runs: list[Run], configs: list[str]) -> Summary:
    s = Summary(args.inputs, args.passes, args.repeats, args.workers, args.compression)
    for config in configs:
        mine = [r for r in runs if r.config == config]
        s.median_seconds[config] = statistics.median(r.seconds for r in mine)
        s.median_cpu_seconds[config] = statistics.median(r.cpu_seconds for r in mine)
    one, many, plain = configs[1], configs[2], configs[3]
    s.overhead_ratio = s.median_seconds[one] / s.median_seconds[LOOP]
    s.speedup = s.median_seconds[one] / s.median_seconds[many]
    s.machine_speedup = s.median_seconds[LOOP] / s.median_seconds[plain]
    last = next(r for r in reversed(runs) if r.config == one)
    s.records, s.bytes, s.uncompressed_bytes = last.records, last.bytes, last.uncompressed_bytes
    s.shards, s.tasks = last.shards, last.tasks
    return s


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def print_table(s: Summary, runs: list[Run], configs: list[str]) -> None:
    one, many, plain = configs[1], configs[2], configs[3]
    notes = {
        LOOP: "baseline (in process, writes nothing)",
        one: f"overhead {s.overhead_ratio:.3f}x the loop's time (target <= 1.10, lower is better)",
        many: f"speedup {s.speedup:.2f}x vs workers=1 (target >= 1.7, higher is better)",
        plain: f"the machine's scaling: {s.machine_speedup:.2f}x vs loop",
    }
    print()
    print(
        f"snap create benchmark: {s.inputs} inputs x {s.passes} passes, "
        f"{s.compression}, median of {s.repeats}"
    )
    header = f"{'configuration':<16} {'median s':>9} {'cpu s':>7}  {'runs (s)':<22} note"
    _common.print_header(header, 40)
    for config in configs:
        times = _common.runs_text(r.seconds for r in runs if r.config == config)
        print(
            f"{config:<16} {s.median_seconds[config]:>9.2f} "
            f"{s.median_cpu_seconds[config]:>7.2f}  {times:<22} {notes[config]}"
        )
    print(
        f"records {s.records}, tasks {s.tasks}, shards {s.shards}, bytes on disk "
        f"{s.bytes} ({mib(s.bytes)}; uncompressed {mib(s.uncompressed_bytes)})"
    )
    rate = s.records / s.median_seconds[many]
    print(f"throughput with workers={s.workers}: {rate:.0f} records/s")


def print_ray(s: Summary, runs: list[Run], ray_configs: list[str], local_one: str) -> None:
    """Ray rows: per-task overhead vs the local executor, and scaling with tasks in flight."""
    med = {c: statistics.median(r.seconds for r in runs if r.config == c) for c in ray_configs}
    one, many = ray_configs
    per_task = (med[one] - s.median_seconds[local_one]) / max(1, s.tasks)
    for config in ray_configs:
        times = _common.runs_text(r.seconds for r in runs if r.config == config)
        print(f"{config:<16} {med[config]:>9.2f} {'':>7}  {times:<22}")
    print(
        f"ray overhead per task: {per_task * 1000:.0f} ms ({s.tasks} tasks; ray 1 at a time vs "
        f"snap workers=1); ray scaling: {med[one] / med[many]:.2f}x from 1 to "
        f"{s.workers} tasks at a time"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _common.parser(__doc__)
    p.add_argument("--inputs", type=int, default=None, help=f"inputs (default {DEFAULT_INPUTS})")
    p.add_argument("--passes", type=int, default=36, help="blur/FFT passes per input (CPU work)")
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (3)")
    p.add_argument("--workers", type=int, default=2, help="workers of the parallel run (2)")
    p.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "none"])
    p.add_argument("--tmpdir", default=None, help="where the temporary snapshots go")
    _common.add_json_option(p)
    p.add_argument(
        "--ray",
        action="store_true",
        help="also run --executor ray on a local Ray cluster (1 and --workers tasks at a time)",
    )
    p.add_argument("--incremental", action="store_true", help="time growing a snapshot")
    _common.add_quick_option(p, f"{QUICK_INPUTS} inputs")
    args = p.parse_args(argv)
    _common.resolve_quick(args, "inputs", DEFAULT_INPUTS, QUICK_INPUTS, repeats=3)
    if args.incremental and args.ray:
        p.error("--incremental times local creates only: leave out --ray")
    if args.tmpdir is not None:  # (made, as --data-dir is elsewhere)
        os.makedirs(args.tmpdir, exist_ok=True)
    if args.inputs < 1 or args.repeats < 1 or args.workers < 2 or args.passes < 0:
        p.error("need --inputs >= 1, --repeats >= 1, --workers >= 2, --passes >= 0")
    return args


def incremental(args: argparse.Namespace) -> int:
    """``--incremental``: a full create, then 5 % more inputs, then one input changed."""
    n, extra = args.inputs, max(1, args.inputs // 20)
    changed_at = n // 2
    rows: dict[str, list[tuple[float, int, int]]] = {"full": [], "add 5%": [], "change 1": []}
    for rep in range(args.repeats):
        tmp = tempfile.mkdtemp(prefix="snap-bench-", dir=args.tmpdir)
        try:
            out = os.path.join(tmp, "snapshot")
            seeds = list(range(n))
            for name, items in (
                ("full", seeds),
                ("add 5%", seeds + list(range(n, n + extra))),
                ("change 1", [*seeds[:changed_at], 10**6, *seeds[changed_at + 1 :],
                              *range(n, n + extra)]),
            ):  # fmt: skip
                with _common.Stopwatch(children=True) as sw:
                    info = snap.create(PIPELINE_SPEC, out, inputs=items,
                                       params={"passes": args.passes}, workers=args.workers,
                                       compression=args.compression)  # fmt: skip
                rows[name].append((sw.seconds, info.tasks - info.tasks_reused, info.tasks))
                print(f"  repeat {rep + 1}/{args.repeats} {name:<9} {sw.seconds:6.2f} s, "
                      f"{info.tasks - info.tasks_reused} of {info.tasks} tasks computed "
                      f"(version {info.version})", file=sys.stderr, flush=True)  # fmt: skip
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    full = statistics.median(r[0] for r in rows["full"])
    per_task = full / max(1, statistics.median(r[2] for r in rows["full"]))
    print(f"\nsnap incremental create: {n} inputs (~30 ms each), workers={args.workers}, "
          f"median of {args.repeats}")  # fmt: skip
    print(f"{'create':<10} {'median s':>9} {'x full':>7} {'tasks computed':>15}  target")
    for name, runs in rows.items():
        sec = statistics.median(r[0] for r in runs)
        computed = statistics.median(r[1] for r in runs)
        target = ""
        if name == "add 5%":
            target = _common.verdict(sec / full <= 0.10, "<= 0.10 x full")
        elif name == "change 1":
            target = _common.verdict(computed <= 2, "<= 2 tasks computed")
        print(
            f"{name:<10} {sec:9.2f} {sec / full:7.3f} {computed:>15.0f}  {target}  runs: "
            + _common.runs_text(r[0] for r in runs)
        )
    print(
        f"(x full: the create's time / the full create's, lower is better; one task of the full "
        f"create: {per_task:.2f} s on average, as wall time over {args.workers} workers; the "
        "incremental creates also list and key every input)"
    )
    if args.json:
        _common.write_json(args.json, {"incremental": {
            name: [{"seconds": s, "computed": c, "tasks": t} for s, c, t in runs]
            for name, runs in rows.items()}, "environment": _common.environment()})  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.incremental:
        return incremental(args)
    pipeline = load_pipeline()
    items = pipeline.make_inputs(args.inputs)
    make_inputs = functools.partial(pipeline.make_inputs, args.inputs)
    consume(pipeline.preprocess(0, passes=args.passes))  # warm up numpy's FFT plans etc.

    configs = [
        LOOP,
        "snap workers=1",
        f"snap workers={args.workers}",
        f"loop x{args.workers} procs",
    ]
    workers = {configs[1]: 1, configs[2]: args.workers}
    ray_configs = ["ray 1 at a time", f"ray {args.workers} at a time"] if args.ray else []
    workers.update(dict(zip(ray_configs, [1, args.workers], strict=False)))
    stack = contextlib.ExitStack()
    address = stack.enter_context(ray_cluster(args.workers, args.tmpdir)) if args.ray else None
    cores = _common.usable_cores()
    load_start = os.getloadavg()[0]
    env = (
        f"python {platform.python_version()}, numpy {np.__version__}, snap {snap.__version__}, "
        f"{cores} usable cores"
    )
    print(env, file=sys.stderr)
    runs: list[Run] = []
    every = configs + ray_configs
    for rep in range(args.repeats):
        for config in _common.rotated(every, rep):
            if config in ray_configs:
                run = run_snap(config, make_inputs, args.passes, workers[config],
                               args.compression, args.tmpdir, address)  # fmt: skip
            elif config == LOOP:
                run = run_loop(pipeline.preprocess, items, args.passes)
            elif config == configs[3]:
                run = run_parallel_loop(config, items, args.passes, args.workers)
            else:
                run = run_snap(
                    config, make_inputs, args.passes, workers[config], args.compression, args.tmpdir
                )
            runs.append(run)
            print(
                f"  repeat {rep + 1}/{args.repeats} {config:<16} {run.seconds:7.2f} s "
                f"(cpu {run.cpu_seconds:.2f} s, {run.records} records)",
                file=sys.stderr,
                flush=True,
            )

    stack.close()
    load_end = os.getloadavg()[0]
    summary = summarise(args, runs, configs)
    print_table(summary, runs, configs)
    if ray_configs:
        print_ray(summary, runs, ray_configs, configs[1])
    print(_common.load_summary(env, load_start, load_end))
    if args.quick:
        print("(--quick: a smoke run; fixed start-up costs dominate, so ignore the targets)")
    if args.json:
        doc = {
            "summary": asdict(summary),
            "runs": [asdict(r) for r in runs],
            "environment": {
                "python": platform.python_version(),
                "numpy": np.__version__,
                "snap": snap.__version__,
                "cores": cores,
                "load_average_start": load_start,
                "load_average_end": load_end,
            },
        }
        _common.write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
