"""Benchmark: the first batch of snapshots written with small record batches (issue 16).

``snap create --batch-rows N`` (for class-sorted data, so that a shuffle can mix small pieces)
writes record batches of N records. The loader's first window is capped by bytes, records,
shards and record batches: before the last cap, a snapshot of 200-byte records written one per
record batch decoded ~160,000 record batches (~35 us of Python each) before its first batch.
A snapshot of ``--rows`` records (``x`` float32[48] and ``label`` int64: 200 bytes) is written
once per ``--batch-rows`` value (lz4) into ``--data-dir`` and reused by later runs. With the
page cache warm, each configuration gets, alternating within each repeat:

  * decode + one copy (the baseline): every record batch of every shard decoded by ``pa.ipc``
    from a memory map and each column copied once into numpy, in this process;
  * snap, in a fresh process (as a sweep's trial starts), ``shuffle=True``, batch 256: the
    time from ``iter()`` to the first batch (target <= 0.3 s) and the whole first epoch.

Reported: the first batch in seconds and as a share of the epoch, and the epoch as a fraction
of the baseline's. Medians of ``--repeats``, with the raw runs. A report: nothing is asserted.

    python benchmarks/first_batch.py            # ~1 minute (the first time ~10 s more to write)
    python benchmarks/first_batch.py --quick    # 50,000 records, 1 repeat
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the benchmarks' shared scaffolding (pins native thread pools first)
import numpy as np
import pyarrow as pa

import snapshot_cli as snap

BATCH_ROWS = (1, 16, 1024)  # 1,024: snap's default
DEFAULT_ROWS, QUICK_ROWS = 200_000, 50_000
FEATURES = 48
CHUNK = 10_000
DATA_VERSION = 1

CHILD = """
import sys, time
import snapshot_cli as snap
loader = snap.open(sys.argv[1]).loader(256, shuffle=True, seed=0)
start = time.perf_counter()
batches = iter(loader)
n = len(next(batches)["label"])
first = time.perf_counter() - start
n += sum(len(b["label"]) for b in batches)
print(first, time.perf_counter() - start, n)
"""


def make(item: list[int], version: int) -> Iterator[snap.Batch]:
    """Input ``[index, rows]``: ``rows`` records, ``label`` sorted by class (as such data is)."""
    del version  # (in the params: a change of the data changes the fingerprint)
    index, rows = item
    rng = np.random.default_rng(index)
    x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
    yield snap.Batch(x=x, label=np.full(rows, index, np.int64))


def ensure(data_dir: str, rows: int, batch_rows: int) -> str:
    path = os.path.join(data_dir, f"rows{rows}-batch{batch_rows}")
    items = [[i, min(CHUNK, rows - a)] for i, a in enumerate(range(0, rows, CHUNK))]
    snap.create(make, path, inputs=items, params={"version": DATA_VERSION}, workers=0,
                compression="lz4", batch_rows=batch_rows, progress=False)  # fmt: skip
    return path


def baseline(path: str) -> float:
    """Seconds to decode every record batch of the snapshot and copy each column once."""
    s = snap.open(path)
    files = [os.path.join(path, e.path) for e in s.shards]
    start = time.perf_counter()
    for name in files:
        with pa.memory_map(name) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                for column in batch.columns:
                    values = (
                        column.flatten() if pa.types.is_fixed_size_list(column.type) else column
                    )
                    np.array(values.to_numpy(zero_copy_only=False), copy=True)
    return time.perf_counter() - start


def fresh_process(path: str) -> tuple[float, float]:
    res = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True,
                         timeout=600, check=False)  # fmt: skip
    if res.returncode != 0:
        raise _common.ChildError("the loader's process", res.returncode, res.stderr)
    first, epoch, _ = res.stdout.split()
    return float(first), float(epoch)


def main() -> int:
    p = _common.parser(__doc__)
    p.add_argument("--rows", type=int, default=None, help=f"records ({DEFAULT_ROWS:,})")
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (3)")
    _common.add_data_dir_option(p, _common.out_dir("first-batch"))
    _common.add_json_option(p)
    _common.add_quick_option(p, f"{QUICK_ROWS:,} records")
    args = p.parse_args()
    _common.resolve_quick(args, "rows", DEFAULT_ROWS, QUICK_ROWS, 3)
    paths = {n: ensure(args.data_dir, args.rows, n) for n in BATCH_ROWS}
    runs: dict[int, dict[str, list[float]]] = {n: {"first": [], "epoch": [], "base": []}
                                               for n in BATCH_ROWS}  # fmt: skip
    for r in range(args.repeats):
        for n in _common.rotated(BATCH_ROWS, r):
            s = snap.open(paths[n])
            _common.rewarm(os.path.join(paths[n], e.path) for e in s.shards)
            runs[n]["base"].append(baseline(paths[n]))
            first, epoch = fresh_process(paths[n])
            runs[n]["first"].append(first)
            runs[n]["epoch"].append(epoch)
    print(f"{args.rows:,} records of 200 bytes, lz4, batch 256, shuffled first epoch in a fresh "
          f"process; medians of {args.repeats}")  # fmt: skip
    print(f"{'--batch-rows':>12} {'first batch':>12} {'of epoch':>9} {'epoch x base':>13}  runs")
    out = {}
    for n in BATCH_ROWS:
        first, epoch = statistics.median(runs[n]["first"]), statistics.median(runs[n]["epoch"])
        pairs = zip(runs[n]["base"], runs[n]["epoch"], strict=True)
        ratio = statistics.median(b / e for b, e in pairs)
        ok = _common.verdict(first <= 0.3, "<= 0.3 s")
        print(f"{n:>12} {first:>10.3f} s {first / epoch:>9.2f} {ratio:>13.2f}  first "
              f"{_common.runs_text(runs[n]['first'], 3)}  {ok}")  # fmt: skip
        out[n] = {"first_batch_s": first, "epoch_s": epoch, "epoch_vs_base": ratio, **runs[n]}
    print("epoch x base: decode + one copy's time / the loader's epoch's (the loader's speed as a "
          "fraction of the baseline's; higher is better)")  # fmt: skip
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        _common.write_json(args.json, {"rows": args.rows, "batch_rows": out})
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
