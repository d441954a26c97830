"""Benchmark: the first epoch read from disk, not from the page cache (``readers/readahead.py``).

A snapshot written on another machine, or one larger than memory, is read from disk: its
first epoch (every epoch, if it does not fit) waits for the device as well as decoding. For
each codec, each run evicts the snapshot's shard files from the page cache
(``posix_fadvise(DONTNEED)``) and times, in a fresh process, a shuffled first epoch (batch
256) with the loader's read-ahead on and off, alternating, beside two baselines of the same
files: reading them from disk with nothing else (``pread`` of 4 MiB: the device's own time)
and the same first epoch with the files in the page cache (warm). Medians of ``--repeats``.

Where the page cache cannot be emptied this way (tmpfs: nothing is read from a device), the
benchmark says so and stops. The snapshots are written once into ``--data-dir`` (default
``benchmarks/out/cold-data``, ~1.5 GB per codec) and reused by later runs.

Usage: python benchmarks/cold.py [--size-gb 1.5] [--codecs lz4,none,zstd] [--repeats 3]
                                 [--data-dir DIR]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # the shared image-like snapshots

CHILD = """
import json, sys, time
import snapshot_cli as snap
from snapshot_cli.readers import readahead
readahead.ENABLED = sys.argv[2] == "on"
started = time.perf_counter()
s = snap.open(sys.argv[1])
with s.loader(256, shuffle=True, seed=0) as loader:
    nbytes = sum(b["image"].nbytes + b["label"].nbytes for b in loader)
    stats = loader.stats()
print(json.dumps({"seconds": time.perf_counter() - started, "bytes": nbytes,
                  "ahead": stats["windows_read_ahead"], "windows": stats["windows"]}))
"""


def evict(paths: list[str]) -> None:
    """The files' pages leave the page cache (synced first: dirty pages would stay)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def device_read(paths: list[str]) -> tuple[float, int]:
    """Seconds to read the files from disk with 4 MiB preads, and the bytes the process had
    read from block devices meanwhile (0: they were not read from a device)."""
    evict(paths)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_inblock
    with _common.Stopwatch() as sw:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                offset = 0
                while chunk := os.pread(fd, 4 << 20, offset):
                    offset += len(chunk)
            finally:
                os.close(fd)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_inblock
    return sw.seconds, (after - before) * 512


def epoch(path: str, readahead: str, paths: list[str], cold: bool) -> dict[str, float]:
    """A fresh process's first shuffled epoch, from disk (``cold``) or the page cache."""
    if cold:
        evict(paths)
    else:
        _common.rewarm(paths)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, path, readahead],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = _common.parser(__doc__)
    parser.add_argument("--size-gb", type=float, default=1.5)
    parser.add_argument("--codecs", default="lz4,none,zstd")
    parser.add_argument("--repeats", type=int, default=3)
    _common.add_data_dir_option(parser, _common.out_dir("cold-data"))
    args = parser.parse_args()
    data_dir = args.data_dir
    _common.print_header(
        f"first shuffled epoch from disk, {args.size_gb:g} GB, batch 256, "
        f"medians of {args.repeats} (seconds; fresh process each)"
    )
    print(f"{'codec':6} {'device read':>11} {'warm':>6} {'cold, off':>10} {'cold, on':>9} "
          f"{'on/off':>7} {'on/warm':>8}  read ahead  runs (off | on)")  # fmt: skip
    for codec in args.codecs.split(","):
        s = _common.ensure_snapshot(data_dir, codec, args.size_gb, False, workers=2)
        paths = _common.shard_paths(s)
        device, read = device_read(paths)
        if read < s.manifest.bytes // 2:
            print(f"{codec}: evicting the shard files did not make reads come from a device "
                  f"({read} bytes of {s.manifest.bytes} read from one; tmpfs?): nothing to "
                  "measure here")  # fmt: skip
            _common.print_data_kept(data_dir)
            return 2
        warm, off, on, ahead = [], [], [], ""
        for r in range(args.repeats):
            warm.append(epoch(s.root, "on", paths, cold=False)["seconds"])
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                run = epoch(s.root, mode, paths, cold=True)
                (on if mode == "on" else off).append(run["seconds"])
                if mode == "on":
                    ahead = f"{run['ahead']}/{run['windows']}"
        m_off, m_on, m_warm = (statistics.median(x) for x in (off, on, warm))
        print(f"{codec:6} {device:10.2f}s {m_warm:5.2f}s {m_off:9.2f}s {m_on:8.2f}s "
              f"{m_on / m_off:7.2f} {m_on / m_warm:8.2f}  {ahead:>10}  "
              f"{_common.runs_text(off)} | {_common.runs_text(on)}")  # fmt: skip
    print("device read: the shard files read from disk alone; warm: the same epoch from the "
          "page cache; read ahead: windows asked for ahead / windows (the first is read before "
          "the loader knows the snapshot is not cached); on/off, on/warm: ratios of the "
          "epochs' times (lower is better)")  # fmt: skip
    _common.print_data_kept(data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
