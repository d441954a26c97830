"""A writer that loses its lease while alive (paused longer than the ttl: a stopped job, a
suspended VM, an NFS stall) stops, and nothing it writes afterwards reaches the snapshot
the taker committed: the taker's shards have names of their own (``layout.shard_path``).
Before, the paused writer went on rewriting the resumed run's shards in place: 158-173 of
200 committed shards damaged. And who is alive is judged right where a pid or a clock would
mislead: a zombie holder, a holder in another PID namespace with the same host name, a
holder whose clock is behind (alive) or ahead (dead)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.writers import lease

from ..conftest import wait_for

PIPE = """
    import time
    import numpy as np

    def preprocess(path):
        time.sleep(0.1)
        i = int(open(path).read())
        rng = np.random.default_rng()  # not deterministic: a rewritten shard differs
        for j in range(5):
            yield {"id": i * 100 + j, "x": rng.random(256).astype(np.float32)}
"""

WRITER = """
    import sys
    import snapshot_cli as snap
    snap.create(sys.argv[1], sys.argv[2], inputs=sys.argv[3], workers=1, inputs_per_task=1,
                lease_ttl=3)
"""

INPUTS = 40


def test_a_paused_writer_taken_over_cannot_damage_what_the_taker_committed(
    tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(textwrap.dedent(PIPE))
    (tmp_path / "in").mkdir()
    for i in range(INPUTS):
        (tmp_path / "in" / f"{i:03d}.txt").write_text(str(i))
    out, writer = tmp_path / "out", tmp_path / "writer.py"
    writer.write_text(textwrap.dedent(WRITER))
    args = [sys.executable, str(writer), spec, str(out), str(tmp_path / "in" / "*.txt")]
    with open(tmp_path / "a.log", "w") as log:
        a = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for(lambda: len(list(out.glob("_runs/*/tasks/*.json"))) >= 5, "writer A's tasks")
        os.killpg(a.pid, signal.SIGSTOP)  # A and its worker, paused mid-run
        b = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert b.returncode == 0, b.stderr
        committed = snap.open(str(out))
        before = {e.path: e.crc32c for e in committed.shards}
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    assert a.wait(timeout=120) != 0
    said = (tmp_path / "a.log").read_text()
    assert "lost the lease" in said, said
    # every shard the taker committed is as it committed it, and reads back whole
    check = subprocess.run([sys.executable, "-m", "snapshot_cli", "verify", str(out)],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    s = snap.open(str(out))
    assert {e.path: e.crc32c for e in s.shards} == before
    ids = np.concatenate([b["id"] for b in s.loader(64, shuffle=False)])
    assert sorted(ids.tolist()) == [i * 100 + j for i in range(INPUTS) for j in range(5)]


def write_lease(root: Path, holder: dict[str, object], epoch: int = 0) -> None:
    (root / "_runs").mkdir(parents=True, exist_ok=True)
    (root / "_runs" / f"lease-{epoch:08d}.json").write_text(json.dumps(holder))


def holder(**fields: object) -> dict[str, object]:
    base = {"host": "another-host", "pid": 123, "id": "the-holder", "ttl": 1.5,
            "heartbeat": time.time(), "run": None}  # fmt: skip
    return {**base, **fields}


def test_a_zombie_holder_is_taken_over_at_once(tmp_path: Path) -> None:
    """A script that killed its ``snap create`` and never waited for it leaves a zombie,
    which ``kill(pid, 0)`` still finds: it made the next writer wait out the ttl."""
    code = (
        "import os, sys; from snapshot_cli import storage; from snapshot_cli.writers import "
        "lease; fs, root = storage.resolve(sys.argv[1]); lease.try_acquire(fs, root, ttl=600); "
        "os._exit(0)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    try:

        def zombie() -> bool:
            stat = Path(f"/proc/{child.pid}/stat").read_bytes()
            return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"

        wait_for(zombie, "the holder to exit unreaped")
        assert (tmp_path / "_runs" / "lease-00000000.json").exists()
        fs, root = storage.resolve(str(tmp_path))
        got = lease.try_acquire(fs, root)
        assert isinstance(got, lease.Lease), got
        got.release()
    finally:
        child.wait()


def test_a_holder_in_another_pid_namespace_is_not_this_process(tmp_path: Path) -> None:
    """Containers with host networking share a host name, and each numbers its processes
    from 1: a live holder with this process's pid there is not this process's own abandoned
    lease (it was taken over at once, two writers then wrote together)."""
    other = holder(host=socket.gethostname(), pid=os.getpid(), pidns="pid:[1]", ttl=600)
    write_lease(tmp_path, other)
    fs, root = storage.resolve(str(tmp_path))
    got = lease.try_acquire(fs, root, watch=True)
    assert isinstance(got, lease.LeaseInfo), "a live holder elsewhere was taken over"


def taken_over(fs: Any, root: str) -> bool:
    """Whether a look takes the lease over (released at once: a lease left held beats for
    good in this test process, and a later test waiting for snap's heartbeats to stop
    waited for it)."""
    got = lease.try_acquire(fs, root, watch=True)
    if isinstance(got, lease.Lease):
        got.release()
        return True
    return False


def test_a_holder_whose_clock_is_behind_keeps_its_lease_while_it_beats(tmp_path: Path) -> None:
    fs, root = storage.resolve(str(tmp_path))
    behind = time.time() - 1000  # its clock: 1,000 s behind this one
    start = time.monotonic()
    while time.monotonic() - start < 2 * 1.5:  # two ttl, beating every 0.1 s
        write_lease(tmp_path, holder(heartbeat=behind + time.monotonic() - start))
        got = lease.try_acquire(fs, root, watch=True)
        seen = time.monotonic()  # (the last beat seen)
        assert isinstance(got, lease.LeaseInfo), "a beating holder was taken over"
        time.sleep(0.1)  # (the holder's beat, not a wait for anything)
    # it stops beating: taken over once seen silent long enough
    wait_for(lambda: taken_over(fs, root), "the silent holder to be taken over", timeout=30)
    assert time.monotonic() - seen >= 1.5 / 3


def test_a_dead_holder_whose_clock_was_ahead_is_taken_over_after_the_ttl(tmp_path: Path) -> None:
    """Its heartbeat stamped 600 s ahead made every other writer wait 600 s + the ttl."""
    write_lease(tmp_path, holder(heartbeat=time.time() + 600))
    fs, root = storage.resolve(str(tmp_path))
    started = time.monotonic()
    wait_for(lambda: taken_over(fs, root), "the silent holder to be taken over", timeout=30)
    assert time.monotonic() - started >= 1.5
    said = lease.LeaseInfo(0, holder(heartbeat=time.time() + 600)).describe()
    assert "ahead of this machine's clock" in said and "-" not in said.split("heartbeat")[1]
