"""Peak memory of a replay is set by the buffer and prefetch depth, not by the snapshot size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

REPLAY = """
import resource, sys
import snapshot_cli as snap
loader = snap.open(sys.argv[1]).loader(
    batch_size=128, shuffle_buffer=1024, seed=1, prefetch=4, num_parallel_reads=2
)
n = sum(len(b["label"]) for b in loader)
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def image_records(n: int) -> Any:
    rng = np.random.default_rng(0)
    for start in range(0, n, 500):
        k = min(500, n - start)
        yield snap.Batch(
            image=rng.integers(0, 256, (k, 3, 32, 32), dtype=np.uint8),
            label=np.arange(start, start + k),
        )


def peak_rss_mib(path: Path) -> tuple[int, float]:
    out = subprocess.run(
        [sys.executable, "-c", REPLAY, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1]) / 1024  # ru_maxrss is in KiB on Linux


@pytest.mark.slow
def test_ten_times_the_data_costs_no_more_memory(tmp_path: Path) -> None:
    sizes = {"small": 8_000, "large": 80_000}  # 24 MiB and 240 MiB of 3 KiB images
    peaks = {}
    for name, n in sizes.items():
        snap.create(
            lambda n=n: image_records(n), str(tmp_path / name), workers=0, shard_size="16MiB"
        )
        records, peaks[name] = peak_rss_mib(tmp_path / name)
        assert records == n
    growth = peaks["large"] - peaks["small"]
    # Both are many windows (1,024 records = 3 MiB) long; what is held is the window being
    # served, the next one, the prefetched batches and the record batches being decoded:
    # bounded, whatever the snapshot size. (Settings are fixed here: "auto" may raise them,
    # within the caps documented in readers/loader.py, as the run goes on.)
    assert growth < 16, peaks
