"""Benchmark: a pipeline of numpy matrix products under ``snap create --workers N``, its
workers' native thread pools capped by snap against the libraries' own defaults.

numpy's OpenBLAS (and OpenMP, MKL, ...) starts a thread per core in every process: N workers
on N cores then run N x N threads. snap caps each pool at ``cores // workers`` where the user
set no size (``snapshot_cli/writers/native_threads.py``). Two configurations alternate in
each repeat, each a fresh create of the same inputs:

  * **library defaults**: every variable snap would set given as the number of cores (what
    OpenBLAS and OpenMP choose when nothing is set), which snap passes on as a user's own;
  * **snap's caps**: none of them set.

Per input the function multiplies a ``--size`` x ``--size`` float32 matrix by itself six
times (with a ``tanh`` between), as a pipeline of embeddings, projections or whitening
would. Reported: each configuration's wall and CPU seconds (of the create's processes), and
the ratio of their medians (library defaults / snap's caps; higher: the caps help more). A
report, nothing is asserted.

    python benchmarks/threads.py               # ~1 minute on 2 cores
    python benchmarks/threads.py --quick       # smoke run
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # the shared scaffolding (pins this process's pools: it does no BLAS itself)
import numpy as np

import snapshot_cli as snap
from snapshot_cli.cores import cores
from snapshot_cli.writers.native_threads import THREAD_VARIABLES


def preprocess(seed: int, size: int) -> list[dict[str, Any]]:
    """The pipeline: six products of a seeded matrix with itself; one record a seed."""
    a = np.random.default_rng(seed).standard_normal((size, size), dtype=np.float32)
    for _ in range(6):
        a = np.tanh(a @ a.T / size)
    return [{"x": a[:8].copy(), "label": seed % 10}]


def one_create(inputs: int, size: int, workers: int, defaults: bool) -> tuple[float, float]:
    """A fresh create in a temporary directory → (wall seconds, CPU seconds of this process
    and its workers)."""
    for name in THREAD_VARIABLES:
        if defaults:
            os.environ[name] = str(cores())
        else:
            os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="snap-threads-") as tmp:
        cpu = _common.cpu_time(children=True)
        started = time.perf_counter()
        snap.create(f"{os.path.abspath(__file__)}:preprocess", os.path.join(tmp, "s"),
                    inputs=list(range(inputs)), params={"size": size}, workers=workers,
                    inputs_per_task=1)  # fmt: skip
        return time.perf_counter() - started, _common.cpu_time(children=True) - cpu


def main() -> int:
    p = _common.parser(__doc__)
    p.add_argument("--inputs", type=int, default=None, help="matrices (400; --quick: 60)")
    p.add_argument("--size", type=int, default=384, help="a matrix's side (384)")
    p.add_argument("--workers", type=int, default=cores(), help="worker processes (cores)")
    p.add_argument("--repeats", type=int, default=None, help="runs of each (3; --quick: 1)")
    _common.add_quick_option(p, "60 inputs")
    _common.add_json_option(p)
    args = p.parse_args()
    _common.resolve_quick(args, "inputs", 400, 60, 3)
    if args.workers < 1:
        p.error("--workers must be at least 1 (0 runs in this process: nothing to cap)")
    for option in ("inputs", "size", "repeats"):
        if getattr(args, option) < 1:
            p.error(f"--{option} must be at least 1")
    env = _common.environment()
    print(_common.describe(env))
    print(f"{args.inputs} inputs of six {args.size}x{args.size} float32 products, "
          f"--workers {args.workers} on {cores()} cores, {args.repeats} repeats")  # fmt: skip
    names = {True: "library defaults", False: "snap's caps"}
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for r in range(args.repeats):
        for defaults in _common.rotated([True, False], r):
            runs[defaults].append(one_create(args.inputs, args.size, args.workers, defaults))
    medians = {}
    for defaults, name in names.items():
        wall = statistics.median(w for w, _ in runs[defaults])
        cpu = statistics.median(u for _, u in runs[defaults])
        medians[defaults] = wall
        walls = _common.runs_text((w for w, _ in runs[defaults]), 2)
        print(f"  {name:17} {wall:6.2f} s wall, {cpu:6.2f} CPU-s  (walls {walls})")
    ratio = medians[True] / medians[False]
    print(f"library defaults / snap's caps, wall: {ratio:.2f}x (higher: the caps save more)")
    if args.json:
        _common.write_json(args.json, {"environment": env, "args": vars(args), "ratio": ratio,
                                 "runs": {names[d]: runs[d] for d in names}})  # fmt: skip
    return 0


if __name__ == "__main__":
    _common.run_main(main)
