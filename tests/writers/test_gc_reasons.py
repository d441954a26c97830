"""Why gc removes a shard: a shard several retired versions shared is said to be of the
newest of them, the one whose replacement made it garbage (it named the oldest: "of version
1, superseded 3 days ago" for a shard version 2 still had until an hour ago)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import snapshot_cli as snap
from snapshot_cli.writers.gc import gc


def preprocess(i: int):  # type: ignore[no-untyped-def]
    yield {"x": np.full(4, i, np.int64)}


def test_a_shard_retired_versions_shared_is_said_to_be_the_newest_s(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    for n, overwrite in ((2, False), (3, False), (4, False), (4, True)):  # v1..v3 grow, v4 anew
        snap.create(preprocess, path, inputs_from=lambda n=n: list(range(n)), workers=0,
                    inputs_per_task=1, overwrite=overwrite)  # fmt: skip
    versions = {v: {s.path for s in snap.open(path, version=v).shards} for v in (1, 2, 3)}
    shared = versions[1] & versions[2] & versions[3]
    assert shared  # (the growth kept version 1's shards)
    reasons = {g.path: g.reason for g in gc(path, dry_run=True, retention=0).garbage}
    for shard in versions[1] | versions[2] | versions[3]:
        newest = max(v for v, shards in versions.items() if shard in shards)
        assert reasons[shard].startswith(f"of version {newest}, superseded "), (shard, reasons)
