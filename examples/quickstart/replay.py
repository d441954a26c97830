"""Replay a snapshot once and print what came back (the loader arrives with its own issue)."""

from __future__ import annotations

import sys
import time

import snapshot_cli as snap


def main(path: str) -> None:
    s = snap.open(path)
    started = time.perf_counter()
    records = 0
    for batch in s.iter_batches():
        records += len(next(iter(batch.values())))
    seconds = time.perf_counter() - started
    first = next(s.iter_batches())
    shapes = {k: (str(v.dtype), v.shape) for k, v in first.items()}
    print(f"replayed {records} records in {seconds:.3f} s; first batch columns: {shapes}")
    if records != s.num_records:
        sys.exit(f"expected {s.num_records} records, read {records}")


if __name__ == "__main__":
    main(sys.argv[1])
