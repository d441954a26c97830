"""Benchmark: snapshots of unusual shapes, against decode + one copy of the same shards.

Shapes the image-like benchmarks never meet (issue 16's trust work, 2026-11-27 and 29):

  * **wide**: ``--wide-rows`` rows of ``--columns`` float32 columns (tabular features). Before
    this benchmark existed a shuffled loader over more than 64 columns failed, and once it
    read, its epochs cost 7 s where pyarrow took 1.4 s.
  * **tiny**: ``--tiny-rows`` rows of one int32 column (token ids, labels). The loader's
    per-record costs (a slot, a scattered write) and per-record-batch costs (a footer entry,
    a checksum) dominate; its first batch came after 1.0 s.
  * **tokens** and **text**: ``--var-rows`` records of 10-100 int32 token ids (a ragged
    column), or of 10-60 words (a text column), and a label, batch 256: the loader makes an
    array (a ``str``) per record, and so does the baseline (Arrow's ``to_numpy``).
  * **bytes**: ``--bytes-rows`` records of 10-50 KB of incompressible bytes (encoded images
    or audio, kept as the file's bytes and decoded in ``map=``) and a label, batch 256: a
    ``bytes`` object per record, made by the loader and the baseline alike. Before
    2026-11-30 a window joined its record batches' bytes into one array first, a second copy
    into fresh memory each window: shuffled epochs at 0.3-0.5 of the baseline.
  * **labels**: ``--labels-rows`` records of a 3 KiB image, a label, a flag and a time, read
    with ``columns=["c0", "c1", "c2"]`` (the label, flag and time: a sweep over metadata, a
    class-balance count); the baseline decodes those columns only. Before 2026-11-30 a column
    not placed straight into the window (the flag, the time) made the loader decode every
    column of each record batch, images too: 10-17x the columns' cost.
  * **large**: ``--large-rows`` records of ``--large-mib`` MiB each (video clips, 3-D volumes):
    a record batch is one record, and each column buffer several MiB, larger than the CPU's
    caches. The values are a gradient with 3 bits of noise: zstd shrinks them to ~0.4, lz4 not
    at all (its frames then hold the bytes as they are, as for JPEG bytes or float noise).

For each shape and codec, alternating within each repeat:

  * decode + one copy (the baseline): every record batch of every shard decoded by
    ``pa.ipc`` from a memory map, 2 threads on different shards, each column converted to
    numpy and copied once;
  * snap, ``shuffle=True`` and ``shuffle=False``: a fresh loader's first epoch (with its time
    to the first batch) and, right after, its second epoch.

Rates are records per second; ratios are loader / baseline of the same repeat, medians over
repeats. A report, nothing is asserted. Snapshots are written once into ``--data-dir`` (reused
while their parameters match).

    python benchmarks/shapes.py                 # ~1 minute after ~20 s writing
    python benchmarks/shapes.py --quick         # smoke run, small sizes, 1 repeat
    python benchmarks/shapes.py --codecs lz4 --repeats 5 --json shapes.json
    python benchmarks/shapes.py --shapes wide --batch-size 1000   # misaligned batches
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # before numpy: pins native thread pools to one thread
import numpy as np
import pyarrow as pa

import snapshot_cli as snap
from snapshot_cli import schema as schema_mod
from snapshot_cli.readers.convert import TEXT

CODECS = ("lz4", "zstd", "none")
DEFAULT_DATA_DIR = _common.out_dir("shapes")
SHAPES = ("wide", "tiny", "large", "tokens", "text", "bytes", "labels")
READ = {"labels": ["c0", "c1", "c2"]}  # the columns a shape's loader and baseline read
PARTS = 4  # inputs (and shards) per snapshot
WORDS = np.array(
    [
        "the",
        "a",
        "of",
        "to",
        "and",
        "in",
        "is",
        "it",
        "you",
        "that",
        "he",
        "was",
        "for",
        "on",
        "are",
        "with",
        "as",
        "his",
        "they",
        "be",
    ]
)


def make_part(part: int, shape: str, rows: int, columns: int) -> Iterator[pa.RecordBatch]:
    """Input ``part`` of a snapshot: ``rows // PARTS`` deterministic rows."""
    rng = np.random.default_rng([7, part])
    n = rows // PARTS
    if shape == "wide":  # small integers as float32: compressible, like real features
        values = [rng.integers(0, 100, n).astype(np.float32) for _ in range(columns)]
        yield pa.RecordBatch.from_arrays(values, names=[f"c{i}" for i in range(columns)])
    elif shape == "large":  # ``columns`` MiB a record: a gradient plus 3 bits of noise
        ramp = (np.arange(columns << 20) // 4096 % 200).astype(np.uint8)
        for _ in range(n):
            value = ramp + rng.integers(0, 8, columns << 20, dtype=np.uint8)
            yield pa.RecordBatch.from_arrays(
                [pa.FixedSizeListArray.from_arrays(value, len(value))], ["c0"]
            )
    elif shape in ("tokens", "text"):  # 10-100 token ids (or 10-60 words) and a label
        for start in range(0, n, 1000):
            m = min(1000, n - start)
            label = pa.array(rng.integers(0, 5, m))
            if shape == "tokens":
                lengths = rng.integers(10, 100, m)
                offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
                ids = pa.array(rng.integers(0, 50_000, int(lengths.sum()), np.int32))
                values = pa.ListArray.from_arrays(offsets, ids)
            else:
                words = WORDS[rng.integers(0, len(WORDS), (m, 60))]
                lengths = rng.integers(10, 60, m)
                values = pa.array([" ".join(w[:k]) for w, k in zip(words, lengths, strict=True)])
            yield pa.RecordBatch.from_arrays([values, label], ["c0", "c1"])
    elif shape == "bytes":  # 10-50 KB of noise (JPEG-like: incompressible) and a label
        for start in range(0, n, 100):
            m = min(100, n - start)
            sizes = rng.integers(10_000, 50_000, m)
            values = [rng.integers(0, 256, k, np.uint8).tobytes() for k in sizes]
            label = pa.array(rng.integers(0, 1000, m))
            yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary()), label], ["c0", "c1"])
    elif shape == "labels":  # a label, a flag and a time beside a 3 KiB image
        for start in range(0, n, 1000):
            m = min(1000, n - start)
            image = rng.integers(0, 16, m * 3072, np.uint8)
            yield pa.RecordBatch.from_arrays(
                [pa.array(rng.integers(0, 1000, m)), pa.array(rng.random(m) < 0.5),
                 pa.array(rng.integers(0, 10**12, m).astype("datetime64[ms]")),
                 pa.FixedSizeListArray.from_arrays(image, 3072)],
                ["c0", "c1", "c2", "image"],
            )  # fmt: skip
    else:
        yield pa.RecordBatch.from_arrays([pa.array(rng.integers(0, 50_000, n, np.int32))], ["c0"])


def ensure(data_dir: str, shape: str, codec: str, rows: int, columns: int) -> snap.Snapshot:
    path = os.path.join(data_dir, f"{shape}-{codec}-{rows}x{columns}")
    params = {"shape": shape, "rows": rows, "columns": columns}
    try:
        s = snap.open(path)
        if s.manifest.pipeline.get("params") == params:
            return s
    except snap.SnapError:
        pass
    print(f"writing {path} ...", file=sys.stderr, flush=True)
    snap.create(f"{__file__}:make_part", path, inputs=list(range(PARTS)), params=params,
                compression=codec, workers=0, inputs_per_task=1, overwrite=True)  # fmt: skip
    return snap.open(path)


def baseline(paths: list[str], columns: list[str] | None = None) -> int:
    """Decode + one copy of every shard (of ``columns`` only, if given), 2 threads → records."""

    def shard(path: str) -> int:
        source = pa.memory_map(path, "r")
        options = None
        if columns:
            schema = pa.ipc.open_file(source).schema
            fields = [schema.get_field_index(c) for c in columns]
            options = pa.ipc.IpcReadOptions(included_fields=fields)
        reader = pa.ipc.open_file(source, options=options)
        rows = 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            for column in batch.columns:
                if isinstance(column, pa.ExtensionArray):  # a tensor column
                    column = column.storage.flatten()
                if pa.types.is_boolean(column.type):  # bits: unpacked, a copy already
                    column.to_numpy(zero_copy_only=False)
                elif pa.types.is_list(column.type) or schema_mod.kind(column.type) in TEXT:
                    # what a loader must make of them: an array, a str or bytes per record
                    column.to_numpy(zero_copy_only=False)
                else:
                    column.to_numpy().copy()
            rows += batch.num_rows
        return rows

    with ThreadPoolExecutor(2) as pool:
        return sum(pool.map(shard, paths))


def loader_epochs(
    s: snap.Snapshot, shuffle: bool, batch_size: int, columns: list[str] | None = None
) -> dict[str, float]:
    """A fresh loader's first epoch (and its first batch), then its second → seconds."""
    out: dict[str, float] = {}
    with s.loader(batch_size, shuffle=shuffle, epochs=1, columns=columns) as loader:
        started = time.perf_counter()
        rows = 0
        for batch in loader:
            if not rows:
                out["first batch"] = time.perf_counter() - started
            rows += len(batch["c0"])
        out["epoch 1"] = time.perf_counter() - started
        started = time.perf_counter()
        rows2 = sum(len(batch["c0"]) for batch in loader)
        out["epoch 2"] = time.perf_counter() - started
    assert rows == rows2 == s.num_records, (rows, rows2, s.num_records)
    return out


def run(args: Any) -> dict[str, Any]:
    sizes = {
        "wide": (args.wide_rows, args.columns),
        "tiny": (args.tiny_rows, 1),
        "large": (args.large_rows, args.large_mib),
        "tokens": (args.var_rows, 2),
        "text": (args.var_rows, 2),
        "bytes": (args.bytes_rows, 2),
        "labels": (args.labels_rows, 4),
    }
    batch = {"wide": 1024, "tiny": 65536, "large": 8, "labels": 256}
    batch |= dict.fromkeys(("tokens", "text", "bytes"), 256)
    if args.batch_size:  # e.g. 1,000: a column's batch then starts off a 64-byte boundary
        batch = dict.fromkeys(batch, args.batch_size)
    report: dict[str, Any] = {"environment": _common.environment(), "results": []}
    for shape in args.shapes:
        rows, columns = sizes[shape]
        for codec in args.codecs:
            s = ensure(args.data_dir, shape, codec, rows, columns)
            paths = _common.shard_paths(s)
            read = READ.get(shape)
            runs: dict[str, list[float]] = {}
            for repeat in range(args.repeats):
                for config in _common.rotated(["base", "shuffled", "in order"], repeat):
                    _common.rewarm(paths)
                    if config == "base":
                        seconds = _common.timed(
                            lambda paths=paths, read=read: baseline(paths, read)
                        )
                        runs.setdefault("base", []).append(s.num_records / seconds)
                        continue
                    times = loader_epochs(s, config == "shuffled", batch[shape], read)
                    for what, t in times.items():
                        value = t if what == "first batch" else s.num_records / t
                        runs.setdefault(f"{config} {what}", []).append(value)
            base = statistics.median(runs["base"])
            row = {"shape": shape, "codec": codec, "rows": rows, "columns": columns,
                   "batch_size": batch[shape], "base_per_s": base, "runs": runs}  # fmt: skip
            what = f"{columns} MiB each" if shape == "large" else f"x {columns} columns"
            # records/s shown as millions, or for large records as GB/s
            scale, unit = (
                ((columns << 20) / 1e9, " GB/s") if shape == "large" else (1e-6, "M records/s")
            )
            print(f"\n{shape} ({rows:,} rows {what}), {codec}, batch "
                  f"{batch[shape]:,}: decode + one copy {base * scale:.2f}{unit} "
                  f"(runs {_common.runs_text(r * scale for r in runs['base'])})")  # fmt: skip
            for key, values in runs.items():
                if key == "base":
                    continue
                if key.endswith("first batch"):
                    print(f"  {key:<26} {statistics.median(values) * 1000:8.0f} ms  "
                          f"(runs {_common.runs_text((v * 1000 for v in values), 0)})")  # fmt: skip
                    row[key] = statistics.median(values)
                    continue
                ratios = [v / b for v, b in zip(values, runs["base"], strict=True)]
                row[key] = statistics.median(ratios)
                print(f"  {key:<26} {statistics.median(values) * scale:8.2f}{unit}  "
                      f"x base {statistics.median(ratios):.2f}  "
                      f"(runs {_common.runs_text(ratios)})")  # fmt: skip
            report["results"].append(row)
    return report


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--wide-rows", type=int, default=100_000)
    p.add_argument("--columns", type=int, default=500)
    p.add_argument("--tiny-rows", type=int, default=20_000_000)
    p.add_argument("--var-rows", type=int, default=500_000, help="rows of tokens and text")
    p.add_argument("--bytes-rows", type=int, default=20_000, help="rows of bytes")
    p.add_argument("--labels-rows", type=int, default=100_000, help="rows of labels")
    p.add_argument("--large-rows", type=int, default=192)
    p.add_argument("--large-mib", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=0, help="every shape's (default: its own)")
    p.add_argument("--repeats", type=int, default=None, help="runs of each (3; --quick: 1)")
    _common.add_data_dir_option(p, DEFAULT_DATA_DIR)
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--shapes", default=",".join(SHAPES))
    _common.add_quick_option(p, "small sizes")
    _common.add_json_option(p)
    args = p.parse_args()
    args.codecs = _common.subset(p, "--codecs", args.codecs, CODECS)
    args.shapes = _common.subset(p, "--shapes", args.shapes, SHAPES)
    if args.quick:
        args.wide_rows, args.columns, args.tiny_rows = 8_000, 100, 400_000
        args.large_rows, args.large_mib, args.var_rows, args.labels_rows = 16, 2, 8_000, 8_000
        args.bytes_rows = 800
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    print(_common.describe(_common.environment()))
    report = run(args)
    print(
        "\nx base: the loader's records/s / decode + one copy's, in the same repeat (higher is "
        "better; 1.00 = as fast as the baseline)"
    )
    if args.json:
        _common.write_json(args.json, report)
    _common.print_data_kept(args.data_dir)


if __name__ == "__main__":
    _common.run_main(main)
