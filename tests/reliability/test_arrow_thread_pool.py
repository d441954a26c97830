"""snap reads and writes shards without Arrow's CPU thread pool, so a process at its memory or
thread limit gets an error, never a crash.

Under ``ulimit -v`` a compressed record batch decoded or encoded on Arrow's pool crashed the
process (SIGSEGV) about one time in two: where the pool started some threads and then could
not start another, its ParallelFor returned the error while the tasks it had started still
ran on its stack (pyarrow 19 to 26). Found with ``ulimit -v 500000; snap verify`` and ``snap
bench`` on the quickstart's snapshot. The crash needs a thread start to fail midway, which no
test can arrange reliably; what can be checked is the kind: every read and write path, with
every codec, leaves Arrow's CPU pool unstarted. The child gives the pool 8 threads (any use
of it starts them all for the many buffers here) and Arrow's IO pool 1 (an OS file Arrow
opens may start that one: its errors are clean), and counts the native threads Python did
not start, before and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CHILD = """
import os, sys, threading
import numpy as np
import pyarrow as pa
import snapshot_cli as snap
from snapshot_cli.readers import verify as V

pa.set_cpu_count(8)
pa.set_io_thread_count(1)


def native():
    return len(os.listdir("/proc/self/task")) - threading.active_count()


@snap.ragged("tokens")
def f(i):
    rng = np.random.default_rng(i)
    for k in range(32):
        yield {
            "image": rng.integers(0, 9, (3, 8, 8), np.uint8),
            "label": k,
            "caption": f"record {k} of input {i} " * (k % 4),
            "tokens": rng.integers(0, 100, k % 7),
            **{f"c{c}": rng.random(4, np.float32) for c in range(8)},
        }


out, codec = sys.argv[1], sys.argv[2]
before = native()
seen = {}
for where in (out, "memory://pool/" + codec):
    s = snap.create(f, where, inputs=range(4), workers=0, compression=codec, shard_size="8KiB")
    s = snap.open(where)
    for shuffle in (True, False):
        for columns in (None, ["caption", "label"]):
            loader = s.loader(batch_size=16, shuffle=shuffle, columns=columns)
            with loader:
                seen[where, shuffle, bool(columns)] = sum(len(b["label"]) for b in loader)
    seen[where, "head"] = len(s.head(40))
    seen[where, "table"] = sum(s.read_shard(i).num_rows for i in range(len(s.shards)))
    seen[where, "verify"] = V.verify(s, threads=1).ok
print(native() - before, sorted(set(map(str, seen.values()))), len(s.shards))
"""


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
def test_reads_and_writes_start_no_thread_of_arrows_pool(tmp_path: Path, codec: str) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    res = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "s"), codec],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # (this tree's snap, not the installed)
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    started, values, shards = res.stdout.split(" ", 1)[0], *res.stdout.rsplit(" ", 1)
    assert int(shards) > 1, res.stdout  # (several shards: a shuffle reads across them)
    # every read saw every record (128), and verify found both snapshots whole
    assert "['128', '40', 'True']" in values, res.stdout
    # Arrow's CPU pool, used, starts 8 (9 and 5 were seen with 8 and 4, before): up to 3
    # are the IO pool's one and a loader's threads still ending (a busy machine, 2 seen)
    assert int(started) <= 3, f"{started} threads of Arrow's pools started: {res.stdout}"
