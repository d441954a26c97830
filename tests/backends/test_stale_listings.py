"""A file another process made after this one listed its directory: gcsfs and s3fs keep a
directory's listing until told otherwise, and answered from it that the file is not there
(s3fs's ``cat_file`` sizes a file from the listing first; both clients' ``info`` look there).
snap reads its small files (runs' states, leases, version copies, task results) and asks
whether one exists after listings of their directories, so a reader or writer beside another
said "not found" of a file that was there. Against the real GCS emulator and moto."""

from __future__ import annotations

import fsspec
import pytest

from snapshot_cli import storage
from tests.backends.conftest import Backend


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
