"""A file another process made after this one listed its directory: gcsfs and s3fs keep a
directory's listing until told otherwise, and answered from it that the file is not there
(s3fs's ``cat_file`` sizes a file from the listing first; both clients' ``info`` look there).
snap reads its small files (runs' states, leases, version copies, task results) and asks
whether one exists after listings of their directories, so a reader or writer beside another
said "not found" of a file that was there. Against the real GCS emulator and moto."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers.gc import gc
from tests.backends.conftest import Backend
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


PIPELINE = """
def preprocess(path):
    with open(path) as f:
        start = int(f.read())
    for i in range(start, start + 4):
        yield {"label": i}
"""


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
