"""The temporary directory a SnapshotDataset counts DataLoader epochs in (``snap-epochs-*``)
is removed when the dataset is collected; a training job ended by SIGTERM (preempted,
cancelled) never runs that, and each left one in ``$TMPDIR`` for good (a concurrency
probe). The next counter made on the host removes those whose owners are gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from snapshot_cli.readers import epochs as epochs_mod

HOLDS = """
import sys
from snapshot_cli.readers.epochs import EpochCounter
counter = EpochCounter()
print(counter.dir, flush=True)
sys.stdin.read()  # (until the test closes it, or a signal ends this process)
"""


def holder(tmp: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process holding a counter, and its directory."""
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", HOLDS], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert proc.stdout is not None
    made = Path(proc.stdout.readline().strip())
    assert made.parent == tmp and made.name.startswith("snap-epochs-"), made
    return proc, made


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_counter_left_by_a_process_a_signal_ended_is_removed_by_the_next(
    tmp_path: Path, signum: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone, left = holder(tmp_path)
    alive, kept = holder(tmp_path)
    try:
        gone.send_signal(signum)
        gone.communicate(timeout=30)  # (its pipes closed too)
        assert gone.returncode == -signum and left.is_dir()  # (what was left before)
        monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
        counter = epochs_mod.EpochCounter()  # (as a new SnapshotDataset makes one)
        assert not left.exists()
        assert kept.is_dir() and Path(counter.dir).is_dir()  # (their owners run)
        assert counter.register(1, 0)[0] == 0
    finally:
        alive.communicate(input="", timeout=30)
    assert alive.returncode == 0 and not kept.exists()  # (its own, removed at its exit)


def test_only_what_an_owner_of_this_host_and_pid_namespace_made_is_swept(
    tmp_path: Path,
) -> None:
    """A pid is only this host's and this PID namespace's (containers sharing /tmp number
    their processes each on their own); a pid used again is another process; a directory
    with no owner's file (being made, or of an older snap) or an unreadable one is left."""
    here = epochs_mod._owner(os.getpid())
    dead = 2**22 + 5  # (no process has it)

    def left(name: str, owner: object) -> Path:
        path = tmp_path / f"snap-epochs-{name}"
        path.mkdir()
        if owner is not None:
            text = owner if isinstance(owner, str) else json.dumps(owner)
            (path / "owner.json").write_text(text)
        return path

    stale = left("dead", {**here, "key": f"{dead}/123"})
    reused = left("reused", {**here, "key": f"{os.getpid()}/1"})  # (this pid, not started then)
    elsewhere = left("host", {**here, "host": "other-host", "key": f"{dead}/1"})
    container = left("ns", {**here, "pidns": "pid:[1]", "key": f"{dead}/1"})
    mine = left("mine", here)
    unknown = [left("none", None), left("text", "{"), left("list", []), left("odd", {"key": 7})]
    (tmp_path / "snap-epochs-file").write_text("")  # (not a directory)
    removed = epochs_mod.sweep_stale(str(tmp_path))
    assert sorted(removed) == sorted([str(stale), str(reused)])
    assert not stale.exists() and not reused.exists()
    assert all(p.exists() for p in [elsewhere, container, mine, *unknown])
    assert (tmp_path / "snap-epochs-file").exists()
