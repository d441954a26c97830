"""Benchmark: ``to_tf()`` with ragged columns (token sequences), against the bare loader.

A snapshot of ``--records`` records, each a ragged ``tokens`` column (int32, 1 to
``--max-len`` tokens), a ragged ``spans`` column (int32 pairs, ``(k, 2)``, 0 to 7 rows) and
an int64 ``label``, is written into a temporary directory. In one process, TensorFlow
imported and warmed up first, each repeat times, alternating:

  * **build**: ``to_tf()`` plus its first batch, for the label alone (dense), with
    ``tokens``, and with ``tokens`` and ``spans`` (what a user waits before training starts;
    the first ``to_tf()`` of a process, paying TensorFlow's own start, is not counted);
  * **pass**: one shuffled pass of ``loader.to_tf()`` and of the same loader bare (numpy
    batches), every column: the ratio bare / ``to_tf()`` time is the adapter's share.

Medians of ``--repeats``; the raw runs are printed too. A report, not a test: nothing is
asserted.

    python benchmarks/tf_ragged.py                 # ~1 minute
    python benchmarks/tf_ragged.py --records 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: F401  (pins native thread pools before numpy)
import numpy as np

import snapshot_cli as snap

BUILDS = {
    "dense": ["label"],
    "1 ragged": ["label", "tokens"],
    "2 ragged": ["label", "tokens", "spans"],
}


def records(args: argparse.Namespace) -> Any:
    @snap.ragged("tokens", "spans")
    def make(start: int) -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng(start)
        for n in range(start, min(start + 10_000, args.records)):
            yield {
                "tokens": rng.integers(0, 50_000, rng.integers(1, args.max_len + 1), np.int32),
                "spans": rng.integers(0, 100, (rng.integers(0, 8), 2), np.int32),
                "label": np.int64(n % 10),
            }

    return make


def build_seconds(s: snap.Snapshot, batch: int, columns: list[str]) -> float:
    t0 = time.perf_counter()
    ds = s.loader(batch, columns=columns, seed=1).to_tf()
    next(iter(ds))
    took = time.perf_counter() - t0
    ds.close()  # its loader's threads stop before the next timing
    return took


def pass_seconds(s: snap.Snapshot, batch: int, tf: bool) -> float:
    loader = s.loader(batch, seed=2)
    source = loader.to_tf() if tf else loader
    t0 = time.perf_counter()
    n = sum(1 for _ in source)
    took = time.perf_counter() - t0
    assert n == len(loader), (n, len(loader))
    loader.close()
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tmp = tempfile.TemporaryDirectory(prefix="snap-tf-ragged-")  # removed on return
    out = tmp.name + "/tokens"
    starts = list(range(0, args.records, 10_000))
    snap.create(records(args), out, inputs=starts, workers=0)
    s = snap.open(out)
    print(f"{s.num_records} records, batch {args.batch_size}, TensorFlow {tf.__version__}")
    build_seconds(s, args.batch_size, BUILDS["dense"])  # TensorFlow's own start: not counted
    builds: dict[str, list[float]] = {name: [] for name in BUILDS}
    ratios, bare_runs, tf_runs = [], [], []
    for _ in range(args.repeats):
        for name, columns in BUILDS.items():
            builds[name].append(build_seconds(s, args.batch_size, columns))
        bare, in_tf = (
            pass_seconds(s, args.batch_size, False),
            pass_seconds(s, args.batch_size, True),
        )
        bare_runs.append(bare)
        tf_runs.append(in_tf)
        ratios.append(bare / in_tf)
    for name, runs in builds.items():
        raw = " ".join(f"{x:.2f}" for x in runs)
        print(f"build + first batch, {name:8}: {statistics.median(runs):.2f} s  (runs: {raw})")
    per = 1e3 / len(s.loader(args.batch_size))
    print(
        f"pass: bare {statistics.median(bare_runs) * per:.2f} ms a batch, to_tf() "
        f"{statistics.median(tf_runs) * per:.2f} ms a batch: x bare "
        f"{statistics.median(ratios):.2f}  (runs: {' '.join(f'{r:.2f}' for r in ratios)}; "
        "bare time / to_tf() time, higher is better)"
    )
    return 0


if __name__ == "__main__":
    _common.run_main(main)
