"""Input files identified by their bytes: the digests are sha256 of exactly those bytes, on
local disk and through fsspec alike, whatever the grouping and thread count."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.writers import contents


def sha(data: bytes) -> str:
    return f"sha256={hashlib.sha256(data).hexdigest()}"


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=150))
def test_groups_keep_every_file_once_in_order_within_their_bounds(sizes: list[int]) -> None:
    files = [(f"/d/{i}", n) for i, n in enumerate(sizes)]
    groups = contents._groups(files)
    assert [u for g in groups for u in g] == [u for u, _ in files]
    size = dict(files)
    for g in groups:
        assert 0 < len(g) <= contents.GROUP_FILES
        # a group stops at the first file that takes it to GROUP_BYTES
        assert sum(size[u] for u in g[:-1]) < contents.GROUP_BYTES


def test_threads_follow_the_storage() -> None:
    assert contents.threads_for([("/d/a", 10)] * 100) == contents.LOCAL_THREADS
    assert contents.threads_for([("gs://b/a", 10)]) == contents.HASH_THREADS  # the network
    assert contents.threads_for([("/d/a", 10), ("memory://x/a", 10)]) == contents.HASH_THREADS


@pytest.mark.parametrize("where", ["local", "file://", "memory"])
def test_digests_are_the_files_bytes(tmp_path: Path, where: str) -> None:
    blobs = [os.urandom(n) for n in (0, 1, 4096, 70_000)] + [b"same"] * 2 + [b"x" * (9 << 20)]
    if where == "memory":
        root = f"memory://contents-{os.getpid()}"
        fs = fsspec.filesystem("memory")
    else:
        root = str(tmp_path) if where == "local" else f"file://{tmp_path}"
        fs = fsspec.filesystem("file")
    urls = []
    for i, blob in enumerate(blobs):
        url = f"{root}/f{i} name.bin"
        with fs.open(url, "wb") as f:
            f.write(blob)
        urls.append(url)
    got = contents.hash_files([(u, len(b)) for u, b in zip(urls, blobs, strict=True)])
    assert got == {u: sha(b) for u, b in zip(urls, blobs, strict=True)}


def test_a_local_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):  # callers decide what a missing input means
        contents.hash_file(str(tmp_path / "gone.bin"))
    with pytest.raises(snap.StorageError, match=r"it is a directory, not a file"):
        contents.hash_file(str(tmp_path))
    relative = os.path.relpath(tmp_path / "r.bin")
    (tmp_path / "r.bin").write_bytes(b"abc")
    assert contents.hash_file(relative) == sha(b"abc")
