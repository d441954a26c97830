"""Benchmark: a mixture that repeats a small snapshot, against its large source alone.

A common mixture upsamples a small, high-quality set into a large one (20 % of every batch
from a few thousand records). Each of the small source's record batches is then used many
times in one shuffle window; it used to be decoded once per use (a 5-record source mixed
50/50 ran at 1/60 of its partner alone, on a busy machine). Here, per codec, in one process:

  * the large snapshot alone, in the global order (``snap.mix([large], epoch_records=E)``,
    every record once): the baseline;
  * ``snap.mix([large, small], weights=[1 - w, w], epoch_records=E)`` for each small size of
    ``--small`` (records): the same epoch length, ``w`` of it from the small source.

Both are second epochs (an untimed first: checksums and the page cache). Rates are records
per second of wall time; configurations alternate within each repeat, the order rotating
between repeats; the table gives medians, the ratio to the baseline and the raw runs. This
is a report, nothing is asserted. Records are 72 bytes (``x`` float32[16], ``label`` int64).

    python benchmarks/mixtures.py            # ~1 minute, the first time also ~10 s of writes
    python benchmarks/mixtures.py --quick    # 100,000 records, 1 repeat
    python benchmarks/mixtures.py --codecs zstd --small 5 5000 --weight 0.2 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the benchmarks' shared scaffolding (pins native thread pools first)
import numpy as np

import snapshot_cli as snap

DATA_VERSION = 1
DEFAULT_RECORDS, QUICK_RECORDS = 1_000_000, 100_000
DEFAULT_DATA_DIR = _common.out_dir("mixtures")
ALONE = "large alone"


def records(start: int, stop: int, version: int) -> Iterator[snap.Batch]:
    """Records ``[start, stop)``: ``x`` a float32[16] from the record's number, ``label``."""
    for at in range(start, stop, 10_000):
        ids = np.arange(at, min(stop, at + 10_000), dtype=np.int64)
        x = np.sin(ids[:, None] * 0.001 + np.arange(16)).astype(np.float32)
        yield snap.Batch(x=x, label=ids)


def ranges(n: int) -> list[list[int]]:
    return [[a, min(n, a + 50_000)] for a in range(0, n, 50_000)]


def make(item: list[int], *, version: int) -> Iterator[snap.Batch]:
    yield from records(item[0], item[1], version)


def ensure(data_dir: str, codec: str, n: int) -> snap.Snapshot:
    """The snapshot of ``n`` records in ``codec``: written once, reused while this file is
    unchanged (snap's own check), written again when it changed."""
    path = os.path.join(data_dir, f"{codec}-{n}")
    options: dict[str, Any] = {
        "inputs": ranges(n),
        "params": {"version": DATA_VERSION},
        "compression": codec,
        "workers": 0,
        "inputs_per_task": 4,
    }
    spec = f"{os.path.abspath(__file__)}:make"
    if not os.path.exists(os.path.join(path, "manifest.json")):
        print(f"writing {path} ...", file=sys.stderr, flush=True)
    try:
        info = snap.create(spec, path, **options)
    except snap.SnapshotExistsError:  # made by an earlier edit of this file
        print(f"writing {path} again (this file changed) ...", file=sys.stderr, flush=True)
        info = snap.create(spec, path, overwrite=True, **options)
    return snap.open(info.path)


def epoch_rate(source: Any, batch_size: int) -> float:
    """Records per second of the loader's second epoch."""
    with source.loader(global_batch_size=batch_size, seed=0) as loader:
        for _ in loader:
            pass
        started, count = time.perf_counter(), 0
        for batch in loader:
            count += len(batch["label"])
        return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=None, help="records of the large one")
    parser.add_argument("--small", type=int, nargs="+", default=[5, 500, 50_000],
                        help="records of each small snapshot mixed in")  # fmt: skip
    parser.add_argument("--weight", type=float, default=0.5, help="the small one's share")
    parser.add_argument("--codecs", nargs="+", default=["zstd", "none"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100,000 records, 1 repeat")
    _common.add_data_dir_option(parser, DEFAULT_DATA_DIR)
    args = parser.parse_args()
    n = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    repeats = 1 if args.quick else args.repeats
    for codec in args.codecs:
        large = ensure(args.data_dir, codec, n)
        sources: dict[str, Any] = {ALONE: snap.mix([large], epoch_records=n)}
        for k in args.small:
            small = ensure(args.data_dir, codec, k)
            mixed = snap.mix([large, small], weights=[1 - args.weight, args.weight],
                             epoch_records=n)  # fmt: skip
            sources[f"{args.weight:.0%} from {k:,} records"] = mixed
        runs: dict[str, list[float]] = {name: [] for name in sources}
        for r in range(repeats):
            for name in _common.rotated(list(sources), r):
                runs[name].append(epoch_rate(sources[name], args.batch_size))
        base = statistics.median(runs[ALONE])
        _common.print_header(f"{codec}: {n:,} records an epoch, batch {args.batch_size}")
        for name, values in runs.items():
            rate = statistics.median(values)
            print(f"{name:<28} {rate / 1e6:7.3f} M rec/s  {rate / base:5.2f}x  "
                  f"runs {_common.runs_text([v / 1e6 for v in values], 3)}")  # fmt: skip
    print(f"(x: records/s / the {ALONE}'s records/s, higher is better; 1.00 = as fast)")
    _common.print_data_kept(args.data_dir)


if __name__ == "__main__":
    _common.run_main(main)
