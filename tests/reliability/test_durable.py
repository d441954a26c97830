"""A local version is on disk before its manifest names it (:mod:`snapshot_cli.durable`): every
new shard synced, then the directories, the manifest after; a sync the disk fails commits
nothing. What is synced is seen through ``os.fsync`` (each call passed on to the kernel)."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import fsspec
import pytest

import snapshot_cli as snap

PIPELINE = """
import numpy as np
import snapshot_cli as snap

def preprocess(i):
    yield snap.Batch(x=np.full((300, 16), i, np.float32), label=np.arange(300) + 300 * i)
"""


@pytest.fixture
def pipeline(write_pipeline: Any, tmp_path: Path) -> str:
    """In a file of its own. The tests patch ``os.fsync``, which snap's code reaches; in this
    checkout (an editable install) snap's modules count as the pipeline's own, so a patch
    whose closure changes between two creates would change the pipeline's fingerprint: the
    tests patch around the creates they observe, with closures that do not change. For the
    same reason, one create runs here first: snap's modules that a create imports on first
    use (the commit's, the durability's) would otherwise join the own modules between a
    test's first create and its second in a fresh pytest worker ("different pipeline
    code", seen with pytest-xdist)."""
    spec = str(write_pipeline(PIPELINE))
    snap.create(spec, str(tmp_path / "warm"), inputs=[0], workers=0, progress=False)
    return spec


class Synced(list[tuple[str, bool]]):
    fail: dict[str, Any]


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Synced:
    """(path synced, whether ``synced.fail["root"]``'s manifest.json existed then), in order;
    ``synced.fail["path"]`` makes that path's sync fail with ``synced.fail["errno"]`` (EIO if
    not given), as a disk that failed a write after close reports it."""
    calls = Synced()
    real = os.fsync
    calls.fail = fail = {}

    def fsync(fd: int) -> None:
        path = os.path.realpath(f"/proc/self/fd/{fd}")
        root = fail.get("root") or ""
        calls.append((path, bool(root) and os.path.exists(os.path.join(root, "manifest.json"))))
        if path == fail.get("path"):
            raise OSError(fail.get("errno", errno.EIO), os.strerror(fail.get("errno", errno.EIO)))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_every_new_shard_and_directory_is_synced_before_the_manifest(
    tmp_path: Path, synced: Synced, pipeline: str
) -> None:
    out = str(tmp_path / "s")
    synced.fail["root"] = out
    snap.create(pipeline, out, inputs=[0, 1, 2, 3], workers=0, inputs_per_task=1)
    s = snap.open(out)
    shards = {os.path.realpath(os.path.join(out, e.path)) for e in s.shards}
    assert len(shards) == 4
    before = {path for path, committed in synced if not committed}
    assert shards <= before
    assert os.path.realpath(os.path.join(out, "shards")) in before
    # the first manifest's own bytes too, before it is linked into place (and its name after)
    assert any(
        os.path.dirname(p) == os.path.realpath(out) and os.path.basename(p).startswith(".manifest")
        for p in before
    )
    after = [path for path, committed in synced if committed]
    assert os.path.realpath(out) in after  # the manifest's name
    assert os.path.realpath(os.path.join(out, "_versions")) in after


def test_a_new_version_syncs_its_new_shards_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline: str
) -> None:
    out = str(tmp_path / "s")
    snap.create(pipeline, out, inputs=[0, 1, 2, 3], workers=0, inputs_per_task=1)
    first = {os.path.realpath(os.path.join(out, e.path)) for e in snap.open(out).shards}
    real, seen = os.fsync, []

    def fsync(fd: int) -> None:
        seen.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    snap.create(pipeline, out, inputs=[0, 1, 2, 3, 4], workers=0, inputs_per_task=1)
    new = {os.path.realpath(os.path.join(out, e.path)) for e in snap.open(out).shards} - first
    assert len(new) == 1
    assert {p for p in seen if p.endswith(".arrow")} == new


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EDQUOT])
def test_a_shard_the_disk_failed_to_write_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, pipeline: str
) -> None:
    out = str(tmp_path / "s")
    snap.create(pipeline, out, inputs=[0, 1], workers=0, inputs_per_task=1)
    first = {os.path.realpath(os.path.join(out, e.path)) for e in snap.open(out).shards}
    real = os.fsync

    def failing(fd: int) -> None:  # the new version's shard: written, then lost by the disk
        path = os.path.realpath(f"/proc/self/fd/{fd}")
        if path.endswith(".arrow") and path not in first:
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(snap.StorageError) as caught:
        snap.create(pipeline, out, inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    message = str(caught.value)
    assert ".arrow" in message and os.strerror(code) in message, message
    assert snap.open(out).version == 1  # nothing committed: still the first version
    assert snap.open(out).num_records == 600


def test_a_directory_that_cannot_be_synced_is_left_as_it_is(
    tmp_path: Path, synced: Synced, pipeline: str
) -> None:
    out = str(tmp_path / "s")
    synced.fail.update(path=os.path.realpath(out), errno=errno.EINVAL)
    os.makedirs(out)
    info = snap.create(pipeline, out, inputs=[0], workers=0)
    assert info.num_records == 300 and snap.open(out).num_records == 300
    assert os.path.realpath(out) in {p for p, _ in synced}


def test_each_shard_starts_on_its_way_to_disk_when_its_writer_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline: str
) -> None:
    """So that the commit's sync finds little left to write (``sync_file_range``)."""
    from snapshot_cli import durable

    started: list[str] = []
    real = durable.start_writeback

    def start(fs: Any, path: str) -> None:
        started.append(os.path.realpath(path))
        real(fs, path)

    monkeypatch.setattr(durable, "start_writeback", start)
    out = str(tmp_path / "s")
    snap.create(pipeline, out, inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    shards = [os.path.realpath(os.path.join(out, e.path)) for e in snap.open(out).shards]
    assert sorted(started) == sorted(shards)
    assert durable._sync_file_range() is not None  # Linux's call was found (CI is Linux)
    real(fsspec.filesystem("file"), str(tmp_path / "missing"))  # advice: it never raises


def test_a_directory_sync_failing_after_the_commit_is_a_warning(
    tmp_path: Path, synced: Synced, pipeline: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The manifest is in place by then (readers see the snapshot): the create succeeds and
    says the commit may not survive a power loss."""
    out = str(tmp_path / "s")
    os.makedirs(out)
    synced.fail.update(path=os.path.realpath(out), errno=errno.EIO)
    info = snap.create(pipeline, out, inputs=[0], workers=0)
    assert info.num_records == 300 and snap.open(out).num_records == 300
    assert "may not survive a power loss" in caplog.text and out in caplog.text


class _Said(logging.Handler):
    """snap's log lines, and an event set when the sync's line comes."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.said = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if "to disk before the commit" in record.getMessage():
            self.said.set()


@pytest.mark.parametrize("slow", [False, True])
def test_a_sync_that_takes_long_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: bool
) -> None:
    """The commit waited silently for what was left to write: a create faster than its disk
    showed "tasks N/N" and then nothing. A sync still going after SAY_AFTER_S says how much
    it waits for; one that ends sooner says nothing."""
    from snapshot_cli import durable

    paths = []
    for name, size in [("a", 10), ("b", 3 << 20), ("c", 20)]:
        (tmp_path / name).write_bytes(b"x" * size)
        paths.append(str(tmp_path / name))
    said = _Said()
    logger = logging.getLogger("snapshot_cli")
    level = logger.level
    logger.setLevel(logging.INFO)  # (setLevel: isEnabledFor's cache is cleared)
    logger.addHandler(said)
    real = os.fsync
    waited: list[bool] = []

    def fsync(fd: int) -> None:
        if slow and os.path.realpath(f"/proc/self/fd/{fd}") == paths[1]:
            waited.append(said.said.wait(60))  # held until the line is said (or given up)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(durable, "SAY_AFTER_S", 0.05 if slow else 60.0)
    try:
        durable.sync(fsspec.filesystem("file"), paths)
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)
    lines = [line for line in said.lines if "to disk before the commit" in line]
    if slow:
        assert waited == [True]
        assert lines == ["writing the last 1 file (3.0 MiB) to disk before the commit"]
    else:
        assert lines == []
