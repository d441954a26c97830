"""Remote snapshots larger than the in-memory budget are read one record batch per range
request: every record, the same order as whole-shard reads, and each byte fetched once."""

from __future__ import annotations

import errno
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import snapshot_cli as snap
from snapshot_cli.errors import CorruptShardError
from snapshot_cli.readers import ranged as ranged_mod
from snapshot_cli.readers import shard as shard_mod


@pytest.fixture
def remote(write_pipeline, memfs, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    pipeline = write_pipeline(
        """
        import numpy as np
        def preprocess(path):
            with open(path) as f:
                i = int(f.read())
            for k in range(300):
                n = i * 300 + k
                yield {"label": np.int64(n), "x": np.random.default_rng(n).random(16)}
        """
    )
    (tmp_path / "in").mkdir()
    for i in range(4):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    url = "memory://ranged/snap"
    snap.create(pipeline, url, inputs=[str(tmp_path / "in" / "*.txt")], workers=0,
                batch_rows=50)  # fmt: skip
    return url


class Counting(MemoryFileSystem):
    """memory:// that counts the bytes it serves (a stand-in for a metered network)."""

    protocol = "countmem"
    served = 0

    @classmethod
    def _strip_protocol(cls, path):  # type: ignore[no-untyped-def]
        return super()._strip_protocol(path.replace("countmem://", "memory://", 1))

    def cat_file(self, path, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        data = super().cat_file(path, start=start, end=end, **kwargs)
        Counting.served += len(data)
        return data


def test_over_budget_reads_batches_by_range(remote: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s = snap.open(remote)
    whole = [b["label"] for b in s.loader(64, seed=1, num_parallel_reads=4)]
    monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1024)
    fsspec.register_implementation("countmem", Counting, clobber=True)
    counted = snap.open(remote.replace("memory://", "countmem://"))
    Counting.served = 0
    loader = counted.loader(64, seed=1, num_parallel_reads=4)
    assert loader.reads_by_range
    ranged = [b["label"] for b in loader]
    np.testing.assert_array_equal(np.concatenate(ranged), np.concatenate(whole))
    assert sorted(np.concatenate(ranged).tolist()) == list(range(1200))
    on_disk = sum(e.bytes for e in counted.shards)
    # each record batch once, plus each shard's tail (footer) once per loader
    assert on_disk * 0.5 < Counting.served < on_disk * 1.6
    assert loader.stats()["bytes_read"] == Counting.served  # (it counted none before)


def test_ranged_read_of_a_truncated_shard_names_it(
    remote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1024)
    s = snap.open(remote)
    fs = fsspec.filesystem("memory")
    path = f"/ranged/snap/{s.shards[1].path}"
    fs.pipe_file(path, fs.cat_file(path)[:-100])
    with pytest.raises(CorruptShardError, match=s.shards[1].path):
        for _ in s.loader(64, shuffle=False):
            pass


class Failing(MemoryFileSystem):
    """memory:// whose range reads of record batches fail (a storage error mid-epoch), once
    the shards' tails (footers) have been read."""

    protocol = "failmem"

    @classmethod
    def _strip_protocol(cls, path):  # type: ignore[no-untyped-def]
        return super()._strip_protocol(path.replace("failmem://", "memory://", 1))

    def cat_file(self, path, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        # a range that ends before the file does is not the tail (the footer): a record batch
        if path.endswith(".arrow") and end is not None and end < self.size(path):
            raise OSError(errno.EIO, "Input/output error", path)
        return super().cat_file(path, start=start, end=end, **kwargs)


def test_a_range_read_the_storage_fails_is_a_storage_error(
    remote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record batch's range request that the storage fails reaches the loop as the
    storage's error (a StorageError naming the shard), not as a damaged shard."""
    monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1024)
    monkeypatch.setattr(ranged_mod, "TAIL_GUESS", 1024)  # the tail read is not the whole shard
    fsspec.register_implementation("failmem", Failing, clobber=True)
    s = snap.open(remote.replace("memory://", "failmem://"))
    loader = s.loader(64, shuffle=False)
    assert loader.reads_by_range
    with pytest.raises(snap.StorageError) as caught:
        for _ in loader:
            pass
    assert not isinstance(caught.value, CorruptShardError)
    assert ".arrow" in str(caught.value), caught.value


class Refusing(Failing):
    """memory:// whose every read of a shard fails: its footer cannot be fetched either."""

    protocol = "refusemem"

    @classmethod
    def _strip_protocol(cls, path):  # type: ignore[no-untyped-def]
        return MemoryFileSystem._strip_protocol(path.replace("refusemem://", "memory://", 1))

    def cat_file(self, path, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        if path.endswith(".arrow"):
            raise OSError(errno.EIO, "Input/output error", path)
        return super().cat_file(path, start=start, end=end, **kwargs)


@pytest.mark.parametrize("budget", [1024, None], ids=["by range", "whole shards"])
def test_a_shard_the_storage_cannot_serve_at_all_is_a_storage_error(
    remote: str, monkeypatch: pytest.MonkeyPatch, budget: int | None
) -> None:
    """The storage fails every read of a shard (its footer too), read by range or whole:
    the storage's StorageError names it, never a damaged shard's error."""
    if budget is not None:
        monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", budget)
    fsspec.register_implementation("refusemem", Refusing, clobber=True)
    s = snap.open(remote.replace("memory://", "refusemem://"))
    with pytest.raises(snap.StorageError) as caught:
        for _ in s.loader(64, shuffle=False):
            pass
    assert not isinstance(caught.value, CorruptShardError)
    assert ".arrow" in str(caught.value), caught.value
