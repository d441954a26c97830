"""Benchmark: what validating every record batch costs (issue 14: reading untrusted bytes).

For each codec, the record batches of the same image-like snapshot (with ragged int32 token
ids, so that there are offsets to check) are read and decoded with 2 threads over different
shards, as the loader reads them: without validation, with Arrow's structural validation
(``validate()``: buffer sizes) and with its full validation (``validate(full=True)``: also
offsets and UTF-8) and with what the loader does (``loader``: full validation, then snap's
own check that there are no nulls and that ragged shapes hold their values), alternating, in
one process.

Usage: python benchmarks/validation.py [--size-gb 0.5] [--repeats 3] [--codecs zstd,lz4,none]
"""

from __future__ import annotations

import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # the benchmarks' shared snapshot writer

from snapshot_cli.schema import encoding_problem

MODES = ("none", "structural", "full", "loader")


def read_all(paths: list[str], mode: str) -> int:
    def one(path: str) -> int:
        reader = pa.ipc.open_file(pa.memory_map(path))
        n = 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            if mode == "structural":
                batch.validate()
            elif mode == "full":
                batch.validate(full=True)
            elif mode == "loader":
                batch.validate(full=True)
                assert encoding_problem(batch) is None
            n += batch.nbytes
        return n

    with ThreadPoolExecutor(2) as pool:
        return sum(pool.map(one, paths))


def main() -> None:
    ap = _common.parser(__doc__)
    ap.add_argument("--size-gb", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--codecs", default="zstd,lz4,none")
    _common.add_data_dir_option(ap, _common.out_dir("validation-data"))
    args = ap.parse_args()
    print(f"{'codec':6} {'mode':11} {'GB/s':>6} {'x none':>7}  runs (s)")
    for codec in args.codecs.split(","):
        s = _common.ensure_snapshot(args.data_dir, codec, args.size_gb, tokens=True, workers=2)
        paths = _common.shard_paths(s)
        runs: dict[str, list[float]] = {m: [] for m in MODES}
        nbytes = 0
        for _ in range(args.repeats):
            for mode in MODES:
                with _common.Stopwatch() as sw:
                    nbytes = read_all(paths, mode)
                runs[mode].append(sw.seconds)
        base = statistics.median(runs["none"])
        for mode in MODES:
            m = statistics.median(runs[mode])
            print(f"{codec:6} {mode:11} {nbytes / m / 1e9:6.2f} {m / base:7.3f}  "
                  + _common.runs_text(runs[mode], 3))  # fmt: skip
    print("GB/s: decoded bytes / the time (higher is better); x none: the mode's time / the "
          "time without validation (lower is better)")  # fmt: skip
    _common.print_data_kept(args.data_dir)


if __name__ == "__main__":
    _common.run_main(main)
