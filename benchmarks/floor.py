"""Benchmark: the floor of a shuffled uncompressed epoch, in C, against the loader (issue 16).

Where is the limit of a shuffled epoch of an uncompressed snapshot on this machine? README's
targets are fractions of "decode + one copy" (the baseline: every record batch's columns
copied once, in order, into memory a thread reuses, which stays in the CPU's caches). A
shuffled epoch cannot work that way: its records go to random places, and a first epoch must
also check every byte. ``benchmarks/floor.c`` does the least work such an epoch needs, in C,
with no Python, no queues and no consumer (a lower bound no loader beats), on the same
snapshot as ``replay.py`` (2 GB of image-like records, uncompressed; shared with it):

  * C base: the baseline's work in C (each record batch's columns copied into a reused buffer);
  * C first epoch, slot windows: each record batch's crc32c (snap's own code), then each record
    copied to a random slot of a 256 MiB window; two windows' memory going round, new to the
    process (as in any fresh process); a batch is then a view, so nothing more;
  * C first epoch, slots in huge pages: the same, the windows' memory in transparent huge
    pages, which cost a quarter of small pages to map and zero where the host of this virtual
    machine has them backed, and several times more where it must back them first (free page
    reporting hands freed 2 MiB blocks back to the host within seconds): information, not a
    floor snap is measured against (snap uses small pages for that reason);
  * C first epoch, gathered: each record batch's crc32c, then batches gathered from the shard
    files' maps into 16 buffers going round;
  * C later epoch, maps per window: batches gathered from maps of the shard files made for each
    window (as snap's later epochs do, to keep what is mapped near a window's bytes);
  * C later epoch, maps kept: the same from maps kept for the whole epoch (everything mapped);
  * the baseline (``_common.pyarrow_alone``, as in replay.py), and snap's loader: a shuffled
    first epoch in a new process (replay.py's child) and a second epoch.

Before timing, each C mode runs once with checks: every record delivered once (the sum of the
first 8 bytes of each column's records) and every record batch checksummed (the xor of their
crc32c), both against what Python computes from the same shards; any difference ends the run.
Each configuration runs in a fresh process (C, and snap's first epoch) or in this one (the
baseline and snap's second epoch, as replay.py does), the page cache re-warmed before each,
alternating within each repeat; the table reports medians, the fraction of the baseline, and
snap's fraction of the fastest floor of the same kind of epoch. Needs a C compiler (the one
Python was built with, else ``cc``); the program is built into ``--data-dir``.

    python benchmarks/floor.py              # ~2 minutes (and ~30 s to write the snapshot once)
    python benchmarks/floor.py --quick      # smoke run: 0.2 GB, 1 repeat
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import statistics
import struct
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the benchmarks' shared scaffolding (before numpy: pins thread pools)
import numpy as np
import pyarrow as pa

import snapshot_cli as snap
from snapshot_cli.crc import crc32c

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "floor.c"
HEADERS = [HERE.parent / "snapshot_cli" / h for h in ("_decode_crc32c.h", "_records.h")]
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 2.0, 0.2
BATCH_SIZE, THREADS = 256, 2

BASE = "decode + one copy (pyarrow)"
SNAP_FIRST = "snap 1st epoch, new process"
SNAP_LATER = "snap 2nd epoch"
C_MODES = {  # configuration -> floor.c's mode
    "C base": "base",
    "C 1st epoch, slot windows": "first",
    "C 1st epoch, slots in huge pages": "first-huge",
    "C 1st epoch, gathered": "first-gather",
    "C later epoch, maps per window": "later",
    "C later epoch, maps kept": "later-whole",
}
CHECKSUMMED = {"first", "first-huge", "first-gather"}
CONFIGS = [BASE, *C_MODES, SNAP_FIRST, SNAP_LATER]
# snap's configuration -> (the floors of its kind of epoch, its target as a fraction of BASE)
FLOORS = {
    SNAP_FIRST: (["C 1st epoch, slot windows", "C 1st epoch, gathered"], 0.70),
    SNAP_LATER: (["C later epoch, maps per window", "C later epoch, maps kept"], 0.80),
}


@dataclass
class Run:
    config: str
    seconds: float
    cpu_seconds: float
    nbytes: int

    @property
    def gbps(self) -> float:
        return _common.rate_gbps(self.nbytes, self.seconds)


# --- the program and its table --------------------------------------------------------------


def build(data_dir: str) -> str:
    """floor.c compiled into ``data_dir`` (again when it or a header it includes changed)."""
    digest = hashlib.sha256()
    for f in [SOURCE, *HEADERS]:
        digest.update(f.read_bytes())
    out = os.path.join(data_dir, "floor-bin", f"floor-{digest.hexdigest()[:12]}")
    if os.path.exists(out):
        return out
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
    except OSError as err:
        raise snap.SnapError(f"cannot build the floor program in {os.path.dirname(out)}: "
                             f"{err.strerror}; pass --data-dir DIR") from err  # fmt: skip
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc") or ["cc"]
    include = sysconfig.get_paths()["include"]
    cmd = [*cc, "-O2", "-pthread", f"-I{HEADERS[0].parent}", f"-I{include}", str(SOURCE),
           "-o", out + ".tmp"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as err:
        raise _common.ChildError(f"building {SOURCE.name} ({cc[0]}: {err.strerror})", 127,
                                 "") from err  # fmt: skip
    if proc.returncode != 0:
        raise _common.ChildError(f"building {SOURCE.name}: {shlex.join(cmd)}",
                                 proc.returncode, proc.stderr)  # fmt: skip
    os.replace(out + ".tmp", out)
    return out


def fixed_columns(schema: pa.Schema) -> list[tuple[str, int]]:
    """(name, record width) of every column; the floor takes fixed-width columns only."""
    out = []
    for field in schema:
        t = field.type.storage_type if isinstance(field.type, pa.BaseExtensionType) else field.type
        width = t.bit_width // 8 if pa.types.is_primitive(t) and t.bit_width % 8 == 0 else 0
        if pa.types.is_fixed_size_list(t) and pa.types.is_primitive(t.value_type):
            width = t.list_size * t.value_type.bit_width // 8
        if width <= 0:
            raise snap.SnapError(f"column {field.name!r} ({field.type}) is not fixed-width: the "
                                 "floor takes snapshots of fixed-width columns only")  # fmt: skip
        out.append((field.name, width))
    return out


def values_of(column: pa.Array) -> pa.Buffer:
    """The buffer of a fixed-width column's values (it must have no nulls)."""
    if isinstance(column.type, pa.BaseExtensionType):
        column = column.storage
    if column.null_count:
        raise snap.SnapError("the floor takes columns without nulls")
    if pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    return column.buffers()[-1]


def write_table(paths: list[str], out: str) -> tuple[int, list[int]]:
    """floor.c's table for these shards → the xor of the record batches' crc32c and, per
    column, the sum of each record's first 8 bytes (what a check run must report)."""
    schema = pa.ipc.open_file(pa.memory_map(paths[0])).schema
    columns = fixed_columns(schema)
    crcs, sums = 0, [0] * len(columns)
    rows: list[bytes] = [struct.pack(f"<{1 + len(columns)}q", len(columns),
                                     *(w for _, w in columns))]  # fmt: skip
    for f, path in enumerate(paths):
        whole = pa.memory_map(path).read_buffer()
        reader = pa.ipc.open_file(pa.BufferReader(whole))
        for i in range(reader.num_record_batches):
            rb = reader.get_batch(i)
            values = [values_of(rb.column(name)) for name, _ in columns]
            starts = [b.address - whole.address for b in values]
            body = min(starts)
            end = max(s + b.size for s, b in zip(starts, values, strict=True))
            crcs ^= crc32c(memoryview(whole)[body:end])
            for c, (b, (_, width)) in enumerate(zip(values, columns, strict=True)):
                recs = np.frombuffer(b, np.uint8, rb.num_rows * width).reshape(-1, width)
                head = np.zeros((rb.num_rows, 8), np.uint8)
                head[:, : min(8, width)] = recs[:, :8]
                sums[c] = (sums[c] + int(head.view("<u8").sum(dtype=np.uint64))) % (1 << 64)
            rows.append(struct.pack(f"<{4 + len(columns)}q", f, rb.num_rows, body, end - body,
                                    *starts))  # fmt: skip
    Path(out).write_bytes(b"".join(rows))
    return crcs, sums


def run_floor(binary: str, mode: str, window_mb: int, table: str, paths: list[str],
              check: bool = False) -> dict[str, Any]:  # fmt: skip
    argv = [binary, mode, str(THREADS), str(window_mb), str(BATCH_SIZE), str(int(check)),
            table, *paths]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise _common.ChildError(f"the floor's {mode}", proc.returncode, proc.stderr)
    return _common.last_json_line(proc.stdout)  # type: ignore[no-any-return]


def check_floor(binary: str, window_mb: int, table: str, paths: list[str],
                expected: tuple[int, list[int]], records: int) -> None:  # fmt: skip
    """Each mode once, checked: every record delivered, every record batch checksummed."""
    for mode in C_MODES.values():
        doc = run_floor(binary, mode, window_mb, table, paths, check=True)
        wrong = []
        if doc["records"] != records:
            wrong.append(f"{doc['records']} records, not {records}")
        if doc["sums"] != expected[1]:
            wrong.append(f"column digests {doc['sums']}, not {expected[1]}")
        if mode in CHECKSUMMED and doc["crc_xor"] != expected[0]:
            wrong.append(f"crc32c xor {doc['crc_xor']}, not {expected[0]}")
        if wrong:
            raise snap.SnapError(f"the floor's {mode} delivered other records than the "
                                 f"snapshot holds: {'; '.join(wrong)}")  # fmt: skip


# --- the runs --------------------------------------------------------------------------------


def run_config(config: str, s: snap.Snapshot, paths: list[str], binary: str, table: str,
               window_mb: int) -> Run:  # fmt: skip
    _common.rewarm(paths)
    if config == BASE:
        with _common.Stopwatch() as sw:
            nbytes, _ = _common.pyarrow_alone(paths, False, copy=True)
        return Run(config, sw.seconds, sw.cpu, nbytes)
    if config in C_MODES:
        doc = run_floor(binary, C_MODES[config], window_mb, table, paths)
        return Run(config, doc["seconds"], doc["cpu"], doc["bytes"])
    if config == SNAP_FIRST:
        doc = _common.run_child([str(HERE / "replay.py"), "--epoch-child", s.root, "1"], config)
        return Run(config, doc["seconds"], doc["cpu"], doc["bytes"])
    nbytes, _, _, seconds, cpu = _common.timed_epoch(s, BATCH_SIZE, warm=True, shuffle=True)
    return Run(config, seconds, cpu, nbytes)


def print_table(runs: list[Run]) -> dict[str, float]:
    rates = {c: statistics.median(r.gbps for r in runs if r.config == c) for c in CONFIGS}
    cpu = {c: statistics.median(r.cpu_seconds for r in runs if r.config == c) for c in CONFIGS}
    base = rates[BASE]
    print(f"\nfloor of a shuffled uncompressed epoch: GB/s of column data (higher is better), "
          f"x base = of '{BASE}', median of {sum(r.config == BASE for r in runs)}")  # fmt: skip
    print(f"{'configuration':<34} {'GB/s':>6} {'x base':>6} {'cpu s':>6}  runs (GB/s)")
    print("-" * 90)
    for c in CONFIGS:
        runs_text = _common.runs_text(r.gbps for r in runs if r.config == c)
        print(f"{c:<34} {rates[c]:6.2f} {rates[c] / base:6.2f} {cpu[c]:6.2f}  {runs_text}")
    print()
    for loader, (floors, target) in FLOORS.items():
        best = max(floors, key=rates.__getitem__)
        print(f"{loader}: {rates[loader] / base:.2f} of the baseline (target {target:.2f}); the "
              f"floor of such an epoch ({best}) {rates[best] / base:.2f}, so the loader runs at "
              f"{rates[loader] / rates[best]:.2f} of the floor"
              + ("; the target is above the floor: out of reach for any loader on this machine"
                 if rates[best] / base < target else ""))  # fmt: skip
    return rates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _common.parser(__doc__)
    p.add_argument("--size-gb", type=float, default=None,
                   help=f"uncompressed GB of image+label ({DEFAULT_SIZE_GB})")  # fmt: skip
    _common.add_data_dir_option(p, _common.SHARED_DATA_DIR)
    p.add_argument("--repeats", type=int, default=None, help="runs per configuration (5)")
    p.add_argument("--window-mb", type=int, default=256, help="the floor's windows (256)")
    p.add_argument("--workers", type=int, default=2, help="processes writing the snapshot (2)")
    _common.add_json_option(p)
    _common.add_quick_option(p, f"{QUICK_SIZE_GB} GB")
    args = p.parse_args(argv)
    _common.resolve_quick(args, "size_gb", DEFAULT_SIZE_GB, QUICK_SIZE_GB, repeats=5)
    if args.size_gb <= 0 or args.repeats < 1 or args.window_mb < 1 or args.workers < 0:
        p.error("need --size-gb > 0, --repeats >= 1, --window-mb >= 1, --workers >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = _common.environment()
    load_start = os.getloadavg()
    print(_common.load_at_start(_common.describe(env), load_start))
    s = _common.ensure_snapshot(args.data_dir, "none", args.size_gb, False, args.workers)
    paths = _common.shard_paths(s)
    binary = build(args.data_dir)
    table = os.path.join(os.path.dirname(binary), f"table-{os.path.basename(s.root)}.bin")
    expected = write_table(paths, table)
    check_floor(binary, args.window_mb, table, paths, expected, s.num_records)
    runs: list[Run] = []
    for rep in range(args.repeats):
        for config in _common.rotated(CONFIGS, rep * 2):
            run = run_config(config, s, paths, binary, table, args.window_mb)
            runs.append(run)
            print(f"  repeat {rep + 1}/{args.repeats} {config:<34} {run.gbps:6.2f} GB/s "
                  f"{run.seconds:6.3f} s (cpu {run.cpu_seconds:.2f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    rates = print_table(runs)
    print(_common.load_summary(_common.describe(env), load_start[0], os.getloadavg()[0]))
    if args.quick:
        print(_common.QUICK_NOTE)
    if args.json:
        _common.write_json(args.json, {
            "medians_gbps": rates,
            "runs": [{**asdict(r), "gbps": r.gbps} for r in runs],
            "environment": _common.run_environment(env, (load_start, os.getloadavg()), args,
                                                   BATCH_SIZE),
        })  # fmt: skip
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
