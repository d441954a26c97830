"""Record batches read by range (remote snapshots over the loader's memory budget, no
``cache_dir``) are checked before any of their records is used: one flipped bit anywhere in
a shard, at rest, is CorruptShardError naming the shard (and the record batch, where it is
in one), never a wrong record; a flip in transit (the first read only) is read again and
every record is right. For format 2 shards (a crc32c per record batch in the manifest) and
format 1 ones (none: the shard is read whole once, its crc32c checked)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import ipc_blocks
from snapshot_cli.errors import CorruptShardError
from snapshot_cli.manifest import ShardEntry
from snapshot_cli.readers import ranged as ranged_mod
from snapshot_cli.readers import shard as shard_mod
from snapshot_cli.readers.verify import verify

from . import flipping_fs

ROOT = "/flip/snap"
SHARDS, RECORDS, BATCH_ROWS = 3, 200, 50


@pytest.fixture(
    params=[("format 2", "tail 1 KiB"), ("format 1", "tail 1 KiB"), ("format 2", "whole in tail"),
            ("format 1", "whole in tail")], ids=" ".join,
)  # fmt: skip
def made(
    request: pytest.FixtureRequest, write_pipeline: Any, memfs: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:  # fmt: skip
    pipeline = write_pipeline(
        f"""
        import numpy as np
        def preprocess(path):
            with open(path) as f:
                i = int(f.read())
            for k in range({RECORDS}):
                n = i * {RECORDS} + k
                yield {{"label": np.int64(n), "x": np.random.default_rng(n).random(8)}}
        """
    )
    (tmp_path / "in").mkdir()
    for i in range(SHARDS):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    snap.create(pipeline, f"memory://{ROOT}", inputs=[str(tmp_path / "in" / "*.txt")],
                workers=0, batch_rows=BATCH_ROWS)  # fmt: skip
    form, tail = request.param
    if tail == "tail 1 KiB":  # the record batches fetched by range (else all in the tail)
        monkeypatch.setattr(ranged_mod, "TAIL_GUESS", 1024)
    if form == "format 1":
        doc = json.loads(memfs.cat_file(f"{ROOT}/manifest.json"))
        for entry in doc["shards"]:
            del entry["batch_crc32c"]
        doc["format_version"] = 1
        memfs.pipe_file(f"{ROOT}/manifest.json", json.dumps(doc).encode())
    flipping_fs.register()
    monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1024)  # every read by range
    s = snap.open(f"flipmem://{ROOT}")
    assert all(bool(e.batch_crc32c) == (form == "format 2") for e in s.shards)
    clean = records(s)
    assert sorted(clean) == list(range(SHARDS * RECORDS))
    shards = []
    for e in s.shards:
        data = memfs.cat_file(f"{ROOT}/{e.path}")
        blocks = ipc_blocks.file_blocks(lambda n, at, d=data: d[at : at + n], len(data))
        shards.append((f"{ROOT}/{e.path}", len(data), blocks[:]))
    yield Made(clean=clean, shards=shards, format=form)
    flipping_fs.FLIPS.clear()


class Made(dict):  # type: ignore[type-arg]
    """The snapshot's clean records, its shards' paths, sizes and blocks, and its format."""

    def __repr__(self) -> str:  # (Hypothesis prints it with each failing example)
        return f"<{self['format']} snapshot at flipmem://{ROOT}>"


def records(s: Any) -> dict[int, bytes]:
    loader = s.loader(32, seed=1, num_parallel_reads=2)
    assert loader.reads_by_range
    out: dict[int, bytes] = {}
    for b in loader:
        for label, x in zip(b["label"].tolist(), b["x"], strict=True):
            out[label] = np.asarray(x).tobytes()
    return out


def flip(made: dict[str, Any], shard: int, offset: float, transient: bool) -> tuple[str, int]:
    path, size, _ = made["shards"][shard]
    at = min(size - 1, int(offset * size))
    flipping_fs.FLIPS.clear()
    flipping_fs.SERVED.clear()
    flipping_fs.FLIPS[path] = (at, transient)
    return path, at


def block_of(made: dict[str, Any], shard: int, at: int) -> int | None:
    for i, b in enumerate(made["shards"][shard][2]):
        if b.offset <= at < b.offset + b.length:
            return i
    return None


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(shard=st.integers(0, SHARDS - 1), offset=st.floats(0, 1, exclude_max=True))
def test_a_flip_at_rest_is_never_a_wrong_record(
    made: dict[str, Any], shard: int, offset: float
) -> None:
    path, at = flip(made, shard, offset, transient=False)
    batch = block_of(made, shard, at)
    try:
        got = records(snap.open(f"flipmem://{ROOT}"))
    except CorruptShardError as err:
        assert path.rsplit("/", 1)[1] in str(err)
        assert "snap verify" in str(err) or "delete" in str(err)
        if batch is not None and made["format"] == "format 2":
            assert f"record batch {batch} has crc32c" in str(err)
            # read again once before the verdict (each time the block, and the tail where
            # it holds the byte)
            assert 2 <= flipping_fs.SERVED[path] <= 4
        elif batch is not None:
            assert "is damaged: crc32c" in str(err)
        return
    assert batch is None, f"a flip in record batch {batch} at byte {at} went unnoticed"
    assert got == made["clean"]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(shard=st.integers(0, SHARDS - 1), offset=st.floats(0, 1, exclude_max=True))
def test_a_flip_in_transit_is_read_again(made: dict[str, Any], shard: int, offset: float) -> None:
    path, at = flip(made, shard, offset, transient=True)
    assert records(snap.open(f"flipmem://{ROOT}")) == made["clean"]
    if block_of(made, shard, at) is not None:
        assert flipping_fs.SERVED[path] >= 2  # the flipped read, then the good one


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_every_record_batch_of_every_shard_is_checked(made: dict[str, Any], where: str) -> None:
    for shard, (path, _, blocks) in enumerate(made["shards"]):
        for i, b in enumerate(blocks):
            at = {"first": b.offset, "middle": b.offset + b.length // 2,
                  "last": b.offset + b.length - 1}[where]  # fmt: skip
            flipping_fs.FLIPS.clear()
            flipping_fs.FLIPS[path] = (at, False)
            with pytest.raises(CorruptShardError) as caught:
                records(snap.open(f"flipmem://{ROOT}"))
            assert path.rsplit("/", 1)[1] in str(caught.value), (shard, i)
            if made["format"] == "format 2":
                assert f"record batch {i} has crc32c" in str(caught.value)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(shard=st.integers(0, SHARDS - 1), offset=st.floats(0, 1, exclude_max=True),
       transient=st.booleans())  # fmt: skip
def test_verify_reads_a_remote_shard_again_before_calling_it_damaged(
    made: dict[str, Any], shard: int, offset: float, transient: bool
) -> None:
    """snap verify of a remote snapshot: a shard whose bytes were flipped in transit (the
    first read) is read again and found intact; one flipped at rest is damaged, named."""
    path, at = flip(made, shard, offset, transient)
    report = verify(snap.open(f"flipmem://{ROOT}"))
    assert flipping_fs.SERVED[path] == (1 if report.ok and not transient else 2)
    if transient:
        assert report.ok, [c.problem for c in report.damaged]
    else:
        assert [c.path for c in report.damaged] == [path.split("/snap/", 1)[1]]


@pytest.mark.parametrize("part", [ranged_mod.WHOLE_PART, 5_000])
def test_a_format_1_shard_is_read_whole_in_few_requests(
    part: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A format 1 shard (no crc32c per record batch) read whole to learn its messages' took
    one request a message, one after another (1,000 record batches: 1,000 times to first
    byte before its first record); now requests of up to WHOLE_PART bytes, with the same
    crc32c for every message."""
    import io

    import crc32c
    import pyarrow as pa

    monkeypatch.setattr(ranged_mod, "WHOLE_PART", part)
    table = pa.table({"x": np.arange(20_000, dtype=np.int64)})
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=100):  # 200 record batches
            writer.write_batch(batch)
    data = sink.getvalue()
    n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
    blocks = ipc_blocks.record_batch_blocks(
        data[-ipc_blocks.TAIL - n : -ipc_blocks.TAIL], len(data)
    )
    entry = ShardEntry(path="s.arrow", records=20_000, record_batches=200,
                                 bytes=len(data), uncompressed_bytes=0,
                                 crc32c=f"{crc32c.crc32c(data):08x}", batch_rows="",
                                 batch_crc32c="")  # fmt: skip
    asked: list[tuple[int, int]] = []

    def read(a: int, b: int) -> bytes:
        asked.append((a, b))
        return data[a:b]

    tail = (len(data) - 1024, data[-1024:])
    regions = ranged_mod.whole_regions(read, "mem://s.arrow", entry, len(data), tail, blocks)
    assert len(asked) <= -(-len(data) // part) + 1, len(asked)
    assert sum(b - a for a, b in asked) == len(data)  # every byte once
    for b in blocks:
        k = regions.find(b.offset, b.offset + b.length)
        regions.check(k, data[b.offset : b.offset + b.length])  # each message's own crc32c


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(shard=st.integers(0, SHARDS - 1), offset=st.floats(0, 1, exclude_max=True),
       transient=st.booleans())  # fmt: skip
def test_a_whole_remote_shard_is_fetched_again_before_it_is_called_damaged(
    made: dict[str, Any], shard: int, offset: float, transient: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A remote snapshot under the loader's memory budget (shards fetched whole): a shard
    whose bytes were flipped in transit told the consumer the snapshot was damaged and to
    delete it; it is fetched again once and every record is right. At rest: damaged."""
    monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1 << 30)  # (whole shards, not ranges)
    path, _ = flip(made, shard, offset, transient)
    s = snap.open(f"flipmem://{ROOT}")
    loader = s.loader(32, seed=1, num_parallel_reads=2)
    assert not loader.reads_by_range
    if transient:
        got: dict[int, bytes] = {}
        for b in loader:
            for label, x in zip(b["label"].tolist(), b["x"], strict=True):
                got[label] = np.asarray(x).tobytes()
        assert got == made["clean"]
        assert flipping_fs.SERVED[path] == 2  # fetched again once
    else:
        with pytest.raises(CorruptShardError, match=path.split("/snap/", 1)[1]):
            for _ in loader:
                pass


def test_a_flip_of_the_footers_byte_order_is_no_wrong_record(made: dict[str, Any]) -> None:
    """The footer's schema declares the values' byte order, and no manifest crc32c covers the
    footer of a shard read by range: one bit there made pyarrow byte-swap every value (label
    200 read as -4035225266123964416; Hypothesis met it once in CI). The bit is found here as
    the one whose flip changes what pyarrow itself reads."""
    path, size, blocks = made["shards"][1]
    data = flipping_fs.FlippingFileSystem().cat_file(path)  # (no flip set: as written)
    end = max(b.offset + b.length for b in blocks)
    labels = pa.ipc.open_file(pa.py_buffer(data)).read_all().column(0)  # (the label)
    swapped = []
    for at in range(end, size - 10):
        damaged = bytearray(data)
        damaged[at] ^= 0x10  # (the bit flipping_fs flips)
        try:
            table = pa.ipc.open_file(pa.py_buffer(bytes(damaged))).read_all()
        except (pa.ArrowException, OSError):
            continue
        if table.num_rows == len(labels) and not table.column(0).equals(labels):
            swapped.append(at)
    assert swapped  # (else this test tests nothing)
    for at in swapped:
        flip(made, 1, at / size + 1e-9, transient=False)
        try:
            got = records(snap.open(f"flipmem://{ROOT}"))
        except CorruptShardError:
            continue
        assert got == made["clean"], at
