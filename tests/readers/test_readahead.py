"""Reading ahead from disk (:mod:`snapshot_cli.readers.readahead`): when it turns on, what it
asks the kernel for (whole record batches of the windows to come, nothing when the snapshot
is cached), and that it changes no batch and hides no error. Its speed is measured by
``benchmarks/cold.py``."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import resource
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import readahead
from snapshot_cli.readers.blocks import BlockFile
from snapshot_cli.readers.plan import Blocks, Segment
from snapshot_cli.readers.shard import ShardReaders
from snapshot_cli.readers.stats import Stats

RECORD_BYTES = 8192


def _snapshot(root: Path, codec: str) -> str:
    def images(i: int) -> Any:
        rng = np.random.default_rng(i)
        image = rng.integers(0, 255, (250, RECORD_BYTES), dtype=np.uint8)
        yield snap.Batch(image=image, label=np.arange(250) + 250 * i)

    out = str(root / codec)
    snap.create(images, out, inputs=list(range(16)), workers=0, compression=codec,
                shard_size="4MiB")  # fmt: skip
    return out


def _shard_files(path: str) -> list[str]:
    return [os.path.join(path, e.path) for e in snap.open(path).shards]


def _evict(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _reads_from_device(paths: list[str]) -> bool:
    """Whether reading the files after evicting them reads from a block device here (not on
    tmpfs, for one)."""
    _evict(paths)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_inblock
    for path in paths:
        Path(path).read_bytes()
    return resource.getrusage(resource.RUSAGE_SELF).ru_inblock > before


def _block_ends(path: str) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """Each shard file's record batches: the offsets they start at and end at."""
    s = snap.open(path)
    starts, ends = {}, {}
    for entry in s.shards:
        file = os.path.realpath(os.path.join(path, entry.path))
        blocks = BlockFile(file, entry, s.schema, file).blocks
        starts[file] = {b.offset for b in blocks}
        ends[file] = {b.offset + b.length for b in blocks}
    return starts, ends


@pytest.fixture
def advice(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """What the read-ahead asks for: (file, offset, length), passed on to the kernel."""
    asked: list[tuple[str, int, int]] = []
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, how: int) -> None:
        if how == os.POSIX_FADV_WILLNEED:
            asked.append((os.path.realpath(f"/proc/self/fd/{fd}"), offset, length))
        real(fd, offset, length, how)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    return asked


def _epoch(path: str) -> tuple[list[np.ndarray], dict[str, Any]]:
    with snap.open(path).loader(200, seed=3, shuffle_buffer="2MiB") as loader:
        labels = [b["label"].copy() for b in loader]
        return labels, loader.stats()


@pytest.mark.parametrize("codec", ["lz4", "none"])
def test_a_snapshot_read_from_disk_is_read_ahead_in_whole_record_batches(
    tmp_path: Path, codec: str, advice: list[tuple[str, int, int]]
) -> None:
    path = _snapshot(tmp_path, codec)
    files = _shard_files(path)
    readahead.ENABLED = False
    try:
        expected, _ = _epoch(path)
    finally:
        readahead.ENABLED = True
    from_device = _reads_from_device(files)
    _evict(files)
    labels, stats = _epoch(path)
    assert len(labels) == len(expected)
    for got, want in zip(labels, expected, strict=True):
        np.testing.assert_array_equal(got, want)  # the same batches, in the same order
    if not from_device:  # (tmpfs: nothing comes from a device, nothing is asked for)
        assert stats["windows_read_ahead"] == 0 and not advice
        return
    assert stats["windows"] > 4
    assert stats["windows_read_ahead"] >= stats["windows"] // 2
    starts, ends = _block_ends(path)
    assert advice
    for file, offset, length in advice:  # record batches, whole, of the snapshot's shards
        assert offset in starts[file] and offset + length in ends[file], (file, offset, length)


@contextlib.contextmanager
def _pinned(paths: list[str]) -> Iterator[None]:
    """The files in the page cache, and kept there (``mlock``): under memory pressure (a busy
    CI machine) the kernel may evict some of their pages between two epochs, and an epoch
    that reads them from disk again is read ahead, rightly. Locking needs root or a
    ``ulimit -l`` as large as the files: where it is refused, they are only read."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    maps: list[mmap.mmap] = []
    views: list[np.ndarray] = []  # (their addresses, for mlock)
    try:
        for path in paths:
            with open(path, "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
            views.append(np.frombuffer(maps[-1], dtype=np.uint8))
            if libc.mlock(views[-1].ctypes.data, views[-1].size) != 0:
                Path(path).read_bytes()
        yield
    finally:
        for i in range(len(views)):
            libc.munlock(views[i].ctypes.data, views[i].size)
        views.clear()
        for mm in maps:
            mm.close()


def test_a_cached_snapshot_is_never_read_ahead(
    tmp_path: Path, advice: list[tuple[str, int, int]]
) -> None:
    path = _snapshot(tmp_path, "lz4")
    with _pinned(_shard_files(path)):
        _epoch(path)  # (whatever the loader imports lazily is read from disk in this one)
        _, stats = _epoch(path)
    assert stats["windows"] > 4
    assert stats["windows_read_ahead"] == 0 and not advice  # asking costs ~0.1 CPU-s a GB


def test_a_missing_shard_read_ahead_is_left_to_the_read_that_reports_it(
    tmp_path: Path, advice: list[tuple[str, int, int]]
) -> None:
    path = _snapshot(tmp_path, "none")
    s = snap.open(path)
    missing = os.path.realpath(os.path.join(path, s.shards[1].path))
    os.remove(missing)
    readers = ShardReaders(fsspec.filesystem("file"), path, s.shards, s.schema)
    blocks = Blocks.from_manifest(s.manifest)
    moved = iter(range(0, 10**12, 10**9))  # the device counter: a GB more at each look
    ahead = readahead.Readahead(readers, blocks, threading.Event(), Stats(), lambda: next(moved))
    ahead.turn(64 << 20)
    assert ahead.cold
    segments = [Segment(b, 0, int(r)) for b, r in enumerate(blocks.rows)]
    ahead.advise("window 1", segments)
    ahead.advise("window 1", segments)  # once per window
    ahead.close()
    asked = {file for file, _, _ in advice}
    assert missing not in asked
    assert asked == {os.path.realpath(f) for f in _shard_files(path)} - {missing}
    assert len(advice) == len(asked)  # a shard's record batches, in order: one request
    with pytest.raises(snap.CorruptShardError, match=s.shards[1].path):
        _epoch(path)


def test_the_gate_follows_the_reads_from_devices() -> None:
    seen = [0]
    local = SimpleNamespace(local=True)  # (the gate reads nothing else of the readers)
    ahead = readahead.Readahead(local, None, threading.Event(), Stats(), lambda: seen[0])  # type: ignore[arg-type]
    for read, window, cold in [(0, 1 << 20, False), (1 << 16, 1 << 20, True),
                               ((1 << 16) - 1, 1 << 20, False), (1 << 30, 0, False),
                               (5 << 20, 64 << 20, True)]:  # fmt: skip
        seen[0] += read
        ahead.turn(window)
        assert ahead.cold is cold, (read, window)
    readahead.ENABLED = False
    try:
        seen[0] += 1 << 30
        ahead.turn(1 << 20)
        assert not ahead.cold
    finally:
        readahead.ENABLED = True
    # remote snapshots (a mixture of them too): their reads from a device are a cache_dir's
    remote = SimpleNamespace(parts=[SimpleNamespace(local=False)] * 2)
    ahead = readahead.Readahead(remote, None, threading.Event(), Stats(), lambda: seen[0])  # type: ignore[arg-type]
    seen[0] += 1 << 30
    ahead.turn(1 << 20)
    assert not ahead.cold


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(1, 20)), max_size=30))
def test_coalesce_joins_adjacent_spans_of_a_file_and_keeps_the_rest(
    spans: list[tuple[int, int, int]],
) -> None:
    out = readahead.coalesce(spans)

    def cover(parts: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        return [(f, x) for f, o, n in parts for x in range(o, o + n)]

    assert cover(out) == cover(spans)  # the same bytes, in the same order
    for (f1, o1, n1), (f2, o2, _) in zip(out, out[1:], strict=False):
        assert not (f1 == f2 and o1 + n1 == o2)  # nothing left to join
    assert len(out) <= len(spans)


def test_reading_ahead_holds_no_more_files_open_than_the_readers_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window of 2,000 small shards read from disk: the read-ahead held every one of its
    files open until it had asked for all of them, and a loader that ran in ~330 descriptors
    from the page cache ran out of them (ulimit -n 1500) on a cold one."""

    def one(i: int) -> Any:
        yield {"label": np.int64(i), "x": np.full(256, i % 256, np.uint8)}

    path = str(tmp_path / "many")
    snap.create(one, path, inputs=list(range(400)), workers=0, inputs_per_task=1)
    s = snap.open(path)
    readers = ShardReaders(fsspec.filesystem("file"), path, s.shards, s.schema, max_open=128)
    blocks = Blocks.from_manifest(s.manifest)
    root = os.path.realpath(path)

    def open_shards() -> int:
        links = (os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd"))
        return sum(link.startswith(root) for link in links)

    most = [0]
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, how: int) -> None:
        most[0] = max(most[0], open_shards())
        real(fd, offset, length, how)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    moved = iter(range(0, 10**12, 10**9))
    ahead = readahead.Readahead(readers, blocks, threading.Event(), Stats(), lambda: next(moved))
    ahead.turn(64 << 20)
    ahead.advise("window", [Segment(b, 0, int(r)) for b, r in enumerate(blocks.rows)])
    ahead.close()
    assert 0 < most[0] <= readers.max_open + 1, (most[0], readers.max_open)
