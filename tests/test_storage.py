from __future__ import annotations

import ctypes
import errno
import os
import pickle
from pathlib import Path

import fsspec
import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import durable, storage
from snapshot_cli.errors import OptionError, StorageError
from snapshot_cli.protocols import OBJECT_STORES
from snapshot_cli.writers import inputs as inputs_mod
from tests.conftest import create_at_once


def test_expand_inputs_sorted_deduplicated_with_identity(tmp_path: Path) -> None:
    for name in ["b.txt", "a.txt", "c.bin"]:
        (tmp_path / name).write_text(name)
        os.utime(tmp_path / name, (1e9, 1e9))  # (a file written just now has no version yet)
    files = inputs_mod.expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "a.txt")])
    assert [Path(f.url).name for f in files] == ["a.txt", "b.txt"]
    assert all(Path(f.url).is_absolute() for f in files)
    assert files[0].size == 5
    st = (tmp_path / "a.txt").stat()
    assert files[0].version == f"mtime=1000000000.0 ino={st.st_ino} ctime={st.st_ctime}"


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


@pytest.mark.parametrize("url", ["s3://bucket//snaps/x", "gs://b//x", "gcs://b//x/", "s3://b//"])
def test_an_empty_name_after_the_bucket_is_refused(url: str) -> None:
    """A create to s3://bucket//snaps/x wrote its shards, then stopped as if its lease had
    been deleted, and the same command waited on that lease for good: the clients list such
    objects without the empty name and read them with it. (Further in, "b/x//y", they agree.)"""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    with pytest.raises(OptionError) as refused:
        storage.resolve(url)
    assert str(refused.value) == (
        f"{url!r} has an empty name after its bucket ({bucket}//): the storage's clients list "
        "such objects without it and read them with it, so snap would not find them whole; "
        f"give {scheme}://{bucket}/{key.lstrip('/')}"
    )
    if scheme == "s3":  # (further in: a client made, nothing sent; gcsfs looks for credentials)
        storage.resolve(f"{scheme}://{bucket}/x//y", {"anon": True})


@pytest.fixture
def no_hard_links(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> int:
    """``os.link`` answering as a filesystem without hard links does (FAT and exFAT drives,
    SMB shares, FUSE mounts): the errno given, whatever the paths."""
    code: int = request.param

    def refuse(src: object, dst: object, *args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), src, None, dst)

    monkeypatch.setattr(os, "link", refuse)
    return code


@pytest.fixture(params=["renamed", "in place"])
def without_link(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How a file is created where hard links are refused: renamed unless the name exists
    (renameat2, where the filesystem has it: ext4 here), or written in place (``O_EXCL``:
    renameat2 answering EINVAL, as FUSE mounts without it do)."""
    if request.param == "in place":

        def refuse(*args: object) -> int:
            ctypes.set_errno(errno.EINVAL)
            return -1

        monkeypatch.setattr(durable, "_renameat2", lambda: refuse)
    else:
        assert durable._renameat2() is not None  # (Linux, glibc >= 2.28)
    return str(request.param)


@pytest.mark.parametrize("no_hard_links", sorted(durable.NO_HARD_LINKS), indirect=True)
def test_exclusive_creation_without_hard_links(
    tmp_path: Path, no_hard_links: int, without_link: str
) -> None:
    fs, root = storage.resolve(str(tmp_path))
    lock = storage.join(root, "x", "lock")
    assert storage.create_exclusive(fs, lock, b"first")
    assert not storage.create_exclusive(fs, lock, b"second")
    assert storage.read_bytes(fs, lock) == b"first"
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["lock"]  # no temporary left
    won = create_at_once(fs, storage.join(root, "race"), [b"%d" % i * 500 for i in range(4)])
    assert won.count(True) == 1


@pytest.mark.parametrize("no_hard_links", [errno.EIO, errno.ENOSPC, errno.EROFS], indirect=True)
def test_a_link_that_fails_otherwise_is_an_error(tmp_path: Path, no_hard_links: int) -> None:
    fs, root = storage.resolve(str(tmp_path))
    with pytest.raises(StorageError, match="lock"):
        storage.create_exclusive(fs, storage.join(root, "lock"), b"first")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


@pytest.mark.parametrize("no_hard_links", [errno.EPERM], indirect=True)
def test_a_snapshot_is_made_grown_and_read_without_hard_links(
    tmp_path: Path, no_hard_links: int, without_link: str
) -> None:
    def pipeline(item: int):  # type: ignore[no-untyped-def]
        yield {"x": np.full(4, item, np.int32)}

    out = str(tmp_path / "snap")
    snap.create(pipeline, out, inputs=range(20), workers=0)
    snap.create(pipeline, out, inputs=range(30), workers=0)  # grown: a second version
    s = snap.open(out)
    assert len(s.versions()) == 2 and s.num_records == 30
    got = np.concatenate([b["x"][:, 0] for b in s.loader(8, shuffle=True, seed=1)])
    assert sorted(got.tolist()) == list(range(30))


@pytest.mark.parametrize("no_hard_links", [errno.EPERM], indirect=True)
def test_a_rename_that_fails_otherwise_is_an_error(
    tmp_path: Path, no_hard_links: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(durable, "_renameat2", lambda: fail)
    fs, root = storage.resolve(str(tmp_path))
    with pytest.raises(StorageError, match="lock") as caught:
        storage.create_exclusive(fs, storage.join(root, "lock"), b"first")
    assert str(caught.value).startswith(f"{tmp_path}/lock: ")  # the name, not the temporary
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


@pytest.mark.parametrize("name", sorted(OBJECT_STORES))
def test_a_local_directory_named_as_a_protocol_is_a_path(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`snap create p.py:f s3` said "'s3' names no bucket: give one, as in s3://bucket/path"."""
    monkeypatch.chdir(tmp_path)
    fs, path = storage.resolve(name)
    assert storage.is_local(fs) and path == str(tmp_path / name)
    with pytest.raises(OptionError, match="names no bucket"):
        storage.resolve(f"{name}://")
