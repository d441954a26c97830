"""What a killed first create leaves once gc removed its run (released leases, an empty
``shards/``) is removed by the next gc on every storage backend: gc kept it for good where
the storage keeps empty directories (``shards/`` was something besides ``_runs/``)."""

from __future__ import annotations

import json

from snapshot_cli.writers.gc import gc
from tests.backends.conftest import Backend

RUN = "0a1b2c3d4e"
LEASE = {"host": "elsewhere", "pid": 1, "id": "x", "ttl": 60.0, "heartbeat": 1.0, "run": RUN,
         "released": True}  # fmt: skip


def test_gc_leaves_nothing_of_a_failed_first_create(backend: Backend) -> None:
    fs, url = backend.fs, backend.url("first")
    path = backend.path(url)
    fs.makedirs(f"{path}/shards", exist_ok=True)
    fs.makedirs(f"{path}/_runs/{RUN}", exist_ok=True)
    fs.pipe_file(f"{path}/_runs/lease-00000001.json", json.dumps(LEASE).encode())
    fs.pipe_file(f"{path}/_runs/{RUN}/run.json", b"{}")
    fs.pipe_file(f"{path}/shards/{RUN}-00000-0000-00000001.arrow", b"x")
    backend.refresh()
    done = gc(url)
    removed = [g.path for g in done.garbage]
    assert removed[:2] == [f"_runs/{RUN}", f"shards/{RUN}-00000-0000-00000001.arrow"], removed
    assert removed[-1] == "_runs", removed
    backend.refresh()
    left = [n.rstrip("/") for n in fs.find(path, withdirs=True)] if fs.exists(path) else []
    # (OUTPUT itself stays; pyarrow's HDFS removes no directory but with all in it, so an
    # empty _runs/ stays there)
    assert [n for n in left if n != path.rstrip("/") and not n.endswith("/_runs")] == [], left
