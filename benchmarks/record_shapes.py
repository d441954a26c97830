"""Benchmark: ``snap create`` of records in shapes pipelines yield, against writing them by hand.

Each shape is a pipeline yielding one dict per record, as users write them (a helper's probe,
2026-11-30, found 6-17x the by-hand time in some):

  * **floats512**: a list of 512 Python floats and an id (``emb.tolist()``, JSON features);
  * **npscalars** / **pyscalars**: an int64 and a float32 numpy scalar (``labels[i]``), or
    the same values as Python numbers;
  * **list4**: a list of 4 floats and an id (a box);
  * **wide**: 5,000 float columns (a feature table);
  * **ragged1d** / **ragged2d**: a 1-D int32 array of 0-99 values (token ids), or a (k, 4)
    float32 array, k 1-19 (an image's boxes), per record; **strlist**: 1-5 captions (a list
    of str) per record; **datetimes**: a ``np.datetime64`` per record; **cols100**: 100
    float32 numpy scalar columns per record;
  * **ragged1d_batch** / **ragged2d_batch** / **strlist_batch**: the same values yielded as
    ``snap.Batch`` columns of 4,096 records, each a list of per-record values.

The baseline makes the same records from the same generator, then converts each column of
1,024 records with ``pa.array`` and writes them with ``pa.ipc`` (zstd level 1): what snap
does, by hand (a ragged n-D array as ``list<T>`` of its values beside its shape, as snap
stores it). The ragged, text-list, time and 100-column values are made once, before
the timed runs (both sides consume the same objects). Snap runs
``snapshot_cli.create(..., workers=0)`` into a fresh directory (removed after). Both
alternate within each repeat; ``x hand`` is snap's time / the baseline's (lower is better),
the median over repeats. A report: nothing is asserted.

    python benchmarks/record_shapes.py              # ~1 minute
    python benchmarks/record_shapes.py --quick      # smoke run
    python benchmarks/record_shapes.py --shapes floats512,npscalars --repeats 5
"""

from __future__ import annotations

import importlib
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

SHAPES = ("floats512", "npscalars", "pyscalars", "list4", "wide", "ragged1d", "ragged1d_batch",
          "ragged2d", "ragged2d_batch", "strlist", "strlist_batch", "datetimes",
          "cols100")  # fmt: skip
ROWS = {"floats512": 20_000, "npscalars": 200_000, "pyscalars": 200_000, "list4": 200_000,
        "wide": 400, "ragged1d": 200_000, "ragged1d_batch": 200_000, "ragged2d": 100_000,
        "ragged2d_batch": 100_000, "strlist": 200_000, "strlist_batch": 200_000,
        "datetimes": 500_000, "cols100": 20_000}  # fmt: skip
BATCH = 1024
CHUNK = 4096  # records of a yielded snap.Batch
PREPARED: dict[tuple[str, int], list[Any]] = {}  # made before the timed runs


def prepare(shape: str, n: int) -> list[Any]:
    """The items of a prepared shape (records, or Batch chunks), made once."""
    key = (shape, n)
    if key not in PREPARED:
        base = shape.removesuffix("_batch")
        columns = _columns(base, n)
        if shape.endswith("_batch"):
            PREPARED[key] = [
                snap.Batch({k: v[s : s + CHUNK] for k, v in columns.items()})
                for s in range(0, n, CHUNK)
            ]
        else:
            PREPARED[key] = [{k: v[i] for k, v in columns.items()} for i in range(n)]
    return PREPARED[key]


def _columns(shape: str, n: int) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    if shape == "ragged1d":  # token ids
        lens = rng.integers(0, 100, n)
        flat = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int32)
        return {"tokens": np.split(flat, np.cumsum(lens)[:-1]), "id": list(range(n))}
    if shape == "ragged2d":  # boxes
        lens = rng.integers(1, 20, n)
        flat = rng.random((int(lens.sum()), 4), dtype=np.float32)
        return {"boxes": np.split(flat, np.cumsum(lens)[:-1]), "id": list(range(n))}
    if shape == "strlist":
        counts = rng.integers(1, 6, n)
        return {"captions": [[f"caption {i} {j}" for j in range(k)] for i, k in enumerate(counts)]}
    if shape == "datetimes":
        times = rng.integers(0, 10**15, n).astype("datetime64[us]")
        return {"t": [times[i] for i in range(n)]}
    xs = rng.integers(0, 100, (100, n)).astype(np.float32)  # cols100
    return {f"c{j}": [xs[j, i] for i in range(n)] for j in range(100)}


def hand_column(values: list[Any]) -> pa.Array:
    """One column of 1,024 records by hand: ``pa.array``, a ragged n-D array's values flat."""
    first = values[0]
    if isinstance(first, np.ndarray) and first.ndim > 1:
        data = pa.array([v.reshape(-1) for v in values], pa.list_(pa.from_numpy_dtype(first.dtype)))
        shapes = pa.array(np.array([v.shape for v in values], np.int32).reshape(-1))
        shape = pa.FixedSizeListArray.from_arrays(shapes, first.ndim)
        return pa.StructArray.from_arrays([data, shape], names=["data", "shape"])
    if isinstance(first, np.ndarray):
        return pa.array(values, pa.list_(pa.from_numpy_dtype(first.dtype)))
    if isinstance(first, list) and first and isinstance(first[0], str):
        return pa.array(values, pa.list_(pa.string()))
    return pa.array(values)


def records(shape: str, n: int) -> Iterator[Any]:
    if shape in PREPARED_SHAPES:  # (by name: snap's scan of what the pipeline's code reaches
        # would walk the prepared values, a cost of this cache, not of writing them)
        yield from globals()["prepare"](shape, n)
    elif shape == "floats512":
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

    def write(columns: dict[str, list[Any]]) -> None:
        nonlocal writer
        batch = pa.record_batch([hand_column(v) for v in columns.values()], names=list(columns))
        if writer is None:
            options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", 1))
            writer = pa.ipc.new_file(path, batch.schema, options=options)
        writer.write_batch(batch)

    def flush() -> None:
        write({c: [r[c] for r in rows] for c in rows[0]})
        rows.clear()

    for item in records(shape, n):
        if isinstance(item, snap.Batch):
            length = len(next(iter(item.values())))
            for s in range(0, length, BATCH):
                write({c: list(v[s : s + BATCH]) for c, v in item.items()})
            continue
        rows.append(item)
        if len(rows) == BATCH:
            flush()
    if rows:
        flush()
    assert writer is not None
    writer.close()


PREPARED_SHAPES = SHAPES[5:]


def make(item: int, shape: str, n: int) -> Iterator[Any]:
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
    # the runs call this file as the module it is, not as __main__: snap identifies a
    # pipeline of __main__ by pickling what its code reaches, here every prepared value
    # (9 s for 150,000 times), which it does not for a function of an importable module
    here = importlib.import_module(Path(__file__).stem)
    for shape in args.shapes:
        n = max(1, int(ROWS[shape] * args.scale))
        if shape in PREPARED_SHAPES:
            here.prepare(shape, n)
        runs: dict[str, list[float]] = {"hand": [], "snap": []}
        for repeat in range(args.repeats):
            for config in _common.rotated(["hand", "snap"], repeat):
                runs[config].append(here.one_run(config, shape, n, args.tmp))
        ratios = [s / h for s, h in zip(runs["snap"], runs["hand"], strict=True)]
        row = {"shape": shape, "records": n, "runs": runs, "x_hand": statistics.median(ratios)}
        report["results"].append(row)
        print(f"{shape:<10} {n:>8,} records: by hand {statistics.median(runs['hand']):6.2f} s, "
              f"snap {statistics.median(runs['snap']):6.2f} s, x hand "
              f"{row['x_hand']:.2f} (runs {_common.runs_text(ratios)})")  # fmt: skip
        here.PREPARED.clear()
    return report


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--scale", type=float, default=1.0, help="records as a multiple of each default")
    p.add_argument("--repeats", type=int, default=None, help="runs of each (3; --quick: 1)")
    p.add_argument("--tmp", default=None, help="where the runs write (default: the system's)")
    _common.add_quick_option(p, "a tenth of the records")
    _common.add_json_option(p)
    args = p.parse_args()
    args.shapes = _common.subset(p, "--shapes", args.shapes, SHAPES)
    if args.quick:
        args.scale /= 10
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.tmp is not None:  # (made, as --data-dir is elsewhere)
        os.makedirs(args.tmp, exist_ok=True)
    print(_common.describe(_common.environment()))
    report = run(args)
    print("\nx hand: snap create's time / the same records written by hand (lower is better)")
    if args.json:
        _common.write_json(args.json, report)


if __name__ == "__main__":
    _common.run_main(main)
