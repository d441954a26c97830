"""The shard cache's own directory failing: a full disk makes room (every entry not in use
goes) and a shard that still does not fit is read without the cache; every other failure of
the directory (read-only, not permitted, I/O error, any errno) is a StorageError naming the
directory, not the remote shard being cached, and leaves no temporary file.

A full disk is a real small tmpfs where the machine lets the tests mount one (root, as CI
runs); the same paths are reached without root by reporting no free space (``statvfs``) and
by failing the cache's own writes with each errno (fault injection)."""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError, StorageError
from snapshot_cli.readers import cache as cache_mod
from snapshot_cli.readers import cache_faults
from snapshot_cli.readers.cache import CachedShard, NoRoom, ShardCache, Sink

RECORD_BYTES = 6_000
SHARDS = 64  # of 8 records: 48 KiB each, 3 MiB in all (a loader holds 16 open: 0.75 MiB)


RECORDS = SHARDS * 8


def _records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(8):
        n = i * 8 + k
        yield {"n": np.int64(n), "x": np.full(RECORD_BYTES, n % 251, np.uint8)}


@pytest.fixture
def remote(memfs: Any) -> str:  # noqa: ARG001 (emptied around the test)
    url = "memory://cache-faults/snap"
    info = snap.create(_records, url, inputs=range(SHARDS), workers=0, compression="none")
    assert len(snap.open(info.path).shards) == SHARDS
    return url


def _epochs(
    url: str, cache_dir: Path, stats: dict[str, Any] | None = None, **options: Any
) -> list[list[int]]:
    """Two shuffled epochs through the cache, each record's values checked; the loader's
    :meth:`stats` at the end into ``stats``."""
    out = []
    with snap.open(url).loader(4, seed=3, epochs=2, cache_dir=cache_dir, **options) as loader:
        seen: list[int] = []
        for batch in loader:
            assert (batch["x"] == (batch["n"] % 251)[:, None]).all()
            seen += batch["n"].tolist()
            if len(seen) == RECORDS:
                out.append(seen)
                seen = []
        if stats is not None:
            stats.update(loader.stats())
    return out


def _temporaries(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob("*.tmp")]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a tmpfs of the size given."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the statvfs tests below cover the same path)")
    mounted: list[Path] = []

    def make(size: str) -> Path:
        path = tmp_path / f"disk-{size}"
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True)  # fmt: skip
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


NO_ROOM = "Reading the shards that do not fit without the cache"


def _fill(cache: ShardCache, name: str, data: bytes) -> CachedShard:
    return cache.open(f"gs://b/{name}.arrow", len(data), f"{crc32c.crc32c(data):08x}",
                      lambda put: put(0, data))  # fmt: skip


def test_a_full_disk_makes_room_from_the_entries_not_in_use(
    mount: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    disk = mount("1m")
    cache = ShardCache(disk / "c", started=math.inf)  # no cache_limit: the disk bounds it
    # (started: no entry its loader's, so that each not in use may go; see the next test)
    blobs = {name: os.urandom(250_000) for name in "abcdefg"}
    held = {name: _fill(cache, name, blobs[name]) for name in "abcd"}  # 1 MB in use
    for name in "ab":
        held.pop(name).close()  # no longer in use: may go
    held["e"] = _fill(cache, "e", blobs["e"])  # no room for it until a (the LRU) goes
    assert cache.evicted == 1  # (it emptied the cache of all not in use, b too)
    assert {p.read_bytes() for p, _, _ in cache.entries()} == {blobs[n] for n in "bcde"}
    full = [m for m in _warnings(caplog) if "is full (ENOSPC)" in m]
    assert len(full) == 1 and full[0].startswith(f"cache_dir {disk / 'c'} is full"), full
    assert "removed 1 entry not in use (244.1 KiB)" in full[0]
    held["f"] = _fill(cache, "f", blobs["f"])  # b goes; c, d, e and f: 1 MB, all in use
    assert cache.evicted == 2
    with pytest.raises(NoRoom) as raised:
        _fill(cache, "g", blobs["g"])
    assert str(raised.value) == (
        f"cache_dir {disk / 'c'}: No space left on device (ENOSPC) while caching "
        "gs://b/g.arrow (244.1 KiB), with every entry not in use removed but this loader's "
        "own; free space there, "
        "give cache_limit a size below the space free (e.g. '20GiB'), or choose another "
        "cache_dir (or none)"
    )
    for name, entry in held.items():
        assert Path(entry.path).read_bytes() == blobs[name]
    assert not _temporaries(disk)
    assert len([m for m in _warnings(caplog) if "is full" in m]) == 1  # said once


def test_a_full_disk_keeps_the_entries_its_loader_uses(mount: Callable[[str], Path]) -> None:
    """A disk smaller than the snapshot: the fill that found it full removed every entry not
    in use, so the cache emptied each time it filled, for good (a probe: 0 hits in 4
    epochs). The entries this loader has used stay; the shard that does not fit beside them
    is read without the cache."""
    disk = mount("1m")
    cache = ShardCache(disk / "c")
    blobs = {name: os.urandom(250_000) for name in "abcde"}

    def put(name: str) -> CachedShard | None:
        data = blobs[name]
        crc = f"{crc32c.crc32c(data):08x}"
        return cache.open_if_room(f"gs://b/{name}.arrow", len(data), crc, lambda p: p(0, data))

    for name in "abcd":  # (about 1 MB: the disk's room)
        if (held := put(name)) is not None:
            held.close()
    kept = {p.read_bytes() for p, _, _ in cache.entries()}
    assert len(kept) >= 3
    assert put("e") is None
    assert {p.read_bytes() for p, _, _ in cache.entries()} == kept and cache.evicted == 0
    assert cache.uncached >= 1 and not _temporaries(disk)


@pytest.mark.parametrize("size", ["2m", "256k"])
def test_the_loader_reads_through_a_full_disk(
    remote: str, mount: Callable[[str], Path], caplog: pytest.LogCaptureFixture, size: str
) -> None:
    # 2m: room for more than the shards a loader has open, not for all 64; 256k: for a few,
    # so that most are read without the cache
    disk = mount(size)
    stats: dict[str, Any] = {}
    epochs = _epochs(remote, disk / "c", stats)
    assert [sorted(e) for e in epochs] == [list(range(RECORDS))] * 2
    said = _warnings(caplog)
    assert len(said) == len(set(said)) <= 2, said  # each said once, not for every shard
    assert all(m.startswith(f"cache_dir {disk / 'c'}") for m in said), said
    if size == "256k":
        (no_room,) = [m for m in said if NO_ROOM in m]
        assert "No space left on device (ENOSPC)" in no_room
        assert "a loader keeps up to 16 cached shards open (in use) at once" in no_room
    # Cached what fitted. (Not "entries are left": on 256 KiB, threads filling at once can
    # crowd each other out after the entries not in use were removed for them: CI, once.)
    assert stats["cache"]["fills"] > 0, stats["cache"]
    assert size == "256k" or list((disk / "c").glob("*.arrow"))
    assert not _temporaries(disk)


def test_no_free_space_reads_every_shard_without_the_cache(
    remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = os.statvfs

    def no_space(path: Any) -> Any:
        st = real(path)
        if str(path).startswith(str(tmp_path)):
            return os.statvfs_result((*st[:4], 0, *st[5:]))  # f_bavail = 0
        return st

    monkeypatch.setattr(cache_mod.os, "statvfs", no_space)
    epochs = _epochs(remote, tmp_path / "c")
    assert [sorted(e) for e in epochs] == [list(range(RECORDS))] * 2
    assert not list((tmp_path / "c").glob("*.arrow"))  # nothing was downloaded to the disk
    assert "Reading the shards that do not fit without the cache" in caplog.text


FAULTS = sorted({*cache_faults.HINTED, errno.ENXIO})  # every errno with a hint, and one without
OPS = ["pwrite", "fsync", "replace", "open", "flock"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("code", FAULTS, ids=[errno.errorcode[c] for c in FAULTS])
def test_every_fault_of_the_directory_is_named_as_its(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, code: int
) -> None:
    cache = ShardCache(tmp_path / "c")
    data = os.urandom(5000)
    module = fcntl if op == "flock" else os
    real = getattr(module, op)

    def failing(*args: Any, **kwargs: Any) -> Any:
        if op == "open" and not (args[1] & os.O_EXCL):
            return real(*args, **kwargs)  # (the lock files; the temporary file is O_EXCL)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(module, op, failing)
    expected = NoRoom if code in (errno.ENOSPC, errno.EDQUOT) else StorageError
    with pytest.raises(expected) as raised:
        cache.open("gs://bucket/snap/shards/a.arrow", len(data),
                   f"{crc32c.crc32c(data):08x}", lambda put: put(0, data))  # fmt: skip
    message = str(raised.value)
    assert message.startswith(f"cache_dir {tmp_path / 'c'}: ")
    assert f"({errno.errorcode[code]})" in message and "cache_dir" in message.split(";")[-1]
    assert "gs://bucket/snap/shards/a.arrow" in message  # what was being cached, not the path
    monkeypatch.undo()
    assert not _temporaries(tmp_path) and cache.entries() == []


@pytest.mark.parametrize(
    "error", [ConnectionResetError("reset"), FileNotFoundError(2, "gone"), StorageError("403")]
)
def test_the_downloads_own_errors_pass_unchanged(tmp_path: Path, error: Exception) -> None:
    cache = ShardCache(tmp_path / "c")

    def fill(put: Sink) -> None:
        put(0, b"part")
        raise error

    with pytest.raises(type(error)) as raised:
        cache.open("gs://b/a.arrow", 100, "00000000", fill)
    assert raised.value is error
    assert not _temporaries(tmp_path)


def test_a_cache_dir_that_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for where in (blocker, blocker / "sub"):
        with pytest.raises(OptionError, match=f"{blocker} is a file, not a directory; choose"):
            ShardCache(where)
