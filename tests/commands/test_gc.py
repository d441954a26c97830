"""snap gc: removes what a dead writer left, keeps a live writer's run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from tests.commands.conftest import NUM_RECORDS, dead_pid, run, run_json, written_order
from tests.conftest import REPO, snap_subprocess, wait_for

DEAD_RUN = "deadbeef00"


def plant_dead_run(path: Path) -> set[str]:
    """State a dead writer leaves behind; returns the paths gc should remove."""
    run_dir = path / "_runs" / DEAD_RUN
    (run_dir / "tasks").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(
        {"run": DEAD_RUN, "fingerprint": "0" * 64, "plan": [[0, 1], [1, 2]], "created": 0}
    ))  # fmt: skip
    (run_dir / "tasks" / "00000.json").write_text(json.dumps({"run": DEAD_RUN, "task": 0}))
    (path / "shards" / f"{DEAD_RUN}-00000-0000.arrow").write_bytes(b"partial shard" * 100)
    return {f"_runs/{DEAD_RUN}", f"shards/{DEAD_RUN}-00000-0000.arrow"}


def leases(path: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in (path / "_runs").glob("lease-*.json")}


def tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def test_gc_removes_what_a_dead_writer_left(snapshot: Path) -> None:
    expected = plant_dead_run(snapshot)
    temp = f".manifest.json.{'ab' * 16}.tmp"  # an atomic write that died before its rename
    (snapshot / temp).write_text("{")
    expected.add(temp)
    epoch = 1 + max(int(name[6:14]) for name in leases(snapshot))
    dead_lease = f"lease-{epoch:08d}.json"
    (snapshot / "_runs" / dead_lease).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead_pid(), "id": "dead", "ttl": 30.0,
         "heartbeat": time.time(), "run": DEAD_RUN}
    ))  # fmt: skip
    # the temporaries of a version's copy, its task table and an older lease's heartbeat,
    # each of a process killed between its write and its rename (a user's dot-file stays)
    for rel in (f"_versions/.v00000001.json.{'cd' * 16}.tmp",
                f"_versions/.v00000001.tasks.json.{'ef' * 16}.tmp",
                f"_runs/.lease-{epoch - 1:08d}.json.{'01' * 16}.tmp",
                # (the dead holder's own: a dry run lists it as gc, taking the next, removes it)
                f"_runs/.lease-{epoch:08d}.json.{'45' * 16}.tmp"):  # fmt: skip
        (snapshot / rel).write_text("{")
        expected.add(rel)
    (snapshot / "_versions" / f".notes.{'23' * 16}.tmp").write_text("mine")
    before = tree(snapshot)

    code, stdout, stderr = run("gc", str(snapshot), "--dry-run")
    assert code == 0, stderr
    for rel in expected:
        assert f"would remove {rel}  (" in stdout
    assert "note:" not in stdout  # the writer is dead: nothing is kept for it
    assert stdout.splitlines()[-1].startswith(f"{snapshot}: would remove {len(expected)} items")
    doc = run_json("gc", str(snapshot), "--dry-run")
    assert {g["path"] for g in doc["would_remove"]} == expected and doc["writer"] is None
    assert doc["bytes"] == sum(g["bytes"] for g in doc["would_remove"]) > 0
    assert tree(snapshot) == before  # a dry run removes nothing

    doc = run_json("gc", str(snapshot))
    assert doc["dry_run"] is False and {g["path"] for g in doc["removed"]} == expected
    assert {g["kind"] for g in doc["removed"]} == {"run", "shard", "temporary"}
    assert doc["kept_runs"] == [] and doc["writer"] is None
    after = tree(snapshot)
    assert not any(name.startswith(tuple(expected)) for name in after)
    assert f"_versions/.notes.{'23' * 16}.tmp" in after
    assert dead_lease not in leases(snapshot)
    assert all(h.get("released") for h in leases(snapshot).values())  # nobody holds it now
    m = snap.open(snapshot).manifest
    assert all(s.path in after and after[s.path] == s.bytes for s in m.shards)
    assert sorted(n for n in after if n.startswith("shards/")) == sorted(s.path for s in m.shards)

    # The snapshot still replays completely, and checks out.
    assert [int(r["label"]) for r in written_order(snapshot)] == list(range(NUM_RECORDS))
    assert run("verify", str(snapshot))[0] == 0
    code, stdout, _ = run("gc", str(snapshot))
    assert code == 0 and stdout.strip() == f"{snapshot}: nothing to remove"


LIVE_PIPE = """
import os, time
import numpy as np

def preprocess(path, *, gate, block, tag):
    with open(path) as f:
        i = int(f.read())
    for j in range(4):
        yield {"x": np.full(256, i * 10 + j, np.int32), "id": i * 10 + j, "tag": tag}
        if i == block and j == 1:
            while not os.path.exists(gate):  # the writer is blocked here, mid-shard
                time.sleep(0.01)
"""
LIVE_INPUTS = 4
LIVE_BLOCK = 2


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed when it ends, failed or not."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_gc_keeps_a_live_writers_run(
    tmp_path: Path,
    write_pipeline: Callable[..., str],
    processes: list[subprocess.Popen[bytes]],
) -> None:
    spec = write_pipeline(LIVE_PIPE)
    (tmp_path / "in").mkdir()
    for i in range(LIVE_INPUTS):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    out, gate = tmp_path / "snap", tmp_path / "gate"
    common = [spec, str(out), "--input", str(tmp_path / "in" / "*.txt"), "--param",
              f"gate={json.dumps(str(gate))}", "--workers", "0", "--inputs-per-task", "1",
              "--batch-rows", "1", "--quiet"]  # fmt: skip
    # An old committed snapshot made with other params: the live run replaces it.
    code, _, stderr = run("create", *common, "--param", "block=-1", "--param", "tag=old")
    assert code == 0, stderr
    old_shards = {s.path for s in snap.open(out).shards}

    log, result = tmp_path / "create.err", tmp_path / "create.json"
    with open(log, "wb") as err, open(result, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snapshot_cli", "create", *common, "--param",
             f"block={LIVE_BLOCK}", "--param", "tag=new", "--overwrite", "--json"],
            cwd=REPO, stdout=stdout, stderr=err,
        )  # fmt: skip
    processes.append(proc)

    def live_run() -> str | None:
        for holder in leases(out).values():
            if holder.get("pid") == proc.pid and holder.get("run") and not holder.get("released"):
                return str(holder["run"])
        return None

    def blocked() -> bool:
        assert proc.poll() is None, f"create exited early: {log.read_text()}"
        run_id = live_run()
        if run_id is None:
            return False
        done = {p.name for p in (out / "_runs" / run_id / "tasks").glob("*.json")}
        partial = list((out / "shards").glob(f"{run_id}-{LIVE_BLOCK:05d}-0000-*.arrow"))
        return done == {f"{t:05d}.json" for t in range(LIVE_BLOCK)} and bool(partial)

    wait_for(blocked, "the live writer to block mid-shard")
    live = live_run()
    assert live is not None
    garbage = plant_dead_run(out)  # another, dead, run's leftovers
    # (a live writer's temporaries are its version's copy or heartbeat being written: kept)
    (out / "_versions" / f".v00000009.json.{'ab' * 16}.tmp").write_text("{")
    live_shards = {p.name for p in (out / "shards").glob(f"{live}-*")}
    assert len(live_shards) == LIVE_BLOCK + 1

    # Readers still see the old snapshot meanwhile.
    assert run_json("inspect", str(out))["params"]["tag"] == "old"

    code, stdout, _ = run("gc", str(out), "--dry-run")
    assert code == 0 and f"note: a live writer ({socket.gethostname()}:{proc.pid}" in stdout
    assert f"its run {live} is kept" in stdout
    assert (out / "_runs" / DEAD_RUN).exists()

    gc_proc = snap_subprocess("gc", str(out), "--json")  # gc as a real process
    assert gc_proc.returncode == 0, gc_proc.stderr
    doc = json.loads(gc_proc.stdout)
    assert {g["path"] for g in doc["removed"]} == garbage
    assert doc["kept_runs"] == [live]
    assert doc["writer"]["run"] == live and f":{proc.pid} " in doc["writer"]["holder"]
    assert live in doc["note"]
    assert (out / "_runs" / live / "run.json").is_file()
    assert {p.name for p in (out / "shards").glob(f"{live}-*")} == live_shards
    assert all((out / p).is_file() for p in old_shards)  # still committed: never touched
    assert not (out / "_runs" / DEAD_RUN).exists()
    assert not (out / "shards" / f"{DEAD_RUN}-00000-0000.arrow").exists()
    assert proc.poll() is None

    gate.write_text("open")
    assert proc.wait(timeout=120) == 0, log.read_text()
    info = json.loads(result.read_text())
    assert info["run"] == live and info["num_records"] == LIVE_INPUTS * 4
    s = snap.open(out)
    assert s.manifest.pipeline["params"]["tag"] == "new"
    ids = sorted(int(i) for b in s.iter_batches() for i in b["id"])  # checksums every shard
    assert ids == sorted(i * 10 + j for i in range(LIVE_INPUTS) for j in range(4))
    assert run("verify", str(out))[0] == 0
