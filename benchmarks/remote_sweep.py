"""The sweep of ``benchmarks/remote.py``: concurrent processes replaying one ``slow://``
snapshot through one shared ``cache_dir``, and how many bytes ``slow://`` served them.

Each process is ``remote.py --child`` (:func:`child`); the bytes served are summed over the
counters that every process appends to ``SNAP_SLOW_STATS`` (``benchmarks/slowfs.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import _common
import slowfs
from remote_runs import BATCH_SIZE, shard_paths

import snapshot_cli as snap
from snapshot_cli import storage

EPOCHS = 2


def child(url: str, cache_dir: str, epochs: int, seed: int) -> int:
    """In a --child process: replay ``url`` for ``epochs`` epochs; print one JSON line."""
    s = snap.open(url)
    t0 = time.perf_counter()
    with s.loader(BATCH_SIZE, shuffle=True, seed=seed, epochs=epochs, cache_dir=cache_dir) as ld:
        nbytes, records = _common.drain(ld)
        stats = ld.stats()
    seconds = time.perf_counter() - t0
    print(json.dumps({"bytes": nbytes, "records": records, "seconds": seconds, "stats": stats}))
    slowfs.dump_stats()  # also at exit; written here so a crash in teardown cannot lose it
    slowfs.reset_stats()
    return 0


@dataclass
class Sweep:
    procs: int
    epochs: int
    wall_seconds: float
    delivered_bytes: int  # uncompressed, all processes, all epochs
    served_bytes: int  # every byte slow:// served (shards, manifests, footers)
    served_shard_bytes: int
    requests: int
    file_bytes: int  # the snapshot's shards on disk
    max_per_shard: float  # the most any one shard was downloaded, in copies
    fills: int
    hits: int
    fill_bytes: int
    child_seconds: list[float] = field(default_factory=list)

    @property
    def factor(self) -> float:
        return self.served_shard_bytes / max(1, self.file_bytes)

    @property
    def gbps(self) -> float:
        return _common.rate_gbps(self.delivered_bytes, self.wall_seconds)


def sweep(
    script: str, remote: snap.Snapshot, local: snap.Snapshot, procs: int, data_dir: str
) -> Sweep:
    """Run ``procs`` processes of ``script --child`` at once over ``remote``, each for EPOCHS
    epochs with the same fresh cache_dir (in ``data_dir``, removed afterwards)."""
    _common.raw_read(shard_paths(local))
    work = tempfile.mkdtemp(prefix="sweep-", dir=data_dir)
    stats_file = os.path.join(work, "slow-stats.jsonl")
    cache_dir = os.path.join(work, "cache")
    env = {**os.environ, slowfs.ENV_STATS: stats_file}
    try:
        t0 = time.perf_counter()
        children = [
            subprocess.Popen(
                [sys.executable, script, "--child", remote.url, "--cache-dir", cache_dir]
                + ["--epochs", str(EPOCHS), "--seed", str(k)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for k in range(procs)
        ]
        outs = [p.communicate() for p in children]
        wall = time.perf_counter() - t0
        for p, (_, err) in zip(children, outs, strict=True):
            if p.returncode != 0:
                raise _common.ChildError("a sweep process", p.returncode, err)
        docs = [_common.last_json_line(out) for out, _ in outs]
        lines = slowfs.read_stats(stats_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = {storage.join(remote.root, e.path): e.bytes for e in remote.shards}
    per_path: dict[str, int] = {}
    for line in lines:
        for path, n in line["paths"].items():
            per_path[path] = per_path.get(path, 0) + n
    caches = [d["stats"].get("cache", {}) for d in docs]
    return Sweep(
        procs=procs,
        epochs=EPOCHS,
        wall_seconds=wall,
        delivered_bytes=sum(d["bytes"] for d in docs),
        served_bytes=sum(line["bytes"] for line in lines),
        served_shard_bytes=sum(n for p, n in per_path.items() if p in sizes),
        requests=sum(line["requests"] for line in lines),
        file_bytes=sum(sizes.values()),
        max_per_shard=max((per_path.get(p, 0) / n for p, n in sizes.items()), default=0.0),
        fills=sum(c.get("fills", 0) for c in caches),
        hits=sum(c.get("hits", 0) for c in caches),
        fill_bytes=sum(c.get("fill_bytes", 0) for c in caches),
        child_seconds=[round(d["seconds"], 2) for d in docs],
    )
