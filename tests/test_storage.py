from __future__ import annotations

import pickle
from pathlib import Path

import fsspec
import pytest

from snapshot_cli import storage
from snapshot_cli.errors import OptionError, StorageError
from snapshot_cli.writers import inputs as inputs_mod


def test_expand_inputs_sorted_deduplicated_with_identity(tmp_path: Path) -> None:
    for name in ["b.txt", "a.txt", "c.bin"]:
        (tmp_path / name).write_text(name)
    files = inputs_mod.expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "a.txt")])
    assert [Path(f.url).name for f in files] == ["a.txt", "b.txt"]
    assert all(Path(f.url).is_absolute() for f in files)
    assert files[0].size == 5
    assert files[0].version.startswith("mtime=")


def test_expand_inputs_memory_urls(memfs: fsspec.AbstractFileSystem) -> None:
    memfs.pipe("/in/x1", b"1")
    memfs.pipe("/in/x2", b"22")
    files = inputs_mod.expand_inputs(["memory://in/x*"])
    assert [f.url for f in files] == ["memory:///in/x1", "memory:///in/x2"]
    assert [f.size for f in files] == [1, 2]


def test_expand_inputs_errors(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="matched no files"):
        inputs_mod.expand_inputs([str(tmp_path / "*.jpg")])
    with pytest.raises(OptionError, match="matched no files"):
        inputs_mod.expand_inputs([str(tmp_path / "missing.jpg")])
    with pytest.raises(OptionError, match="is a directory"):
        inputs_mod.expand_inputs([str(tmp_path)])


@pytest.mark.parametrize("proto", ["file", "memory"])
def test_atomic_and_exclusive_writes(proto: str, tmp_path: Path, memfs: object) -> None:
    root = str(tmp_path) if proto == "file" else "memory://root"
    fs, path = storage.resolve(root)
    target = storage.join(path, "sub", "f.json")
    storage.write_atomic(fs, target, b"one")
    storage.write_atomic(fs, target, b"two")
    assert storage.read_bytes(fs, target) == b"two"
    assert storage.create_exclusive(fs, storage.join(path, "x", "lock"), b"a")
    assert not storage.create_exclusive(fs, storage.join(path, "x", "lock"), b"b")
    assert storage.read_bytes(fs, storage.join(path, "x", "lock")) == b"a"
    assert storage.list_names(fs, path) == ["sub", "x"]
    if proto == "file":  # no temporary files left next to the target
        assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["f.json"]


def test_permission_denied_is_named() -> None:
    fs, path = storage.resolve("/sys/snap-cannot-write-here/x")
    with pytest.raises(StorageError, match="permission denied.*snap-cannot-write-here"):
        storage.makedirs(fs, path)


def test_filesystems_are_picklable(tmp_path: Path) -> None:
    fs, _ = storage.resolve(str(tmp_path))
    assert pickle.loads(pickle.dumps(fs)).protocol == fs.protocol


@pytest.mark.parametrize("url", ["gs://", "gs:///", "gcs://", "s3://", "s3:///", "s3a://"])
def test_an_object_store_url_without_a_bucket_says_so(url: str) -> None:
    # it used to be sent to the store as the path "manifest.json" (a DNS or credentials error
    # about a bucket nobody named); no client is made and nothing is sent
    with pytest.raises(OptionError, match=rf"^'{url}' names no bucket: give one, as in "):
        storage.resolve(url)
