"""Replay a snapshot for one epoch with the shuffling loader and print what it measured."""

from __future__ import annotations

import json
import sys

import snapshot_cli as snap


def main(path: str) -> None:
    s = snap.open(path)
    with s.loader(batch_size=64, shuffle=True, seed=0) as loader:
        records = 0
        for batch in loader:
            records += len(batch["label"])
        last = {k: (str(v.dtype), v.shape) for k, v in batch.items()}
        stats = loader.stats()
    print(f"replayed {records} records in {stats['seconds']:.3f} s; last batch: {last}")
    # input_bound_pct: the share of the loop's time spent waiting for data; this loop does
    # nothing with a batch, so it waits nearly always (a training step would hide the loader)
    print(json.dumps({k: stats[k] for k in ("records_per_s", "input_bound_pct", "settings")}))
    if records != s.num_records:
        sys.exit(f"expected {s.num_records} records, read {records}")


if __name__ == "__main__":
    main(sys.argv[1])
