"""The shared shard cache: filled once across processes, checked, LRU-bounded, never evicting
an entry in use; and the loader's ``cache_dir=`` on a memory:// snapshot."""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import crc32c
import fsspec
import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import CorruptShardError, OptionError
from snapshot_cli.readers.cache import ShardCache, Sink


def _crc(data: bytes) -> str:
    return f"{crc32c.crc32c(data):08x}"


def _writer(data: bytes, calls: list[int] | None = None):  # type: ignore[no-untyped-def]
    def fill(put: Sink) -> None:
        if calls is not None:
            calls.append(1)
        put(0, data)

    return fill


def test_fills_once_then_hits(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c")
    data = os.urandom(1000)
    calls: list[int] = []
    for _ in range(3):
        held = cache.open("gs://b/s/shards/a.arrow", len(data), _crc(data), _writer(data, calls))
        assert Path(held.path).read_bytes() == data
        held.close()
    assert (len(calls), cache.fills, cache.hits) == (1, 1, 2)
    assert cache.size() == len(data)


def test_damaged_download_is_refused_and_not_kept(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c")
    data = os.urandom(500)
    bad = bytearray(data)
    bad[7] ^= 1
    with pytest.raises(CorruptShardError, match=r"gs://b/x\.arrow is damaged: crc32c"):
        cache.open("gs://b/x.arrow", len(data), _crc(data), _writer(bytes(bad)))
    with pytest.raises(CorruptShardError, match="downloaded 499 bytes, the manifest says 500"):
        cache.open("gs://b/x.arrow", len(data), _crc(data), _writer(data[:-1]))
    assert cache.entries() == []
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.endswith(".tmp")]
    held = cache.open("gs://b/x.arrow", len(data), _crc(data), _writer(data))
    assert Path(held.path).read_bytes() == data


def test_failed_fill_leaves_nothing(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c")

    def fail(put: Sink) -> None:
        put(0, b"partial")
        raise ConnectionResetError("network went away")

    with pytest.raises(ConnectionResetError):
        cache.open("gs://b/y.arrow", 100, "00000000", fail)
    assert cache.entries() == []
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.endswith(".tmp")]


def _put(cache: ShardCache, name: str, data: bytes):  # type: ignore[no-untyped-def]
    return cache.open(f"s3://b/{name}", len(data), _crc(data), _writer(data))


def test_lru_eviction_keeps_the_limit(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c", limit=2500)
    blobs = {n: os.urandom(1000) for n in "abc"}
    for i, n in enumerate("ab"):
        _put(cache, n, blobs[n]).close()
        os.utime(cache.entries()[-1][0], (1000 + i, 1000 + i))  # a older than b
    _put(cache, "a", blobs["a"]).close()  # using a makes b the least recently used
    _put(cache, "c", blobs["c"]).close()
    kept = {p.read_bytes() for p, _, _ in cache.entries()}
    assert kept == {blobs["a"], blobs["c"]}
    assert cache.size() <= 2500 and cache.evicted == 1


def test_an_entry_in_use_is_never_evicted(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c", limit=2000, started=math.inf)  # (no entry its loader's)
    a, b, c = (os.urandom(1000) for _ in range(3))
    held = _put(cache, "a", a)  # held open: in use
    os.utime(held.path, (1, 1))  # and the least recently used
    _put(cache, "b", b).close()
    _put(cache, "c", c).close()  # over the limit: a is in use, so b goes
    assert {p.read_bytes() for p, _, _ in cache.entries()} == {a, c}
    assert Path(held.path).read_bytes() == a
    held.close()
    _put(cache, "b", b).close()  # a released: now it goes
    assert {p.read_bytes() for p, _, _ in cache.entries()} == {c, b}


def test_entries_over_the_limit_go_as_they_are_released(tmp_path: Path) -> None:
    """Entries in use pushed a cache past its limit (several loaders, each holding up to 16
    shards); they went only at the next fill, so a cache whose later readers all hit stayed
    over its limit for good (3 readers: 43.5 KB left against a 12 KiB limit)."""
    cache = ShardCache(tmp_path / "c", started=math.inf)  # (none its loader's)
    blobs = [os.urandom(1000) for _ in range(5)]
    held = [_put(cache, str(i), b) for i, b in enumerate(blobs)]  # (all in use: none can go)
    assert cache.size() == 5000
    cache.limit = 2500  # (as several processes' fills at once leave it: over, all in use)
    cache._evict(keep=None)
    other = ShardCache(tmp_path / "c", limit=2500, started=math.inf)  # (a hit, no fill)
    hit = other.open("s3://b/0", 1000, _crc(blobs[0]), _writer(blobs[0]))
    names = [Path(h.path).name for h in held]
    for h in held[:3]:
        h.close()  # released over the limit: each goes at once, but 0, which other holds
    assert {p.name for p, _, _ in cache.entries()} == {names[0], names[3], names[4]}
    for h in held[3:]:
        h.close()  # 3 goes (the least recently used), then it is within its limit
    hit.close()
    assert {p.name for p, _, _ in cache.entries()} == {names[0], names[4]}
    assert cache.size() <= 2500 and cache.evicted == 3 and other.evicted == 0


def test_entry_evicted_between_open_and_use_is_fetched_again(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c")
    data = os.urandom(300)
    _put(cache, "a", data).close()
    (path,) = [p for p, _, _ in cache.entries()]
    path.unlink()  # as another process's eviction would
    calls: list[int] = []
    held = cache.open("s3://b/a", len(data), _crc(data), _writer(data, calls))
    assert calls == [1] and Path(held.path).read_bytes() == data


def _child_open(directory: str, data: bytes, counter: str, barrier) -> None:  # type: ignore[no-untyped-def]
    cache = ShardCache(directory)

    def fill(put: Sink) -> None:
        with open(counter, "a") as f:  # O_APPEND: one line per fill, across processes
            f.write("fill\n")
        put(0, data)

    barrier.wait()
    held = cache.open("gs://b/shared.arrow", len(data), _crc(data), fill)
    assert Path(held.path).read_bytes() == data
    held.close()


def test_processes_opening_at_once_fill_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    data = os.urandom(3 << 20)
    counter = tmp_path / "fills"
    counter.touch()
    procs = [
        ctx.Process(target=_child_open, args=(str(tmp_path / "c"), data, str(counter), barrier))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert counter.read_text().splitlines() == ["fill"]


def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="cache_limit must be a positive"):
        ShardCache(tmp_path, limit=0)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OptionError, match="cannot use cache_dir"):
        ShardCache(blocker / "sub")


@pytest.fixture
def remote_snapshot(write_pipeline, memfs, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    pipeline = write_pipeline(
        """
        import numpy as np
        def preprocess(path):
            with open(path) as f:
                i = int(f.read())
            for k in range(40):
                yield {"label": np.int64(i * 40 + k), "x": np.full(64, i * 40 + k, np.float32)}
        """
    )
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(6):
        (inputs / f"{i}.txt").write_text(str(i))
    url = "memory://cached/snap"
    snap.create(pipeline, url, inputs=[str(inputs / "*.txt")], workers=0, shard_size="4KiB")
    return url


def test_loader_reads_through_the_cache(remote_snapshot: str, tmp_path: Path) -> None:
    s = snap.open(remote_snapshot)
    assert len(s.shards) > 3
    cache_dir = tmp_path / "shards"
    labels = []
    for _ in range(2):
        with s.loader(32, cache_dir=cache_dir, seed=1) as loader:
            labels.append(np.concatenate([b["label"] for b in loader]))
            stats = loader.stats()["cache"]
        if len(labels) == 1:
            assert stats["fills"] == len(s.shards) and stats["hits"] == 0
        else:
            assert stats["fills"] == 0 and stats["hits"] == len(s.shards)
    assert sorted(labels[0].tolist()) == list(range(240))
    np.testing.assert_array_equal(labels[0], labels[1])  # same seed, same order
    assert len(list(cache_dir.glob("*.arrow"))) == len(s.shards)


def test_many_epochs_through_the_cache_keep_one_record_per_shard(
    remote_snapshot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the process has checked is kept per file version, which has its mtime: each use
    of a cache entry sets it (least recently used first), so every epoch added an entry per
    shard (a loader of 40 shards grew ~19 KB an epoch, for good). One per file now."""
    from snapshot_cli.readers import checked, shard

    monkeypatch.setattr(shard, "CACHED_OPEN", 2)  # shards opened again every epoch, as past 16
    s = snap.open(remote_snapshot)
    with s.loader(32, cache_dir=tmp_path / "c", seed=1) as loader:
        for _ in loader:
            pass
        after_one = checked.entries()
        for _ in range(4):
            for _ in loader:
                pass
        assert checked.entries() == after_one
    assert len([p for p in checked._checked if p.startswith(str(tmp_path / "c"))]) == len(s.shards)


def test_cache_dir_is_a_local_directory_or_a_file_url(
    remote_snapshot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both used to be made as relative directories in the working directory: ./memory:/c
    # (a "cache" that was local disk after all) and ./file:/...
    monkeypatch.chdir(tmp_path)
    s = snap.open(remote_snapshot)
    for url in ("memory://c", "gs://bucket/cache"):
        with pytest.raises(OptionError, match=r"cache_dir must be a local directory .* the URL"):
            s.loader(32, cache_dir=url)
    target = tmp_path / "by-url"
    with s.loader(32, cache_dir=f"file://{target}") as loader:
        assert sum(len(b["label"]) for b in loader) == 240
    assert len(list(target.glob("*.arrow"))) == len(s.shards)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(":")]  # no ./file:


def test_loader_cache_refuses_a_damaged_shard(remote_snapshot: str, tmp_path: Path) -> None:
    s = snap.open(remote_snapshot)
    fs = fsspec.filesystem("memory")
    path = f"/cached/snap/{s.shards[0].path}"
    data = bytearray(fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(path, bytes(data))
    with pytest.raises(CorruptShardError, match=s.shards[0].path):
        for _ in s.loader(32, shuffle=False, cache_dir=tmp_path / "c"):
            pass
    cached = [p.name for p in (tmp_path / "c").glob("*.arrow")]
    assert not [n for n in cached if n.startswith(s.shards[0].crc32c)]


def test_loader_cache_options(remote_snapshot: str, tmp_path: Path) -> None:
    s = snap.open(remote_snapshot)
    with pytest.raises(OptionError, match="cache_limit needs cache_dir"):
        s.loader(8, cache_limit="1GiB")
    with pytest.raises(OptionError, match="cache_limit must look like"):
        s.loader(8, cache_dir=tmp_path, cache_limit="lots")


def test_a_limit_below_a_shard_is_said_once(
    remote_snapshot: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # every fill went over it: one warning a fill (900 lines for 40 shards in a probe); now
    # none fits, and every shard is read without the cache, said once
    s = snap.open(remote_snapshot)
    with s.loader(8, seed=2, epochs=3, cache_dir=tmp_path / "c", cache_limit="1KiB") as loader:
        labels = np.concatenate([b["label"] for b in loader])
        stats = loader.stats()["cache"]
    assert (stats["fills"], stats["hits"]) == (0, 0) and stats["uncached"] >= len(s.shards)
    assert sorted(labels.tolist()) == sorted(list(range(240)) * 3)
    said = [r.getMessage() for r in caplog.records if "has no room in its" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"cache_dir {tmp_path / 'c'} has no room in its cache_limit of ")
    assert "1.0 KiB for more of the shards this loader reads" in said[0]


def test_a_cache_smaller_than_the_snapshot_keeps_the_shards_it_holds(
    write_pipeline: Any, memfs: Any, tmp_path: Path
) -> None:
    """Made room for each shard by the least recently used, a cache of half the snapshot
    evicted the shards the next epoch read first: no hits, and more downloads than shards
    in an epoch (a probe: 57 of 50 in the first epoch, 229 in four). It keeps the shards it
    holds: each later epoch hits them all and downloads only the others, once each."""
    pipeline = write_pipeline(
        "import numpy as np\n"
        "def preprocess(i):\n"
        "    yield {'label': np.int64(i), 'x': np.full(256, i, np.float32)}\n"
    )
    url = "memory://cached/many"  # (40 shards: more than a loader keeps open, 16)
    snap.create(pipeline, url, inputs_from=lambda: list(range(40)), workers=0, inputs_per_task=1)
    s = snap.open(url)
    sizes = sorted(e.bytes for e in s.shards)
    limit = sum(sizes[: len(sizes) // 2])  # (room for about half of them)
    seen: list[dict[str, int]] = []
    with s.loader(4, seed=3, epochs=None, cache_dir=tmp_path / "c", cache_limit=limit) as loader:
        it = iter(loader)
        for _ in range(4):
            for _ in range(loader.batches_per_epoch()):
                next(it)
            seen.append(dict(loader.stats()["cache"]))
    kept = len(list((tmp_path / "c").glob("*.arrow")))
    assert len(sizes) // 2 - 1 <= kept < len(sizes)
    held = sum(p.stat().st_size for p in (tmp_path / "c").glob("*.arrow"))
    # (the read threads' fills under way are counted: it held 29 shards where 25 fit; and one
    # over, once in CI, where an admission listed the entries before a fill's rename and read
    # the reservations after it was taken back: the fills' temporary files are listed first)
    assert held <= limit, (held, limit)
    assert seen[-1]["evicted"] == 0, seen  # none put out for another
    assert seen[-1]["fills"] == kept, seen  # none filled twice (a shard refused while fills
    # were under way, counted until their entries are there, may be filled in a later epoch)
    assert seen[-1]["hits"] >= seen[0]["hits"] + kept, seen  # (read from it every epoch)


def test_a_later_loader_evicts_entries_it_has_not_used(tmp_path: Path) -> None:
    """Entries this loader has not used (another snapshot's, an earlier run's) go, least
    recently used first, to make room; those it has used stay, and a shard that does not
    fit beside them is read without the cache (``open_if_room``: None)."""
    blobs = {name: os.urandom(1000) for name in "abcd"}

    def put(cache: ShardCache, name: str) -> Any:
        data = blobs[name]
        return cache.open_if_room(f"s3://b/{name}", len(data), _crc(data), _writer(data))

    first = ShardCache(tmp_path / "c", limit=2500)
    for name in "ab":
        put(first, name).close()
    assert put(first, "c") is None and first.uncached == 1  # (a and b are its own)
    os.utime(next((tmp_path / "c").glob(f"{_crc(blobs['b'])}-*")), (1, 1))  # b: used long ago
    later = ShardCache(tmp_path / "c", limit=2500)
    put(later, "c").close()  # room made from b (least recently used), then from nothing more
    assert later.evicted == 1 and put(later, "a") is not None  # a kept: a hit
    names = {p.name.split("-")[0] for p, _, _ in later.entries()}
    assert names == {_crc(blobs["a"]), _crc(blobs["c"])}
    assert put(later, "d") is None  # a and c are the later loader's own now


def test_fills_under_way_in_other_processes_count_against_the_limit(tmp_path: Path) -> None:
    """The fills under way were counted per process: the trials of a sweep filling at once
    each found room for a shard and together passed the limit. Each fill's temporary file is
    its reservation, seen by every process. (Two caches on one directory share no state in
    memory, as two processes: the flocks are per open file, not per process.)"""
    blobs = {name: os.urandom(1000) for name in "abc"}
    filling, finish = threading.Event(), threading.Event()

    def slow_fill(put: Sink) -> None:
        put(0, blobs["a"][:10])
        filling.set()
        assert finish.wait(60)
        put(10, blobs["a"][10:])

    trial1 = ShardCache(tmp_path / "c", limit=2500)
    trial2 = ShardCache(tmp_path / "c", limit=2500)
    held: list[Any] = []
    fill_a = threading.Thread(
        target=lambda: held.append(
            trial1.open_if_room("s3://b/a", 1000, _crc(blobs["a"]), slow_fill)
        )
    )
    fill_a.start()
    try:
        assert filling.wait(60)
        b = trial2.open_if_room("s3://b/b", 1000, _crc(blobs["b"]), _writer(blobs["b"]))
        c = trial2.open_if_room("s3://b/c", 1000, _crc(blobs["c"]), _writer(blobs["c"]))
    finally:
        finish.set()
        fill_a.join(60)
    assert b is not None and c is None and trial2.uncached == 1  # (a under way, then b: full)
    assert held[0] is not None and Path(held[0].path).read_bytes() == blobs["a"]
    for entry in (held[0], b):
        entry.close()
    assert trial1.size() == 2000 and not list((tmp_path / "c").glob(".*.tmp"))


def test_a_cache_entry_damaged_after_its_fill_is_caught(
    remote_snapshot: str, tmp_path: Path
) -> None:
    # cached entries are read as local files are: mapped, each record batch checked as read
    s = snap.open(remote_snapshot)
    with s.loader(8, shuffle=False, cache_dir=tmp_path / "c") as loader:
        assert sum(len(b["label"]) for b in loader) == 240
    entry = next((tmp_path / "c").glob(f"{s.shards[0].crc32c}-*.arrow"))
    data = bytearray(entry.read_bytes())
    data[len(data) // 3] ^= 0xFF  # (bit rot on the local disk, after the checked download)
    entry.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=s.shards[0].path) as raised:
        for _ in s.loader(8, shuffle=False, cache_dir=tmp_path / "c"):
            pass
    # the local copy is named and blamed, not the snapshot: "recreate it with --overwrite"
    # would have had the user compute the whole snapshot again for a bad local file
    said = str(raised.value)
    assert f"the local copy in the shard cache is damaged ({entry})" in said, said
    assert "--overwrite" not in said
    entry.unlink()  # what it says to do
    with s.loader(8, shuffle=False, cache_dir=tmp_path / "c") as loader:
        assert sum(len(b["label"]) for b in loader) == 240


@pytest.mark.parametrize("cut", [1, 100])
def test_a_cache_entry_cut_short_after_its_fill_is_fetched_again(
    remote_snapshot: str, tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    # (its size is checked as it is opened: a damaged copy of another size heals itself)
    s = snap.open(remote_snapshot)
    with s.loader(8, shuffle=False, cache_dir=tmp_path / "c") as loader:
        expected = [b["label"].copy() for b in loader]
    entry = next((tmp_path / "c").glob(f"{s.shards[0].crc32c}-*.arrow"))
    entry.write_bytes(entry.read_bytes()[:-cut])
    with s.loader(8, shuffle=False, cache_dir=tmp_path / "c") as loader:
        got = [b["label"].copy() for b in loader]
    assert len(got) == len(expected) and all(map(np.array_equal, got, expected))
    assert entry.stat().st_size == s.shards[0].bytes
    said = [r.getMessage() for r in caplog.records if str(entry) in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("refetching"), said


def test_a_lost_remote_shard_read_through_the_cache_is_named(
    remote_snapshot: str, tmp_path: Path
) -> None:
    # the same error as without cache_dir: the shard, that it is missing, and what to do
    s = snap.open(remote_snapshot)
    fsspec.filesystem("memory").rm(f"/cached/snap/{s.shards[2].path}")
    for cache_dir in (None, tmp_path / "c"):
        with pytest.raises(CorruptShardError) as raised:
            for _ in s.loader(8, shuffle=False, cache_dir=cache_dir):
                pass
        assert f"shard memory:///cached/snap/{s.shards[2].path} is missing" in str(raised.value)
