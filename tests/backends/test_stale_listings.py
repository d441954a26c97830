"""A long-lived process (a notebook, a sweep) while other processes change a remote snapshot
or its inputs: gcsfs and s3fs keep a directory's listing until told otherwise and answered
from it (``info``, and s3fs's size for a whole-file read), so files made, changed or removed
since were missing, stale or still there. A verify called another process's new shard
missing, a re-run create missed added inputs ("up to date" with old records), took a grow's
shards for lost and computed them again, never repaired a deleted shard, and gc reported
files another gc had removed. Against the real GCS emulator and moto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers.gc import gc
from tests.backends.conftest import Backend
from tests.backends.test_lease_lost_answer import PIPELINE  # (4 records an input)
from tests.conftest import snap_subprocess


def _other_client(backend: Backend) -> fsspec.AbstractFileSystem:
    """A second client of the same store, as another process has (no shared cache)."""
    fs = backend.fs
    return type(fs)(**{**fs.storage_options, "skip_instance_cache": True})


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
@pytest.mark.parametrize("made", ["new", "rewritten"])
def test_a_file_made_after_a_listing_is_read_and_found(backend: Backend, made: str) -> None:
    fs = backend.fs
    root = backend.path(backend.url())
    path = f"{root}/_runs/state.json"
    other = _other_client(backend)
    other.pipe_file(f"{root}/_runs/other.json", b"{}")
    if made == "rewritten":
        other.pipe_file(path, b"{}")
    assert "state.json" in storage.list_names(fs, f"{root}/_runs") or made == "new"
    data = b'{"run": "' + b"x" * 100 + b'"}'  # (another size than the listed one's)
    other.pipe_file(path, data)
    assert storage.read_bytes(fs, path) == data
    assert storage.exists(fs, path) and storage.isfile(fs, path)
    assert storage.file_info(fs, path)["size"] == len(data)
    assert storage.stored_checksum(fs, path)[0] == len(data)  # (what verify --fast asks)


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_a_file_removed_after_a_listing_is_not_found(backend: Backend) -> None:
    fs = backend.fs
    root = backend.path(backend.url())
    path = f"{root}/_runs/state.json"
    other = _other_client(backend)
    other.pipe_file(path, b"{}")
    assert storage.list_names(fs, f"{root}/_runs") == ["state.json"]
    other.rm_file(path)
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(fs, path)
    assert not storage.exists(fs, path)
    with pytest.raises(FileNotFoundError):
        storage.stored_checksum(fs, path)


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_a_sweep_process_reads_what_another_process_grew_and_collects(
    backend: Backend, tmp_path: Path, write_pipeline: Any
) -> None:
    """A long-lived process (a sweep, a notebook) that verified and gc'd a snapshot, which
    lists its directories, then opens it again after `snap create` in another process grew
    it: every record of the new version, and gc and verify see the new files."""
    url = backend.url()
    pipeline = write_pipeline(PIPELINE)
    inputs = tmp_path / "inputs"
    inputs.mkdir()

    def grow(k: int) -> None:
        (inputs / f"{k}.txt").write_text(str(k * 4))
        args = [pipeline, url, "--input", f"{inputs}/*.txt", "--inputs-per-task", "1"]
        proc = snap_subprocess("create", *args, "--workers", "0")
        assert proc.returncode == 0, proc.stderr

    grow(0)
    for k in (1, 2):
        s = snap.open(url)
        assert verify(s).ok and verify(s, fast=True).ok
        assert not gc(url, dry_run=True).garbage
        with s.loader(batch_size=100, shuffle=False) as loader:
            assert sorted(int(v) for b in loader for v in b["label"]) == list(range(4 * k))
        grow(k)
    s = snap.open(url)
    assert s.version == 3
    assert verify(s).ok and not gc(url, dry_run=True).garbage
    with s.loader(batch_size=100, shuffle=False) as loader:
        assert sorted(int(v) for b in loader for v in b["label"]) == list(range(12))


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_a_notebook_create_sees_inputs_another_process_added(backend: Backend) -> None:
    """A notebook re-running its create cell over remote inputs (a glob of gs:// or s3://
    files) after another process added one: its glob came from the listing kept since the
    first run, and the create said "up to date" without the new input."""
    inputs = backend.path(backend.url("inputs"))
    other = _other_client(backend)

    def preprocess(path: str) -> Any:
        with storage.resolve(path)[0].open(path) as f:
            start = int(f.read())
        for i in range(start, start + 3):
            yield {"label": i}

    url, pattern = backend.url(), backend.url("inputs") + "/*.txt"
    other.pipe_file(f"{inputs}/0.txt", b"0")
    first = snap.create(preprocess, url, inputs=pattern, workers=0)
    other.pipe_file(f"{inputs}/1.txt", b"10")
    second = snap.create(preprocess, url, inputs=pattern, workers=0)
    assert (first.version, second.version) == (1, 2)
    with snap.open(url).loader(batch_size=10, shuffle=False) as loader:
        assert sorted(int(v) for b in loader for v in b["label"]) == [0, 1, 2, 10, 11, 12]
    other.rm_file(f"{inputs}/0.txt")  # (a removed input: the next version drops its records)
    assert snap.create(preprocess, url, inputs=pattern, workers=0).version == 3
    with snap.open(url).loader(batch_size=10, shuffle=False) as loader:
        assert sorted(int(v) for b in loader for v in b["label"]) == [10, 11, 12]


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_a_notebook_create_after_another_process_grew_or_lost_a_shard(
    backend: Backend, tmp_path: Path, write_pipeline: Any
) -> None:
    """A notebook's create, re-run after `snap create` in a shell grew the snapshot: its
    listing of shards/, kept since its own first run, missed the grow's shards, so it called
    them "missing or cut short", computed their tasks again and committed a version. After a
    shard was deleted (what verify's advice says of a damaged one) it said "up to date" and
    the loader kept saying the snapshot is damaged."""
    url, pipeline = backend.url(), write_pipeline(PIPELINE)
    inputs = tmp_path / "inputs"
    inputs.mkdir()

    def shell_create(n: int) -> None:
        for k in range(n):
            (inputs / f"{k}.txt").write_text(str(k * 4))
        args = [pipeline, url, "--input", f"{inputs}/*.txt", "--inputs-per-task", "1"]
        proc = snap_subprocess("create", *args, "--workers", "0")
        assert proc.returncode == 0, proc.stderr

    def notebook_create() -> Any:
        return snap.create(pipeline, url, inputs=f"{inputs}/*.txt", inputs_per_task=1, workers=0)

    shell_create(2)
    assert notebook_create().version == 1
    shell_create(3)
    again = notebook_create()
    assert (again.version, again.reused) == (2, True)
    shard = sorted(s.path for s in snap.open(url).manifest.shards)[0]
    _other_client(backend).rm_file(f"{backend.path(url)}/{shard}")
    repaired = notebook_create()
    assert (repaired.version, repaired.reused) == (3, False)
    with snap.open(url).loader(batch_size=100, shuffle=False) as loader:
        assert sorted(int(v) for b in loader for v in b["label"]) == list(range(12))


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_gc_in_a_long_lived_process_reports_only_what_is_there(
    backend: Backend, tmp_path: Path, write_pipeline: Any
) -> None:
    """gc(dry_run) after `snap gc` in a shell had removed version 1's shards listed them again
    as garbage, and on S3 a real gc reported them removed ("a removal gc reports is one it
    made")."""
    url, pipeline = backend.url(), write_pipeline(PIPELINE)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for text in ("0", "100"):  # two versions: the second replaces every shard
        (inputs / "0.txt").write_text(text)
        args = [pipeline, url, "--input", f"{inputs}/*.txt", "--workers", "0"]
        assert snap_subprocess("create", *args).returncode == 0
    old = {g.path for g in gc(url, dry_run=True, retention=0).garbage}
    assert any(p.startswith("shards/") for p in old)
    shell = snap_subprocess("gc", url, "--retention", "0", "--json")
    assert shell.returncode == 0, shell.stderr
    assert {g["path"] for g in json.loads(shell.stdout)["removed"]} == old
    assert not gc(url, dry_run=True, retention=0).garbage
    assert not gc(url, retention=0).garbage
