"""What a first create killed or failed leaves, once gc removed its dead run and shards:
``_runs/`` of released leases and an empty ``shards/`` (``_versions/``). gc kept them for
good ("nothing to remove"), because the empty ``shards/`` was something beside ``_runs/``,
and inspect called gc's own released lease the unfinished snapshot's "writer (run -)". gc
removes them all now, and never what holds anything else; inspect says what such a lease is.
Locally through the CLI, and on the memory:// filesystem."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import fsspec
import pytest

from snapshot_cli.writers import gc as gc_mod
from tests.commands.conftest import dead_pid, failed_first_create, run, run_json

RUN = "0a1b2c3d4e"


def killed_first_create(out: Path) -> None:
    """What ``kill -9`` of a first create leaves: its lease (this host, a dead pid, never
    released), its run's state, a shard and an empty ``_versions/``."""
    (out / "_runs" / RUN / "tasks").mkdir(parents=True)
    (out / "_runs" / RUN / "run.json").write_text(json.dumps({"run": RUN, "plan": [[0, 1]]}))
    holder = {"host": socket.gethostname(), "pid": dead_pid(), "id": "x", "ttl": 60.0,
              "heartbeat": time.time(), "run": RUN}  # fmt: skip
    (out / "_runs" / "lease-00000000.json").write_text(json.dumps(holder))
    (out / "shards").mkdir()
    (out / "shards" / f"{RUN}-00000-0000-00000000.arrow").write_bytes(b"x" * 100)
    (out / "_versions").mkdir()


def test_gc_after_a_killed_first_create_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "first"
    killed_first_create(out)
    code, stdout, stderr = run("gc", str(out))  # the dead run and its shard; its lease is
    assert code == 0, stderr  # not released (a paused writer's?): gc's own stays after it
    assert f"removed _runs/{RUN}" in stdout and f"removed shards/{RUN}-" in stdout, stdout
    assert sorted(p.name for p in (out / "_runs").iterdir()) == ["lease-00000001.json"]

    code, stdout, stderr = run("inspect", str(out))  # gc's lease is no writer
    assert code == 0, stderr
    assert "unfinished snapshot" in stdout and "  writer:" not in stdout, stdout
    assert "last lease:" in stdout and "of a snap gc or of a snap create that stopped" in stdout
    assert "no writer is at work" in stdout and "not running" not in stdout

    assert [g["path"] for g in run_json("gc", str(out), "--dry-run")["would_remove"]] == [
        "_versions",
        "shards",
        "_runs",
    ]
    assert sorted(p.name for p in out.iterdir()) == ["_runs", "_versions", "shards"]
    code, stdout, stderr = run("gc", str(out))
    assert code == 0, stderr
    assert "removed shards  (0 B, empty" in stdout and "removed _runs  (" in stdout, stdout
    assert stdout.splitlines()[-1].startswith(f"{out}: removed 3 items, "), stdout
    assert list(out.iterdir()) == []
    code, stdout, stderr = run("gc", str(out))
    assert code == 1 and f"{out} is not a snapshot" in stderr, stderr


def test_gc_after_a_failed_first_create_leaves_nothing(tmp_path: Path) -> None:
    """A create whose pipeline raised released its lease: one gc removes all it left."""
    out = failed_first_create(tmp_path / "snap")
    assert list((out / "shards").iterdir())
    code, stdout, stderr = run("gc", str(out))
    assert code == 0 and "state of a dead run" in stdout and "removed _runs  (" in stdout, stdout
    assert list(out.iterdir()) == []


LEFT_ALONE = {
    "a file of the user's": lambda out: (out / "notes.txt").write_text("mine"),
    "an empty directory of another name": lambda out: (out / "data").mkdir(),
    "a directory of another name holding a file": lambda out: (
        (out / "data").mkdir(),
        (out / "data" / "x.bin").write_bytes(b"1"),
    ),
    "a file in shards/ that is not a shard": lambda out: (out / "shards" / "x.txt").write_text("1"),
    "a directory in shards/": lambda out: (out / "shards" / "sub").mkdir(),
    "a file in _versions/": lambda out: (out / "_versions" / "README").write_text("1"),
    "a version's copy in _versions/": lambda out: (
        out / "_versions" / "v00000001.tasks.json"
    ).write_text("{}"),
    "shards as a file": lambda out: ((out / "shards").rmdir(), (out / "shards").write_text("1")),
    "_versions as a file": lambda out: (
        (out / "_versions").rmdir(),
        (out / "_versions").write_text("1"),
    ),
}


@pytest.mark.parametrize("what", list(LEFT_ALONE))
def test_gc_keeps_such_leftovers_beside_anything_else(tmp_path: Path, what: str) -> None:
    out = tmp_path / "first"
    killed_first_create(out)
    assert run("gc", str(out))[0] == 0  # (its run and shard gone, gc's lease kept)
    LEFT_ALONE[what](out)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*") if "_runs" not in p.parts)
    code, stdout, stderr = run("gc", str(out))
    assert code == 0, stderr
    assert "removed _runs" not in stdout and "removed shards" not in stdout, stdout
    assert "removed _versions" not in stdout, stdout
    after = sorted(str(p.relative_to(out)) for p in out.rglob("*") if "_runs" not in p.parts)
    assert after == before
    assert [p.name for p in (out / "_runs").iterdir()] == ["lease-00000002.json"]


def test_gc_keeps_them_while_a_lease_is_not_released(tmp_path: Path) -> None:
    """The first gc after a kill: the writer's lease, not released, keeps gc's own."""
    out = tmp_path / "first"
    killed_first_create(out)
    (out / "shards" / f"{RUN}-00000-0000-00000000.arrow").unlink()
    code, stdout, _ = run("gc", str(out))
    assert code == 0 and "removed shards " not in stdout and (out / "shards").is_dir()


@pytest.mark.usefixtures("memfs")
def test_gc_in_memory_leaves_nothing() -> None:
    fs = fsspec.filesystem("memory")
    root = "/first"
    fs.makedirs(f"{root}/shards", exist_ok=True)
    fs.makedirs(f"{root}/_versions", exist_ok=True)
    lease = {"host": "elsewhere", "pid": 1, "id": "x", "ttl": 60.0, "heartbeat": 1.0,
             "run": None, "released": True}  # fmt: skip
    fs.pipe(f"{root}/_runs/lease-00000003.json", json.dumps(lease).encode())
    fs.pipe(f"{root}/_runs/{RUN}/run.json", b"{}")
    fs.pipe(f"{root}/shards/{RUN}-00000-0000-00000003.arrow", b"x")
    report = gc_mod.gc(f"memory://{root}")
    assert [g.path for g in report.garbage] == [
        f"_runs/{RUN}",
        f"shards/{RUN}-00000-0000-00000003.arrow",
        "_versions",
        "shards",
        "_runs",
    ]
    assert not fs.exists(root) or fs.ls(root, detail=False) == []
    fs.makedirs(f"{root}/shards", exist_ok=True)  # a file put in shards/: all of it stays
    fs.pipe(f"{root}/shards/mine.txt", b"1")
    fs.pipe(f"{root}/_runs/lease-00000000.json", json.dumps(lease).encode())
    assert gc_mod.gc(f"memory://{root}").garbage == []
    assert fs.cat(f"{root}/shards/mine.txt") == b"1"
