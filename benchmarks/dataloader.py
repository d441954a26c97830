"""Benchmark: a snapshot through torch's DataLoader and its worker processes.

Replays the replay benchmark's 2 GB snapshot of image-like records (3x64x64 uint8 + label,
batches of 256 = 3 MiB; ``--codec`` lz4 by default) as a PyTorch user would, each in a fresh
process, the configurations rotating from repeat to repeat:

  * ``loader.to_torch()``: the baseline;
  * ``DataLoader(SnapshotDataset(...), batch_size=None, num_workers=N)`` for each N of
    ``--workers`` (persistent workers, so that each worker's loader is made once);
  * torch alone: a ``DataLoader`` whose ``num_workers`` workers hand over one prepared batch
    of the same shape again and again (no snap): what moving batches from workers to the
    main process costs by itself, the ceiling of any dataset read in workers.

Each run times two epochs after an untimed one and reports records/s and the peak RSS of the
process and its workers together (VmHWM of each: pages shared by several count in each).
The table gives each configuration's median and its ratio to ``to_torch()`` in the same
repeat. This is a report, not a test: nothing is asserted.

With ``--tokens`` the snapshot also has a ragged column of 16-256 int32 token ids a record
(replay's ``--tokens`` snapshot) and every configuration reads the label and the tokens only:
a batch's ragged column is a list of tensors, which workers hand over too. Before 2026-12-01
each was a tensor of its own, sent in a shared-memory segment of its own: ~200 us a record,
workers 45-100x slower than none.

    python benchmarks/dataloader.py                      # ~3 minutes (reuses replay's snapshot)
    python benchmarks/dataloader.py --workers 2,4,8 --repeats 5 --json dataloader.json
    python benchmarks/dataloader.py --tokens --size-gb 0.5   # a ragged column through workers
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Iterable
from typing import Any

import _common  # benchmarks/_common.py (first: it pins native thread pools)

BATCH = 256
EPOCHS = 2  # timed, after an untimed one


def _peak_rss_mib() -> float:
    """Peak RSS of this process and of its live children (torch's workers), in MiB."""
    total, me = 0, str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if pid != me and f"\nPPid:\t{me}\n" not in status:
            continue
        total += int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1])
    return total / 1024


def _alone(batches: int, tokens: bool) -> Any:
    """A dataset of ``batches`` batches over one prepared batch's memory, of the snapshot's
    shape (``tokens``: a label and 136 token ids a record, as views of one tensor): what a
    DataLoader's workers hand over with no snap."""
    import numpy as np
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    class Repeat(IterableDataset):  # type: ignore[type-arg]
        def __init__(self, batches: int) -> None:
            self.batches = batches

        def __iter__(self) -> Any:
            info = get_worker_info()
            image = np.zeros((BATCH, *_common.IMAGE_SHAPE), np.uint8)
            label = np.arange(BATCH)
            ids = np.zeros(BATCH * 136, np.int32)
            for _ in range(self.batches // (info.num_workers if info else 1)):
                # tensors over the same memory, as the loader's batches are views of its
                # windows: torch copies each to shared memory (the same tensor again it would
                # not: a storage once shared is sent as it is)
                if tokens:
                    flat = torch.from_numpy(ids.copy())  # (a new batch's, as snap makes it)
                    yield {"label": torch.from_numpy(label), "tokens": list(flat.split(136))}
                else:
                    yield {"image": torch.from_numpy(image), "label": torch.from_numpy(label)}

    return Repeat(batches)


def child(config: str, path: str, tokens: bool) -> dict[str, float]:
    import snapshot_cli as snap

    kind, _, n = config.partition(":")
    workers = int(n or 0)
    s = snap.open(path)
    batches = -(-s.num_records // BATCH)
    columns = {"columns": ["label", "tokens"]} if tokens else {}
    source: Iterable[Any]
    if kind == "to_torch":
        source = s.loader(BATCH, seed=0, **columns).to_torch()
    else:
        from torch.utils.data import DataLoader

        if kind == "dataset":
            from snapshot_cli.readers.torch import SnapshotDataset

            dataset: Any = SnapshotDataset(path, batch_size=BATCH, seed=0, **columns)
        else:
            dataset = _alone(batches, tokens)
        source = DataLoader(dataset, batch_size=None, num_workers=workers,
                            persistent_workers=workers > 0)  # fmt: skip
    records = 0
    for _ in source:  # untimed: workers start, windows are made
        pass
    started = time.perf_counter()
    for _ in range(EPOCHS):
        for batch in source:
            records += len(batch["label"])
    seconds = time.perf_counter() - started
    return {"records_per_s": records / seconds, "peak_rss_mib": _peak_rss_mib()}


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(__doc__)
    p.add_argument("--codec", default="lz4", choices=["zstd", "lz4", "none"])
    p.add_argument("--size-gb", type=float, default=2.0)
    _common.add_data_dir_option(p, _common.SHARED_DATA_DIR)
    p.add_argument("--workers", default="2,4", help="DataLoader num_workers to try, e.g. 2,4,8")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens", action="store_true", help="read a ragged column too (see above)")
    _common.add_json_option(p)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    s = _common.ensure_snapshot(args.data_dir, args.codec, args.size_gb, args.tokens, 2)
    if args.child:
        print(json.dumps(child(args.child, s.root, args.tokens)))
        return 0
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    configs = ["to_torch", "dataset:0", *[f"dataset:{w}" for w in counts],
               *[f"torch alone:{w}" for w in counts]]  # fmt: skip
    print(f"{os.cpu_count()} cores; {args.codec} {args.size_gb:g} GB, batch {BATCH}, "
          f"{s.num_records} records")  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    for r in range(args.repeats):
        for config in _common.rotated(configs, r):
            _common.raw_read(_common.shard_paths(s))  # page cache warm
            out = subprocess.run(
                [sys.executable, __file__, "--codec", args.codec, "--size-gb", str(args.size_gb),
                 "--data-dir", args.data_dir, "--child", config,
                 *(["--tokens"] if args.tokens else [])],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            runs[config].append(json.loads(out.strip().splitlines()[-1]))
            got = runs[config][-1]
            print(f"  repeat {r + 1}/{args.repeats} {config:16s} "
                  f"{got['records_per_s'] / 1e3:7.1f}k records/s  peak RSS "
                  f"{got['peak_rss_mib']:6.0f} MiB", flush=True)  # fmt: skip
    base = [run["records_per_s"] for run in runs["to_torch"]]
    rows = []
    print(f"\n{'configuration':16s} {'records/s':>10s} {'x to_torch':>10s} {'peak RSS':>9s}  runs")
    for config in configs:
        rates = [run["records_per_s"] for run in runs[config]]
        ratio = statistics.median(a / b for a, b in zip(rates, base, strict=True))
        rss = statistics.median(run["peak_rss_mib"] for run in runs[config])
        print(f"{config:16s} {statistics.median(rates) / 1e3:9.1f}k {ratio:10.2f} "
              f"{rss:6.0f} MiB  " + _common.runs_text([x / 1e3 for x in rates], 1))  # fmt: skip
        rows.append({"config": config, "records_per_s": rates, "ratio": ratio,
                     "peak_rss_mib": rss})  # fmt: skip
    print(
        "dataset:N is SnapshotDataset in a DataLoader with N workers (0: in the main "
        "process); torch alone:N, one prepared batch handed over by N workers (no snap)"
    )
    if args.json:
        _common.write_json(args.json, {"rows": rows, "codec": args.codec, "tokens": args.tokens})
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
