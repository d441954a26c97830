"""Benchmark: commands against a snapshot's metadata size, wide tables and many shards.

Benchmarks elsewhere time gigabytes in 16 shards of a few columns; this one grows the counts
and reports how each command's time grows with them: a snapshot of ``C`` float32 columns (64
records) for ``C`` in ``--columns``, and one of ``S`` shards (one task, a record batch of 16
records a shard) for ``S`` in ``--shards``, each written once into ``--data-dir`` and reused.
Timed, medians of ``--repeats``:

  * columns: ``snap.open`` and ``loader()`` in this process, and ``snap inspect`` (a fresh
    process, as a user runs it: its start, ~0.4 s, included);
  * shards: ``snap verify`` and ``snap inspect`` (fresh processes).

For each step to the next size, the growth as an exponent: ``log(t2 / t1) / log(n2 / n1)``
(1.0: linear; 2.0: quadratic). A scale probe found 3.7-4x a doubling of columns in ``open``
(a duplicate-name check that counted every name once per column) and verify's main thread
quadratic in shards (a wait on every pending check per completion): both are linear now. A
report: nothing is asserted.

    python benchmarks/metadata.py            # ~3 minutes (the first time ~1 more to write)
    python benchmarks/metadata.py --quick    # small sizes, 1 repeat
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the benchmarks' shared scaffolding (pins native thread pools first)
import numpy as np

import snapshot_cli as snap

COLUMNS, QUICK_COLUMNS = (1_600, 3_200, 6_400, 12_800), (200, 400, 800)
SHARDS, QUICK_SHARDS = (1_600, 3_200, 6_400, 12_800), (100, 200, 400)
SHARD_ROWS = 16
DATA_VERSION = 2


def wide(item: int, columns: int, version: int) -> Iterator[snap.Batch]:
    del item, version
    rng = np.random.default_rng(0)
    yield snap.Batch(**{f"f{i:05d}": rng.standard_normal(64, np.float32) for i in range(columns)})


def many(item: int, shards: int, version: int) -> Iterator[snap.Batch]:
    del item, version
    for i in range(shards):
        yield snap.Batch(x=np.full(SHARD_ROWS, i, np.int64), y=np.zeros(SHARD_ROWS, np.float32))


def ensure(data_dir: str, kind: str, n: int) -> str:
    path = os.path.join(data_dir, f"{kind}{n}-v{DATA_VERSION}")  # (another version: apart)
    fn = wide if kind == "columns" else many
    # one shard a batch: a shard is closed once it reaches shard_size (1 byte: at once)
    params = {kind: n, "version": DATA_VERSION}
    with contextlib.suppress(snap.SnapError):  # (written by an earlier run: as it is)
        if snap.open(path).manifest.pipeline.get("params") == params:
            return path
    size, rows = ("256MiB", None) if kind == "columns" else (1, SHARD_ROWS)
    snap.create(fn, path, inputs=[0], params=params, workers=0,
                compression="lz4", shard_size=size, batch_rows=rows, progress=False)  # fmt: skip
    return path


def command(*args: str) -> float:
    """Seconds of ``snap ARGS`` in a fresh process (its start included)."""
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", *args], capture_output=True,
                         text=True, timeout=1800, check=False)  # fmt: skip
    if res.returncode != 0:
        raise _common.ChildError(f"snap {args[0]}", res.returncode, res.stderr)
    return time.perf_counter() - start


def in_process(path: str) -> tuple[float, float]:
    """Seconds of ``snap.open`` and then of ``loader()``."""
    start = time.perf_counter()
    s = snap.open(path)
    opened = time.perf_counter()
    s.loader(batch_size=16, shuffle=True, seed=0)
    return opened - start, time.perf_counter() - opened


def growth(sizes: Sequence[int], times: Sequence[float]) -> list[str]:
    steps = range(1, len(sizes))
    return [
        f"{math.log(times[i] / times[i - 1]) / math.log(sizes[i] / sizes[i - 1]):.2f}"
        for i in steps
    ]


def report(
    label: str, sizes: Sequence[int], steps: dict[str, Callable[[int], float]], repeats: int
) -> dict[str, dict[str, list[float]]]:
    runs: dict[str, dict[str, list[float]]] = {s: {str(n): [] for n in sizes} for s in steps}
    for r in range(repeats):
        for n in _common.rotated(list(sizes), r):
            for step, timed in steps.items():
                runs[step][str(n)].append(timed(n))
    print(f"\n{label}: seconds (median of {repeats}), and growth exponents between sizes")
    print(f"{'':>18}" + "".join(f"{n:>10,}" for n in sizes) + "   growth (1.0: linear)")
    for step in steps:
        medians = [statistics.median(runs[step][str(n)]) for n in sizes]
        print(f"{step:>18}" + "".join(f"{t:>10.3f}" for t in medians)
              + "   " + " ".join(growth(sizes, medians)))  # fmt: skip
    return runs


def main() -> int:
    p = _common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=None, help="runs per size (3)")
    _common.add_data_dir_option(p, _common.out_dir("metadata"))
    _common.add_json_option(p)
    _common.add_quick_option(p, "hundreds of columns and shards")
    args = p.parse_args()
    args.repeats = args.repeats or (1 if args.quick else 3)
    columns = QUICK_COLUMNS if args.quick else COLUMNS
    shards = QUICK_SHARDS if args.quick else SHARDS
    paths = {("columns", n): ensure(args.data_dir, "columns", n) for n in columns}
    paths.update({("shards", n): ensure(args.data_dir, "shards", n) for n in shards})
    out = {
        "columns": report("columns (float32, 64 records)", columns, {
            "snap.open": lambda n: in_process(paths["columns", n])[0],
            "loader()": lambda n: in_process(paths["columns", n])[1],
            "snap inspect": lambda n: command("inspect", paths["columns", n]),
        }, args.repeats),
        "shards": report(f"shards (one task, {SHARD_ROWS} records a shard)", shards, {
            "snap verify": lambda n: command("verify", "--quiet", paths["shards", n]),
            "snap inspect": lambda n: command("inspect", paths["shards", n]),
        }, args.repeats),
    }  # fmt: skip
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        _common.write_json(args.json, out)
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
