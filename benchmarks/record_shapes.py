"""Benchmark: ``snap create`` of records in shapes pipelines yield, against writing them by hand.

Each shape is a pipeline yielding one dict per record, as users write them (a helper's probe,
2026-11-30, found 6-17x the by-hand time in some):

  * **floats512**: a list of 512 Python floats and an id (``emb.tolist()``, JSON features);
  * **npscalars** / **pyscalars**: an int64 and a float32 numpy scalar (``labels[i]``), or
    the same values as Python numbers;
  * **list4**: a list of 4 floats and an id (a box);
  * **wide**: 5,000 float columns (a feature table).

The baseline makes the same records from the same generator, then converts each column of
1,024 records with ``pa.array`` and writes them with ``pa.ipc`` (zstd level 1): what snap
does, by hand. Snap runs ``snapshot_cli.create(..., workers=0)`` into a fresh directory
(removed after). Both alternate within each repeat; ``x hand`` is snap's time / the
baseline's (lower is better), the median over repeats. A report: nothing is asserted.

    python benchmarks/record_shapes.py              # ~1 minute
    python benchmarks/record_shapes.py --quick      # smoke run
    python benchmarks/record_shapes.py --shapes floats512,npscalars --repeats 5
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # before numpy: pins native thread pools to one thread
import numpy as np
import pyarrow as pa

import snapshot_cli as snap

SHAPES = ("floats512", "npscalars", "pyscalars", "list4", "wide")
ROWS = {"floats512": 20_000, "npscalars": 200_000, "pyscalars": 200_000, "list4": 200_000,
        "wide": 400}  # fmt: skip
BATCH = 1024


def records(shape: str, n: int) -> Iterator[dict[str, Any]]:
    if shape == "floats512":
        rows = [[float(j + k) for j in range(512)] for k in range(16)]
        for k in range(n):
            yield {"emb": rows[k % 16], "id": k}
    elif shape in ("npscalars", "pyscalars"):
        ids = np.arange(n, dtype=np.int64)
        xs = ids.astype(np.float32)
        if shape == "pyscalars":
            ids, xs = ids.tolist(), xs.tolist()  # type: ignore[assignment]
        for k in range(n):
            yield {"id": ids[k], "x": xs[k]}
    elif shape == "list4":
        for k in range(n):
            yield {"v": [k * 1.0, 2.0, 3.0, 4.0], "id": k}
    else:
        for k in range(n):
            yield {f"c{j}": float(k + j) for j in range(5000)}


def by_hand(shape: str, n: int, path: str) -> None:
    writer = None
    rows: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal writer
        names = list(rows[0])
        batch = pa.record_batch([pa.array([r[c] for r in rows]) for c in names], names=names)
        if writer is None:
            options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", 1))
            writer = pa.ipc.new_file(path, batch.schema, options=options)
        writer.write_batch(batch)
        rows.clear()

    for record in records(shape, n):
        rows.append(record)
        if len(rows) == BATCH:
            flush()
    if rows:
        flush()
    assert writer is not None
    writer.close()


def make(item: int, shape: str, n: int) -> Iterator[dict[str, Any]]:
    """The pipeline snap runs (by name, in this process; one input)."""
    yield from records(shape, n)


def one_run(config: str, shape: str, n: int, tmp: str | None) -> float:
    """Seconds of one run of ``config`` ("hand" or "snap"), in a directory removed after."""
    work = tempfile.mkdtemp(dir=tmp)
    try:
        if config == "hand":
            return _common.timed(lambda: by_hand(shape, n, f"{work}/h.arrow"))
        params = {"shape": shape, "n": n}
        out = os.path.join(work, "s")
        return _common.timed(lambda: snap.create(make, out, inputs=[0], params=params, workers=0))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: Any) -> dict[str, Any]:
    report: dict[str, Any] = {"environment": _common.environment(), "results": []}
    for shape in args.shapes:
        n = max(1, int(ROWS[shape] * args.scale))
        runs: dict[str, list[float]] = {"hand": [], "snap": []}
        for repeat in range(args.repeats):
            for config in _common.rotated(["hand", "snap"], repeat):
                runs[config].append(one_run(config, shape, n, args.tmp))
        ratios = [s / h for s, h in zip(runs["snap"], runs["hand"], strict=True)]
        row = {"shape": shape, "records": n, "runs": runs, "x_hand": statistics.median(ratios)}
        report["results"].append(row)
        print(f"{shape:<10} {n:>8,} records: by hand {statistics.median(runs['hand']):6.2f} s, "
              f"snap {statistics.median(runs['snap']):6.2f} s, x hand "
              f"{row['x_hand']:.2f} (runs {_common.runs_text(ratios)})")  # fmt: skip
    return report


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--scale", type=float, default=1.0, help="records as a multiple of each default")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tmp", default=None, help="where the runs write (default: the system's)")
    _common.add_quick_option(p, "a tenth of the records")
    _common.add_json_option(p)
    args = p.parse_args()
    args.shapes = _common.subset(p, "--shapes", args.shapes, SHAPES)
    if args.quick:
        args.scale, args.repeats = args.scale / 10, 1
    print(_common.describe(_common.environment()))
    report = run(args)
    print("\nx hand: snap create's time / the same records written by hand (lower is better)")
    if args.json:
        _common.write_json(args.json, report)


if __name__ == "__main__":
    _common.run_main(main)
