"""Faults are answers: a full disk and a read-only filesystem, on a real small tmpfs, in the
main process (``--workers 0``) and in workers. One line naming the path and the cause, exit
1, no traceback, no temporary file left, nothing committed; once the fault is gone the same
command resumes to the records an uninterrupted run writes.

Mounting needs root (as CI and the development machines here run); elsewhere these tests
are skipped with that reason, visibly (``-ra``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import REPO

PIPE = """
import numpy as np
def preprocess(i):
    yield {"x": np.random.default_rng(i).integers(0, 255, 300_000, dtype=np.uint8), "i": i}
def items():
    return list(range(8))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: too small for the 2.4 MB snapshot below."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def remount(disk: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(disk)], check=True)


def create(
    tmp_path: Path, out: Path, workers: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pipe.py").write_text(PIPE)
    spec = str(tmp_path / "pipe.py")
    return subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", f"{spec}:preprocess", str(out),
         "--inputs-from", f"{spec}:items", "--workers", workers, "--compression", "none",
         "--inputs-per-task", "1", "--json", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def records(path: Path) -> list[int]:
    return sorted(int(i) for b in snap.open(str(path)).loader(4) for i in b["i"])


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_full_disk_then_room_again(disk: Path, tmp_path: Path, workers: str) -> None:
    out = disk / "snap"
    full = create(tmp_path, out, workers)
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    error = [line for line in full.stderr.splitlines() if line.startswith("snap: error:")]
    assert len(error) == 1 and "No space left on device (ENOSPC)" in error[0], full.stderr
    assert str(disk) in error[0] and "run the same command again" in error[0]
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]

    remount(disk, "size=64m")
    again = create(tmp_path, out, workers)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["num_records"] == 8
    assert records(out) == list(range(8))


def test_a_read_only_snapshot(disk: Path, tmp_path: Path) -> None:
    remount(disk, "size=64m")
    out = disk / "snap"
    assert create(tmp_path, out, "0").returncode == 0
    remount(disk, "ro")
    for args in (["--overwrite"], []):
        res = create(tmp_path, out, "2", *args)
        if not args:  # up to date: nothing to write, so nothing fails
            assert res.returncode == 0 and json.loads(res.stdout)["reused"], res.stderr
            continue
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert "Read-only file system (EROFS)" in res.stderr, res.stderr
    gc = subprocess.run([sys.executable, "-m", "snapshot_cli", "gc", str(out)], cwd=REPO,
                        capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert gc.returncode == 1 and "Traceback" not in gc.stderr, gc.stderr
    assert "snap gc cannot remove anything" in gc.stderr and "read-only" in gc.stderr
    assert "OUTPUT" not in gc.stderr, gc.stderr  # a writer's advice: gc has no OUTPUT
    assert records(out) == list(range(8))  # still readable, unchanged


def test_gc_on_a_full_disk_says_how_to_make_room(disk: Path, tmp_path: Path) -> None:
    """gc, what a user runs to clear a dead create's files, writes its lease first: on a full
    disk it said the writer's "free space ... it resumes". Now it says what to free."""
    out = disk / "snap"
    assert create(tmp_path, out, "0").returncode == 1  # (ENOSPC: a run and shards left)
    with open(disk / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:  # (what room is left: none)
            f.write(b"\0" * 4096)
    before = sorted(p for p in out.rglob("*") if p.is_file())

    def gc(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "snapshot_cli", "gc", str(out), *args]
        return subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )

    full = gc()
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    assert f"snap gc cannot take the writer lease of {out}" in full.stderr, full.stderr
    assert "the disk is full (ENOSPC)" in full.stderr and "it resumes" not in full.stderr
    assert sorted(p for p in out.rglob("*") if p.is_file()) == before
    listed = gc("--dry-run", "--json")  # (writes nothing: works on a full disk)
    assert listed.returncode == 0, listed.stderr
    shards = [g["path"] for g in json.loads(listed.stdout)["would_remove"] if g["kind"] == "shard"]
    assert shards, listed.stdout
    (out / shards[0]).unlink()  # (as the error says: a shard gc --dry-run lists)
    done = gc("--json")
    assert done.returncode == 0, done.stderr
    assert {g["path"] for g in json.loads(done.stdout)["removed"]} >= set(shards[1:])
    assert not list(out.glob("shards/*"))
