"""Real processes: kill -9 during `snap create` then resume; two creates of one snapshot at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import REPO, wait_for

# Inputs >= 4 block until the gate file exists: the first run is killed while they block,
# after having written part of a shard (batch_rows=1 flushes every record).
PIPE = """
import os, time
import numpy as np

def preprocess(path, *, calls, gate):
    name = os.path.basename(path)
    with open(calls, "a") as f:
        f.write(f"{name} {os.getpid()}\\n")
    i = int(name.split("-")[1].split(".")[0])
    for j in range(6):
        x = np.random.default_rng(i * 10 + j).integers(0, 2**31, 4000, dtype=np.int32)
        yield {"x": x, "id": f"{i}-{j}"}
        if j == 2 and i >= 4:
            while not os.path.exists(gate):
                time.sleep(0.01)
"""


def calls(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(a, int(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


def create_cmd(out: Path, inputs: Path, spec: str, calls_file: Path, gate: Path) -> list[str]:
    return [
        sys.executable, "-m", "snapshot_cli", "create", spec, str(out),
        "--input", str(inputs / "*.txt"), "--param", f"calls={json.dumps(str(calls_file))}",
        "--param", f"gate={json.dumps(str(gate))}", "--workers", "2", "--inputs-per-task", "1",
        "--batch-rows", "1", "--json",
    ]  # fmt: skip


def start_create(
    out: Path, inputs: Path, spec: str, calls_file: Path, gate: Path, log: Path
) -> subprocess.Popen[bytes]:
    cmd = create_cmd(out, inputs, spec, calls_file, gate)
    with open(log, "wb") as err, open(str(log) + ".out", "wb") as out_f:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out_f, stderr=err)
    _started.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Kill any create still running when a test ends (a failed test must not leak it)."""
    yield _started
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


_started: list[subprocess.Popen[bytes]] = []


def make_inputs(d: Path, n: int) -> None:
    d.mkdir()
    for i in range(n):
        (d / f"in-{i:03d}.txt").write_text(str(i))


def records(path: str) -> list[tuple[str, list[int]]]:
    return [
        (b["id"][i], b["x"][i].tolist())
        for b in snap.open(path).iter_batches()  # verifies every shard's crc32c
        for i in range(len(b["id"]))
    ]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) counts as dead; so does one reaped
    # between the two looks (reading its /proc entry then fails with ESRCH or ENOENT).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


@pytest.mark.slow
def test_kill_9_then_resume_equals_uninterrupted_run(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 8)
    out, calls_file, gate = tmp_path / "snap", tmp_path / "calls", tmp_path / "gate"
    proc = start_create(out, tmp_path / "in", spec, calls_file, gate, tmp_path / "log1")
    results = out / "_runs"

    def partial_shards() -> list[Path]:
        found = [p for t in (4, 5) for p in (out / "shards").glob(f"*-{t:05d}-0000-*.arrow")]
        return [p for p in found if p.stat().st_size > 0]

    def blocked() -> bool:
        done = list(results.glob("*/tasks/*.json")) if results.exists() else []
        return len(done) == 4 and len(partial_shards()) == 2

    # Tasks 0-3 finished; tasks 4 and 5 are blocked with half-written shards on disk.
    wait_for(blocked, "tasks 0-3 done and tasks 4, 5 mid-shard")
    assert not (out / "manifest.json").exists()
    workers = {pid for _, pid in calls(calls_file)}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not any(pid_alive(p) for p in workers), "worker processes to die")
    assert not (out / "manifest.json").exists()

    gate.write_text("open")
    second = subprocess.run(
        create_cmd(out, tmp_path / "in", spec, calls_file, gate),
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    info = json.loads(second.stdout)
    assert info["tasks_resumed"] == 4 and info["num_records"] == 48 and not info["reused"]
    names = [c[0] for c in calls(calls_file)]
    assert names.count("in-000.txt") == 1  # finished work is not redone
    assert sorted(set(names) - {"in-004.txt", "in-005.txt"}) == [
        f"in-{i:03d}.txt" for i in (0, 1, 2, 3, 6, 7)
    ]

    baseline = tmp_path / "baseline"
    snap.create(spec, str(baseline), inputs=str(tmp_path / "in" / "*.txt"),
                params={"calls": str(tmp_path / "c2"), "gate": str(gate)},
                workers=0, inputs_per_task=1, batch_rows=1)  # fmt: skip
    assert records(str(out)) == records(str(baseline))
    assert sorted(p.name for p in (out / "shards").iterdir()) == sorted(
        Path(s.path).name for s in snap.open(str(out)).shards
    )


@pytest.mark.slow
def test_two_creates_at_once_never_both_write(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 6)
    out, calls_file, gate = tmp_path / "snap", tmp_path / "calls", tmp_path / "gate"
    first = start_create(out, tmp_path / "in", spec, calls_file, gate, tmp_path / "log1")
    wait_for(
        lambda: any(c[0] == "in-004.txt" for c in calls(calls_file)), "the first writer to work"
    )
    second = start_create(out, tmp_path / "in", spec, calls_file, gate, tmp_path / "log2")
    wait_for(
        lambda: b"waiting for the writer lease" in (tmp_path / "log2").read_bytes(),
        "the second to say that it waits",
    )
    said = (tmp_path / "log2").read_text()
    # who holds the lease: host, pid and heartbeat age
    assert f"{socket.gethostname()}:{first.pid}" in said and "heartbeat" in said, said
    gate.write_text("open")
    assert first.wait(timeout=120) == 0, (tmp_path / "log1").read_text()
    assert second.wait(timeout=120) == 0, (tmp_path / "log2").read_text()
    a = json.loads((tmp_path / "log1.out").read_text())
    b = json.loads((tmp_path / "log2.out").read_text())
    assert (a["reused"], b["reused"]) == (False, True)
    assert a["fingerprint"] == b["fingerprint"] and b["num_records"] == 36
    names = sorted(c[0] for c in calls(calls_file))
    assert names == [f"in-{i:03d}.txt" for i in range(6)]  # every input computed exactly once
    assert len(records(str(out))) == 36


# The pipeline starts a process of its own (as a pool or a tool it shells out to would), then
# fails: snap kills the failed run's workers, and must end that process with them.
SPAWNS = """
import subprocess, sys

def preprocess(i, *, pids):
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE,
    )
    child.stdout.readline()  # it runs
    with open(pids, "a") as f:
        f.write(f"{child.pid}\\n")
    if i == 1:
        raise ValueError("bad input")
    child.wait()  # a task that never ends on its own: the failed run must stop it
    yield {"i": i}
"""


def test_processes_the_pipeline_started_end_with_a_failed_run(tmp_path: Path) -> None:
    """They were orphaned, alive and holding the caller's stderr: a script run with its
    output captured waited on them after snap had exited."""
    (tmp_path / "spawns.py").write_text(SPAWNS)
    pids = tmp_path / "pids"
    with pytest.raises(snap.PipelineError, match="bad input"):
        snap.create(f"{tmp_path / 'spawns.py'}:preprocess", tmp_path / "s", inputs=[0, 1],
                    params={"pids": str(pids)}, workers=2, inputs_per_task=1)  # fmt: skip
    started = [int(p) for p in pids.read_text().split()]
    try:
        assert started, "the pipeline started no process"
        wait_for(lambda: not any(pid_alive(p) for p in started), "the pipeline's processes")
    finally:
        for pid in filter(pid_alive, started):
            os.kill(pid, signal.SIGKILL)


CHATTY = """
import os, time

def items():
    return [0, 1]

def preprocess(i):
    # both workers in a task at once (each leaves a file, then waits for the other's)
    os.close(os.open(os.path.join(os.environ["MEET"], str(os.getpid())), os.O_CREAT, 0o644))
    deadline = time.monotonic() + 30
    while len(os.listdir(os.environ["MEET"])) < 2 and time.monotonic() < deadline:
        pass
    for j in range(3000):
        print("record", i, "line", j, "of", 3000)
    yield {"v": i}
"""


@pytest.mark.parametrize("unbuffered", [True, False])
def test_two_workers_print_whole_lines(tmp_path: Path, unbuffered: bool) -> None:
    """What two worker processes print at the same moment reaches the command's stderr a line
    at a time. Under PYTHONUNBUFFERED=1 a print of several values was several writes, and the
    workers' lines came out spliced ("recordrecord 4 ... 5")."""
    (tmp_path / "chatty.py").write_text(CHATTY)
    (tmp_path / "meet").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["MEET"] = str(tmp_path / "meet")
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "chatty.py:preprocess", "s",
         "--inputs-from", "chatty.py:items", "--inputs-per-task", "1", "--workers", "2",
         "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["num_records"] == 2
    assert len(os.listdir(tmp_path / "meet")) == 2  # the two tasks did run at once
    printed = [line for line in proc.stderr.splitlines() if "record" in line or "line" in line]
    expected = {f"record {i} line {j} of 3000" for i in (0, 1) for j in range(3000)}
    assert sorted(printed) == sorted(expected)
