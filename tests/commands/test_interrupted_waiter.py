"""A create waiting for another writer's lease says "(Ctrl-C to give up)"; given up, it said
"interrupted; run the same command again to resume" of a run it never started (a
concurrency probe). It now says where it was, and that nothing was written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def held_elsewhere(root: Path) -> dict[str, object]:
    """A live writer on another host: its heartbeat fresh, for an hour."""
    lease = {"host": "elsewhere", "pid": 4242, "id": "x", "ttl": 3600.0,
             "heartbeat": time.time(), "run": "0123456789", "released": False}  # fmt: skip
    (root / "_runs").mkdir(parents=True)
    (root / "_runs" / "lease-00000000.json").write_text(json.dumps(lease))
    return lease


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_create_given_up_while_it_waits_for_the_lease_says_nothing_was_written(
    tmp_path: Path, signum: int
) -> None:
    lease = held_elsewhere(tmp_path / "out")
    (tmp_path / "pipe.py").write_text("def f(i):\n    yield {'i': i}\n")
    (tmp_path / "items.py").write_text("def items():\n    return [1, 2]\n")
    args = [sys.executable, "-m", "snapshot_cli", "create", "pipe.py:f", "out",
            "--inputs-from", "items.py:items", "--workers", "0"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while "waiting for the writer lease" not in (line := proc.stderr.readline()):
        assert line, "the create ended without waiting for the lease"
    assert "held by elsewhere:4242 (run 0123456789, heartbeat " in line, line
    proc.send_signal(signum)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 128 + signum, err
    said = (
        "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    )
    assert err.splitlines()[-1] == (
        f"snap: {said} while waiting for the writer lease; nothing was written"
    ), err
    assert "resume" not in err and "Traceback" not in err, err
    runs = tmp_path / "out" / "_runs"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["_runs"]
    assert [p.name for p in runs.iterdir()] == ["lease-00000000.json"]
    assert json.loads((runs / "lease-00000000.json").read_text()) == lease  # (the holder's)
