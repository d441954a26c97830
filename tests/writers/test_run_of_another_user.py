"""A team's snapshot in a group-writable setgid directory, grown by its users in turn: a run
another user left behind (killed while growing it under umask 022, its run directory
``drwxr-sr-x``) is refused before anything is computed, naming the directory, its owner and
the chmod that lets the group resume it; gc names the whole path and the owner. Real users
(``useradd``), each create a process of its own user."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshot_cli.writers.lease import PID_NAMESPACE
from tests.infra.users import ROOT_ONLY, Users

pytestmark = [ROOT_ONLY, pytest.mark.slow]

# Each call leaves a file named after its input and its user; input DIE_AT kills the process
# (SIGKILL, as a job's time limit would), after the tasks before it were recorded.
PIPELINE = """
import os, signal

def f(i):
    if i == int(os.environ.get("DIE_AT", "-1")):
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(os.environ["CALLS"], f"{i}-{os.getuid()}"), "w").close()
    return [{"x": i}]

def items():
    return list(range(int(os.environ["N"])))
"""


@pytest.fixture
def team(request: pytest.FixtureRequest) -> Iterator[tuple[Users, Path]]:
    """The users ana and ben, and their team's directory (``chmod 2775``, the group's)."""
    with Users(["ana", "ben"]) as users:
        work = users.dir / "team"
        work.mkdir()
        shutil.chown(work, "root", users.group)
        work.chmod(0o2775)
        (work / "prep.py").write_text(PIPELINE)
        (users.dir / "calls").mkdir(mode=0o1777)
        (users.dir / "calls").chmod(0o1777)
        yield users, work


def create(
    users: Users, who: str, work: Path, n: int, umask: int, die_at: int = -1
) -> subprocess.CompletedProcess[str]:
    env = {"N": str(n), "DIE_AT": str(die_at), "CALLS": str(users.dir / "calls")}
    return users.run(who, ["-m", "snapshot_cli", "create", "prep.py:f", "snap", "--inputs-from",
                           "prep:items", "--inputs-per-task", "1", "--workers", "0", "--quiet"],
                     umask=umask, cwd=work, env=env)  # fmt: skip


def calls(users: Users, who: str) -> list[int]:
    """The inputs ``who`` computed (and forgets them)."""
    uid, done = str(users.run(who, ["-c", "import os; print(os.getuid())"]).stdout.strip()), []
    for path in (users.dir / "calls").iterdir():
        i, by = path.name.split("-")
        if by == uid:
            done.append(int(i))
            path.unlink()
    return sorted(done)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [s for s in done.stderr.splitlines() if s.startswith("snap: error: ")]
    return line


def test_a_run_another_user_left_is_refused_before_any_work(
    team: tuple[Users, Path],
) -> None:
    """ana's create resumed ben's run, computed every task, then failed to record each
    ("permission denied while writing .../tasks/00027.json: check that you may write there,
    or choose another OUTPUT"); her gc named a bare "00011.json" and "its owner"."""
    users, work = team
    ana, ben, snap = users.user("ana"), users.user("ben"), work / "snap"
    assert create(users, "ana", work, 4, 0o002).returncode == 0
    assert calls(users, "ana") == [0, 1, 2, 3]
    killed = create(users, "ben", work, 12, 0o022, die_at=8)
    assert killed.returncode == -9, killed.stderr
    assert calls(users, "ben") == [4, 5, 6, 7]
    (run,) = [p.name for p in (snap / "_runs").iterdir() if p.is_dir()]
    run_dir = snap / "_runs" / run
    assert (run_dir.stat().st_mode & 0o7777, run_dir.owner()) == (0o2755, ben)

    line = error_line(create(users, "ana", work, 12, 0o002))
    assert calls(users, "ana") == []  # refused before computing anything
    assert line == (
        f"snap: error: cannot resume the unfinished run {run} of {snap} (4 of its tasks done): "
        f"this user ({ana}) may not write {run_dir} ({ben}'s, mode drwxr-sr-x): run the same "
        f"command as {ben}, or ask {ben} to let the group write it (chmod -R g+rwX {run_dir}); "
        f"or have {ben} remove that run (snap gc {snap}), which starts it over"
    )

    line = error_line(users.run("ana", ["-m", "snapshot_cli", "gc", str(snap)]))
    assert line.startswith(
        f"snap: error: snap gc cannot remove anything from {snap}: this user may not write "
        f"there (Permission denied: {run_dir}"  # (a file in it; Python 3.13's rmtree: it)
    )
    assert (
        f"this user ({ana}) may not write {run_dir} ({ben}'s, mode drwxr-sr-x): run snap gc as "
        f"{ben}, or ask {ben} to let the group write it (chmod -R g+rwX {run_dir})"
    ) in line
    assert "its owner" not in line

    # ben does as it says: then ana's create resumes his run, computing only what is missing
    ben_chmod(users, "g+w", run_dir)
    resumed = create(users, "ana", work, 12, 0o002)
    assert resumed.returncode == 0, resumed.stderr
    assert calls(users, "ana") == [8, 9, 10, 11]
    inspected = users.run("ben", ["-m", "snapshot_cli", "inspect", str(snap), "--json"])
    assert json.loads(inspected.stdout)["num_records"] == 12


def test_a_snapshot_another_user_made_is_refused_before_any_work(
    team: tuple[Users, Path],
) -> None:
    """ben made the snapshot under umask 022 (its directories drwxr-sr-x): ana's grow was
    told to "check that you may write there, or choose another OUTPUT" (the lease), and with
    ``_runs/`` the group's, computed its new tasks, then failed writing their shards. Then
    the lease's error named ``_runs/`` alone, and after ben's chmod of it the next try was
    refused at the snapshot's directory: the first error names the whole snapshot."""
    users, work = team
    ana, ben, snap = users.user("ana"), users.user("ben"), work / "snap"
    assert create(users, "ben", work, 4, 0o022).returncode == 0
    line = error_line(create(users, "ana", work, 6, 0o002))
    assert calls(users, "ana") == []  # refused before computing anything
    assert line == (
        f"snap: error: cannot add to {snap}: this user ({ana}) may not write {snap} ({ben}'s, "
        f"mode drwxr-sr-x): run the same command as {ben}, or ask {ben} to let the group write "
        f"it (chmod -R g+rwX {snap})"
    )
    assert not list((snap / "_runs").glob("lease-*1.json"))  # (no lease taken)

    ben_chmod(users, "g+w", snap / "_runs")  # the run state the group's, the rest ben's alone
    assert error_line(create(users, "ana", work, 6, 0o002)) == line
    assert calls(users, "ana") == []

    ben_chmod(users, "g+w", snap)
    grown = create(users, "ana", work, 6, 0o002)
    assert grown.returncode == 0, grown.stderr
    assert calls(users, "ana") == [4, 5]


def ben_chmod(users: Users, mode: str, path: Path) -> None:
    """``chmod -R`` as ben (ana's own files in it, her lease's, stay as they are)."""
    done = users.run("ben", ["-c", f"import subprocess; subprocess.run(['chmod', '-R', "
                                   f"{mode!r}, {str(path)!r}])"])  # fmt: skip
    assert done.returncode == 0 and path.stat().st_mode & 0o020, done.stderr


def test_a_live_writer_of_another_user_is_not_waited_for(team: tuple[Users, Path]) -> None:
    """ana's create of ben's snapshot (umask 022) while ben's create held its lease waited
    out ben's whole run, then failed on the permissions of ``_runs/``: it is refused at
    once. (ben's live writer: the lease of a live process, not the parent of ana's, its
    heartbeat now; one that stops beating is taken over after its ttl, here 6 s.)"""
    users, work = team
    ana, ben, snap = users.user("ana"), users.user("ben"), work / "snap"
    assert create(users, "ben", work, 4, 0o022).returncode == 0
    lease = snap / "_runs" / "lease-00000001.json"
    writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)  # fmt: skip
    holder = {"host": socket.gethostname(), "pid": writer.pid, "pidns": PID_NAMESPACE,
              "id": "bens", "ttl": 6, "heartbeat": time.time(), "run": None}  # fmt: skip
    lease.write_text(json.dumps(holder))
    shutil.chown(lease, ben)
    try:
        line = error_line(create(users, "ana", work, 6, 0o002))
    finally:
        writer.communicate(b"")  # (it ends)
    assert line.startswith(f"snap: error: cannot add to {snap}: this user ({ana}) may not ")
    assert f"(chmod -R g+rwX {snap})" in line
    assert calls(users, "ana") == []
    assert json.loads(lease.read_text()) == holder  # (ben's lease, not taken over)
