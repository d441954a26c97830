"""Benchmark: what identifying the inputs costs ``snap create`` (issue 13: identity, not
timestamps).

A snapshot of a trivial pipeline over N local files is made once; then three checks of an
up-to-date snapshot are timed, each against reading the same bytes in the same process with
as many threads and no hashing (the baseline):

- ``stat``: nothing changed, the listing matches: no file is read;
- ``content``: every file got a new mtime (rewritten with the same bytes): every file is read
  and hashed (sha256) to find that nothing changed;
- the first ``create`` itself, which reads every input once more to record its contents.

With ``--items N`` the inputs are N JSON items instead (``{"id", "path", "label"}`` dicts,
as ``df.to_dict("records")`` gives), the pipeline yields one small record per item, and the
baseline is a plain loop calling it over the items and writing the records with pyarrow
alone (one zstd IPC file): what snap adds per item to make and to find up to date.

Usage: python benchmarks/identity.py [--files 400] [--mib-per-file 2.5] [--repeats 3] [--cold]
       python benchmarks/identity.py --items 1000000 [--repeats 3] [--workers 0]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # timing and the runs column

import snapshot_cli as snap
from snapshot_cli.writers.contents import threads_for


def preprocess(path: str) -> Any:
    yield {"size": os.path.getsize(path)}  # reads nothing: the cost measured is snap's own


def per_item(item: dict[str, Any]) -> Any:
    return [{"id": item["id"], "label": item["label"]}]  # snap's cost per item is measured


def loop_and_write(items: list[dict[str, Any]], path: str) -> None:
    """The items' baseline: the pipeline over every item, its records written by pyarrow."""
    import pyarrow as pa

    table = pa.Table.from_pylist([r for item in items for r in per_item(item)])
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema, options=opts) as w:
        w.write_table(table, max_chunksize=65536)


def items_main(n: int, repeats: int, workers: int) -> None:
    items = [{"id": i, "path": f"images/train/{i:08d}.jpg", "label": i % 1000} for i in range(n)]
    names = ("loop + pyarrow (baseline)", "first create", "up to date")
    rows: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="snap-items-") as tmp:
        for r in range(repeats):
            out = str(Path(tmp) / f"s{r}")
            path = str(Path(tmp) / f"b{r}.arrow")
            rows[names[0]].append(_common.timed(lambda path=path: loop_and_write(items, path)))
            for name in names[1:]:
                rows[name].append(
                    _common.timed(
                        lambda out=out: snap.create(per_item, out, inputs=items, workers=workers)
                    )
                )
    base = statistics.median(rows[names[0]])
    print(f"{n:,} JSON items, workers={workers}, median of {repeats}; {os.cpu_count()} cores")
    print(f"{'run':26} {'median s':>9} {'us/item':>8} {'x base':>7}  runs")
    for name, runs in rows.items():
        m = statistics.median(runs)
        print(f"{name:26} {m:9.2f} {m / n * 1e6:8.1f} {m / base:7.2f}  " + _common.runs_text(runs))
    print("x base: the run's time / the baseline's time (lower is better)")


def read_all(paths: list[Path]) -> int:
    """The baseline: read every byte with as many threads as snap hashes them with, in 8 MiB
    pieces."""

    def read(path: Path) -> int:
        n = 0
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                n += len(chunk)
        return n

    with ThreadPoolExecutor(threads_for([(str(p), p.stat().st_size) for p in paths])) as pool:
        return sum(pool.map(read, paths))


def main() -> None:
    ap = _common.parser(__doc__)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--mib-per-file", type=float, default=2.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--items", type=int, default=0, help="N JSON items instead of files")
    ap.add_argument("--workers", type=int, default=0, help="snap's workers with --items (0)")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="drop the page cache before each read (root: /proc/sys/vm/drop_caches)",
    )
    args = ap.parse_args()
    if args.items:
        items_main(args.items, args.repeats, args.workers)
        return

    def cold() -> None:
        if args.cold:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="snap-identity-") as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        size = int(args.mib_per_file * 2**20)
        paths = []
        for i in range(args.files):
            path = raw / f"{i:05d}.bin"
            path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
            written = time.time() - 3600  # older than inputs.RACY_S: their mtimes vouch
            os.utime(path, (written, written))
            paths.append(path)
        total = sum(p.stat().st_size for p in paths)
        glob = str(raw / "*.bin")
        names = ("read (baseline)", "first create", "up to date, stat", "up to date, content")
        rows: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.repeats):
            out = str(Path(tmp) / f"s{r}")
            cold()
            rows["read (baseline)"].append(_common.timed(lambda: read_all(paths)))
            cold()
            rows["first create"].append(
                _common.timed(lambda out=out: snap.create(preprocess, out, inputs=glob, workers=0))
            )
            rows["up to date, stat"].append(
                _common.timed(lambda out=out: snap.create(preprocess, out, inputs=glob, workers=0))
            )
            stamp = time.time() - 600 + r  # a new mtime, not a racy one (inputs.RACY_S)
            for p in paths:
                os.utime(p, (stamp, stamp))
            cold()
            rows["up to date, content"].append(
                _common.timed(lambda out=out: snap.create(preprocess, out, inputs=glob, workers=0))
            )
    base = statistics.median(rows["read (baseline)"])
    cache = "dropped before each read" if args.cold else "warm"
    print(f"{args.files} files, {total / 2**30:.2f} GiB, page cache {cache}, median of "
          f"{args.repeats}; {os.cpu_count()} cores")  # fmt: skip
    print(f"{'check':24} {'median s':>9} {'GB/s':>6} {'x read':>7}  runs")
    for name, runs in rows.items():
        m = statistics.median(runs)
        # "up to date, stat" reads no file: it has no rate of the files' bytes
        rate = f"{'-':>6}" if name == "up to date, stat" else f"{total / m / 1e9:6.2f}"
        print(f"{name:24} {m:9.3f} {rate} {m / base:7.2f}  " + _common.runs_text(runs, 3))
    print(
        "GB/s: the files' bytes / the time (higher is better; none for the stat check, which "
        "reads no file); x read: the check's time / the baseline read's time (lower is better)"
    )


if __name__ == "__main__":
    _common.run_main(main)
