"""Benchmark: how a ``map=``'s batches go to the loop (small batches, three map costs).

Batches go to the consumer in groups (one hand-off per group: small batches cost per batch,
not per byte); with a map, a group now holds about ``serve.GROUP_MAP_SECONDS`` of its calls
(one batch at a time until the map's cost is known), where before a group of up to 64 waited
for its last batch's map (a 50 ms map held the first batch 1.7 s). This measures that the
change costs no throughput: the same loader, alternating within each repeat, with the rule
of now and with groups by bytes only (``GROUP_MAP_SECONDS`` set past any map), over
``--rows`` rows of 48 bytes (an id, 8 float32, a label; lz4), shuffled, for a cheap map
(an array op), a medium one (~50 us) and a costly one (~0.5 ms), at batch 256 and 4,096.
Records/s, medians of ``--repeats``, the raw runs, and now / before. A report: nothing is
asserted.

    python benchmarks/map_groups.py               # ~2 minutes (the first time ~30 s more)
    python benchmarks/map_groups.py --quick       # 200,000 rows, 1 repeat
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the benchmarks' shared scaffolding (pins native thread pools first)
import numpy as np

import snapshot_cli as snap
from snapshot_cli.readers import serve

PER_INPUT = 10_000
WEIGHTS = np.random.default_rng(0).random((64, 64))


def rows(i: int) -> Iterator[dict[str, Any]]:
    rng = np.random.default_rng(i)
    x = rng.random((PER_INPUT, 8)).astype(np.float32)
    for k in range(PER_INPUT):
        yield {"id": np.int64(i * PER_INPUT + k), "x": x[k], "y": np.int32(k % 10)}


def cheap(b: dict[str, Any]) -> dict[str, Any]:
    return {**b, "z": b["x"] * 2}


def medium(b: dict[str, Any]) -> dict[str, Any]:
    np.dot(WEIGHTS, WEIGHTS[:, :8])
    return {**b, "z": b["x"] * 2}


def costly(b: dict[str, Any]) -> dict[str, Any]:
    for _ in range(8):
        np.dot(WEIGHTS, WEIGHTS)
    return {**b, "z": b["x"] * 2}


def epoch(s: snap.Snapshot, fn: Callable[..., Any], batch: int, group_seconds: float) -> float:
    serve.GROUP_MAP_SECONDS = group_seconds
    with s.loader(batch, seed=1, map=fn) as loader:
        started, n = time.perf_counter(), 0
        for b in loader:
            n += len(b["id"])
        return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of 48 bytes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200,000 rows, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 200_000, 1
    inputs = max(1, args.rows // PER_INPUT)
    out = os.path.join(_common.out_dir("map-groups"), f"rows-{inputs * PER_INPUT}")
    snap.create(rows, out, inputs=list(range(inputs)), workers=0, compression="lz4")
    s = snap.open(out)
    now = serve.GROUP_MAP_SECONDS
    modes = {"now": now, "groups by bytes": 1e9}
    _common.print_header(f"{'map':8s} {'batch':>6s}  {'now':>18s}  {'by bytes':>18s}  now/before")
    for name, fn in (("cheap", cheap), ("medium", medium), ("costly", costly)):
        for batch in (256, 4096):
            got: dict[str, list[float]] = {m: [] for m in modes}
            for rep in range(args.repeats):
                for mode in _common.rotated(list(modes), rep):
                    got[mode].append(epoch(s, fn, batch, modes[mode]) / 1e6)
            a, b = (statistics.median(got[m]) for m in modes)
            runs = [_common.runs_text(got[m]) for m in modes]
            print(f"{name:8s} {batch:6d}  {a:5.2f} M rec/s ({runs[0]})  {b:5.2f} ({runs[1]})"
                  f"  {a / b:.2f}")  # fmt: skip
    serve.GROUP_MAP_SECONDS = now


if __name__ == "__main__":
    _common.run_main(main)
