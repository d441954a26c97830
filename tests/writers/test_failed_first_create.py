"""A create that fails before its run begins (an input this user may not read, found as the
inputs are read after the lease is taken) leaves no OUTPUT it made: it left a directory with
``_runs/lease-00000000.json`` only, which inspect called an unfinished snapshot with no run
state, and gc said "nothing to remove" of (adding a lease of its own). gc removes such a
``_runs/`` of leases only. As a user who is not root (:mod:`tests.unprivileged`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.writers import create as create_mod
from snapshot_cli.writers import gc as gc_mod
from snapshot_cli.writers import guards
from tests.unprivileged import User, unprivileged

PIPELINE = "def f(path):\n    return [{'n': len(open(path, 'rb').read())}]\n"


def create(user: User, output: Path, inputs: Path) -> subprocess.CompletedProcess[str]:
    return user.run(["-m", "snapshot_cli", "create", f"{user.home}/pipe.py:f", str(output),
                     "--input", f"{inputs}/*.bin", "--workers", "0", "--quiet"])  # fmt: skip


def inputs(user: User, n: int) -> Path:
    """The user's pipeline and ``n`` input files of its own (``raw/0.bin``, ...)."""
    (user.home / "pipe.py").write_text(PIPELINE)
    raw = user.home / "raw"
    raw.mkdir()
    for i in range(n):
        (raw / f"{i}.bin").write_bytes(b"x" * i)
    user.own(raw)
    user.own(user.home / "pipe.py")
    return raw


def test_a_failed_first_create_leaves_nothing() -> None:
    with unprivileged() as user:
        raw = inputs(user, 6)
        user.chmod(raw / "3.bin", "000")

        new = user.home / "new"
        done = create(user, new, raw)
        assert done.returncode == 1 and f"{raw}/3.bin" in done.stderr, done.stderr
        assert "Permission denied" in done.stderr
        assert not new.exists()

        made = user.home / "made"  # an OUTPUT the user made, empty: it stays, empty
        made.mkdir()
        user.own(made)
        assert create(user, made, raw).returncode == 1
        assert list(made.iterdir()) == []

        user.chmod(raw / "3.bin", "644")  # a snapshot made, then grown from an unreadable one
        assert create(user, made, raw).returncode == 0
        (raw / "6.bin").write_bytes(b"y")
        user.own(raw / "6.bin")
        user.chmod(raw / "6.bin", "000")
        assert create(user, made, raw).returncode == 1
        assert (made / "_runs").is_dir() and (made / "manifest.json").is_file()  # (kept)


def lease_only(root: Path, **holder: object) -> None:
    (root / "_runs").mkdir(parents=True)
    lease = {"host": "elsewhere", "pid": 1, "id": "x", "ttl": 60.0, "heartbeat": 1.0,
             "run": None, "released": True, **holder}  # fmt: skip
    (root / "_runs" / "lease-00000000.json").write_text(json.dumps(lease))


def test_gc_removes_a_runs_directory_of_leases_only(tmp_path: Path) -> None:
    """What a failed first create left before it removed its own."""
    lease_only(tmp_path / "s")
    listed = gc_mod.gc(str(tmp_path / "s"), dry_run=True)
    assert [(g.path, g.kind) for g in listed.garbage] == [("_runs", "run")]
    assert (tmp_path / "s" / "_runs" / "lease-00000000.json").exists()
    removed = gc_mod.gc(str(tmp_path / "s"))
    assert [g.path for g in removed.garbage] == ["_runs"]
    assert list((tmp_path / "s").iterdir()) == []


def test_gc_keeps_leases_beside_anything_else(tmp_path: Path) -> None:
    lease_only(tmp_path / "s")
    (tmp_path / "s" / "_runs" / "0a1b2c3d4e").mkdir()  # a run (empty: dead, its state goes)
    (tmp_path / "s" / "notes.txt").write_text("mine")
    report = gc_mod.gc(str(tmp_path / "s"))
    assert "_runs" not in [g.path for g in report.garbage]
    assert sorted(p.name for p in (tmp_path / "s" / "_runs").iterdir()) == ["lease-00000001.json"]
    lease_only(tmp_path / "t", released=False, heartbeat=9e9, ttl=1e9)  # a live writer's
    assert gc_mod.gc(str(tmp_path / "t")).garbage == []
    assert (tmp_path / "t" / "_runs" / "lease-00000000.json").exists()


def test_gc_keeps_leases_a_writer_never_released(tmp_path: Path) -> None:
    """A lease that is dead by its heartbeat but not released: its writer may be paused, not
    gone. Removed, the next create would take its epoch again (and could resume a run that
    writer then starts under the same shard names): gc leaves its own, released, after it."""
    lease_only(tmp_path / "s", released=False)  # (heartbeat 1970: dead by the clock)
    assert gc_mod.gc(str(tmp_path / "s")).garbage == []
    assert sorted(p.name for p in (tmp_path / "s" / "_runs").iterdir()) == ["lease-00000001.json"]


def test_a_failed_create_that_took_a_lease_over_keeps_the_epochs() -> None:
    """A create that took over a writer's lease (dead by its heartbeat, maybe only paused)
    and failed before its run keeps its own lease, so the next create takes a newer epoch
    than the paused writer's: the whole flow, as a user who is not root. (The race that
    removed every lease, a stale look at OUTPUT, is the test after this one.)"""
    with unprivileged() as user:
        raw = inputs(user, 3)
        out = user.home / "taken"
        lease_only(out, released=False, run="0a1b2c3d4e", ttl=3.0)  # (elsewhere, silent)
        (out / "_runs" / "0a1b2c3d4e").mkdir()
        user.own(out)
        user.chmod(raw / "1.bin", "000")
        done = create(user, out, raw)
        assert done.returncode == 1 and f"{raw}/1.bin" in done.stderr, done.stderr
        left = sorted(p.name for p in (out / "_runs").iterdir())
        assert left == ["0a1b2c3d4e", "lease-00000001.json"], left  # (the next takes 2)


def test_a_stale_look_at_output_removes_no_lease_it_took_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race itself: OUTPUT missing when the create looked (another create made it a
    moment later, took the first lease and paused), the lease taken over, a failure before
    the run (an input it may not read, injected): no lease may go, whatever the look said."""
    out = tmp_path / "s"
    lease_only(out, released=False, run="0a1b2c3d4e", ttl=3.0)  # (elsewhere, silent)
    (out / "_runs" / "0a1b2c3d4e").mkdir()
    monkeypatch.setattr(guards, "output_missing", lambda fs, root: True)  # (as it looked)

    def unreadable(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "in.bin"))

    monkeypatch.setattr(create_mod.runs_mod, "start_or_resume", unreadable)
    with pytest.raises(snap.SnapError, match="in.bin"):
        snap.create(lambda i: [{"i": i}], str(out), inputs=[1, 2], workers=0, progress=False)
    left = sorted(p.name for p in (out / "_runs").iterdir())
    assert left == ["0a1b2c3d4e", "lease-00000001.json"], left  # (the next create takes 2)
