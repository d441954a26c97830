"""Buffers their codec does not shrink are stored plain (``writers/plain.py``): every shard is
still a valid Arrow IPC file holding the records written, its checksums (whole file and per
record batch) are of the bytes on disk, each buffer is plain exactly where compressing it
saves less than ``MIN_SAVING``, and snap's readers give the same records."""

from __future__ import annotations

import base64
import io
import struct
from typing import Any

import crc32c
import fsspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import ipc_blocks, ipc_layout
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers import plain
from snapshot_cli.writers.options import Compression
from snapshot_cli.writers.shard import ShardRoller

KINDS = ["noise_bytes", "text", "small_ints", "float_noise", "pixels", "tokens", "flags",
         "pairs", "times", "words_dict", "large_noise", "sliced_noise", "noise_text"]  # fmt: skip


def column(kind: str, n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` values of one kind: some compress well, some not at all."""
    if kind == "noise_bytes":  # encoded images: incompressible
        return pa.array([rng.bytes(int(k)) for k in rng.integers(0, 3000, n)], pa.binary())
    if kind == "large_noise":  # 64-bit offsets
        return pa.array([rng.bytes(int(k)) for k in rng.integers(0, 3000, n)], pa.large_binary())
    if kind == "sliced_noise":  # a slice of a larger array: pyarrow rebases its offsets
        whole = pa.array([rng.bytes(int(k)) for k in rng.integers(0, 3000, n + 7)], pa.binary())
        return whole.slice(5, n)
    if kind == "noise_text":  # incompressible text (base64 of noise)
        sizes = rng.integers(0, 900, n)
        return pa.array([base64.b64encode(rng.bytes(int(k))).decode() for k in sizes], pa.string())
    if kind == "text":
        return pa.array([" ".join(["word"] * int(k)) for k in rng.integers(0, 40, n)], pa.string())
    if kind == "small_ints":
        return pa.array(rng.integers(0, 10, n), pa.int64())
    if kind == "float_noise":
        return pa.array(rng.standard_normal(n).astype(np.float32))
    if kind == "pixels":  # a fixed-shape tensor of noise
        values = pa.array(rng.integers(0, 256, n * 48, dtype=np.uint8))
        return pa.FixedSizeListArray.from_arrays(values, 48)
    if kind == "tokens":
        lengths = rng.integers(0, 30, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = pa.array(rng.integers(0, 2**31 - 1, int(offsets[-1])).astype(np.int32))
        return pa.ListArray.from_arrays(pa.array(offsets), values)
    if kind == "flags":
        return pa.array(rng.random(n) < 0.5, pa.bool_())
    if kind == "pairs":
        ids = pa.array(rng.integers(0, 2**62, n), pa.int64())
        blobs = pa.array([rng.bytes(int(k)) for k in rng.integers(0, 200, n)], pa.binary())
        return pa.StructArray.from_arrays([ids, blobs], ["id", "blob"])
    if kind == "times":
        return pa.array(rng.integers(0, 2**60, n), pa.timestamp("ns"))
    assert kind == "words_dict"  # a dictionary: its values in messages of their own
    indices = pa.array(rng.integers(0, 3, n), pa.int8())  # (one dictionary in every batch)
    return pa.DictionaryArray.from_arrays(indices, pa.array(["cat", "dog", "emu"]))


def write_shards(
    codec: str, kinds: list[str], rows: list[int], seed: int, shard_size: int
) -> tuple[list[pa.RecordBatch], list[tuple[bytes, Any]]]:
    """Record batches of ``rows`` records each written by :class:`ShardRoller` into an
    in-memory filesystem; returns them and each shard's bytes with its manifest entry."""
    rng = np.random.default_rng(seed)
    fs = fsspec.filesystem("memory")
    root = f"/plain/{seed}-{codec}-{len(rows)}"
    roller = ShardRoller(fs, root, "run", 0, Compression(codec), shard_size)
    batches = []
    for n in rows:
        batch = pa.record_batch({f"c{i}_{k}": column(k, n, rng) for i, k in enumerate(kinds)})
        batches.append(batch)
        roller.write(batch)
    roller.finish_shard()
    shards = [(fs.cat_file(f"{root}/{e.path}"), e) for e in roller.entries]
    fs.rm(root, recursive=True)
    return batches, shards


def buffers(message: bytes) -> tuple[int | None, list[bytes]]:
    """A record batch message's codec and its buffers' bytes as stored."""
    meta = ipc_layout.metadata_size(message[:8])
    layout = ipc_layout.batch_layout(message[:meta], len(message))
    body = message[layout.body_start :]
    return layout.codec, [bytes(body[o : o + n]) for o, n in layout.buffers.tolist()]


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    rows=st.lists(st.integers(0, 60), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
    shard_size=st.sampled_from([1, 40_000, 1 << 30]),
    held=st.sampled_from([plain.HELD_MAX, 3_000]),
)
def test_each_buffer_is_plain_exactly_where_its_codec_does_not_pay(
    codec: str, kinds: list[str], rows: list[int], seed: int, shard_size: int, held: int
) -> None:
    default, plain.HELD_MAX = plain.HELD_MAX, held  # (3,000: many passed through as written)
    try:
        batches, shards = write_shards(codec, kinds, rows, seed, shard_size)
    finally:
        plain.HELD_MAX = default
    read: list[pa.RecordBatch] = []
    level = Compression(codec).effective_level if codec == "zstd" else None
    compressor = pa.Codec(codec, compression_level=level) if level is not None else pa.Codec(codec)
    for data, entry in shards:
        assert entry.bytes == len(data) and entry.crc32c == f"{crc32c.crc32c(data):08x}"
        reader = pa.ipc.open_file(pa.py_buffer(data))
        read += [reader.get_batch(i) for i in range(reader.num_record_batches)]
        n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
        footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
        blocks = ipc_blocks.record_batch_blocks(footer, len(data))
        crcs = [crc32c.crc32c(data[b.offset : b.offset + b.length]) for b in blocks]
        # (a dictionary's record batches do not decode alone: no per-batch checksums)
        assert entry.batch_crc32c == ("" if "words_dict" in kinds else ipc_blocks.encode(crcs))
        for b in blocks:
            found, stored = buffers(data[b.offset : b.offset + b.length])
            assert found == (ipc_layout.LZ4_FRAME if codec == "lz4" else ipc_layout.ZSTD)
            for buf in stored:
                if not buf:
                    continue
                (stated,) = struct.unpack_from("<q", buf)
                if b.length > held:  # passed through: as pyarrow wrote it
                    assert stated != -1
                elif stated == -1:  # plain: its codec would not have saved 5 %
                    raw = buf[8:]
                    assert len(compressor.compress(raw)) > len(raw) * (1 - plain.MIN_SAVING)
                else:
                    assert len(buf) - 8 <= stated * (1 - plain.MIN_SAVING)
    assert len(read) == len(batches)
    for got, want in zip(read, batches, strict=True):
        assert got.equals(want)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_images_are_stored_plain_and_compressible_columns_compressed(codec: str) -> None:
    """The case it is for: encoded images beside labels and captions."""
    _, shards = write_shards(codec, ["noise_bytes", "small_ints", "text"], [50] * 4, 7, 1 << 30)
    ((data, _),) = shards
    n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
    footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
    for b in ipc_blocks.record_batch_blocks(footer, len(data)):
        _, stored = buffers(data[b.offset : b.offset + b.length])
        # image offsets, image bytes, label values, caption offsets, caption text
        stated = [struct.unpack_from("<q", s)[0] for s in stored if s]
        assert stated[1] == -1, "the images' bytes were compressed"
        assert stated[2] > 0 and stated[4] > 0, "labels and captions were left plain"


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_snap_reads_plain_buffers(tmp_path: Any, codec: str, shuffle: bool) -> None:
    """Through ``snap.create`` and every way the loader decodes a record batch (Arrow, and
    the compiled decode of fixed-width columns straight into the window)."""
    rng = np.random.default_rng(3)
    records = [
        {"jpeg": rng.bytes(int(rng.integers(100, 5000))), "label": i,
         "pixels": rng.integers(0, 256, 64, dtype=np.uint8)}
        for i in range(600)
    ]  # fmt: skip

    def make() -> Any:
        yield from records

    out = str(tmp_path / "s")
    snap.create(make, out, workers=0, compression=codec, batch_rows=25, shard_size=200_000)
    s = snap.open(out)
    assert verify(s).ok
    seen: dict[int, tuple[bytes, bytes]] = {}
    with s.loader(64, shuffle=shuffle, epochs=1, seed=1) as loader:
        for batch in loader:
            for j, label in enumerate(batch["label"].tolist()):
                seen[label] = (bytes(batch["jpeg"][j]), batch["pixels"][j].tobytes())
    assert sorted(seen) == list(range(600))
    for r in records:
        assert seen[r["label"]] == (r["jpeg"], r["pixels"].tobytes())


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_message_too_large_to_hold_passes_through_as_written(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record batches larger than HELD_MAX are written as pyarrow wrote them, never held (a
    video record would be held twice over), between others stored plain; the file is whole."""
    monkeypatch.setattr(plain, "HELD_MAX", 20_000)
    batches, shards = write_shards(codec, ["noise_bytes"], [2, 40, 3, 60, 1, 0], 11, 1 << 30)
    ((data, entry),) = shards
    reader = pa.ipc.open_file(pa.py_buffer(data))
    assert [reader.get_batch(i) for i in range(reader.num_record_batches)] == batches
    n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
    footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
    blocks = ipc_blocks.record_batch_blocks(footer, len(data))
    crcs = [crc32c.crc32c(data[b.offset : b.offset + b.length]) for b in blocks]
    assert ipc_blocks.encode(crcs) == entry.batch_crc32c
    kept = []
    for b in blocks:
        _, stored = buffers(data[b.offset : b.offset + b.length])
        values = stored[2]  # (validity, offsets, values)
        if values:
            kept.append((b.length > 20_000, struct.unpack_from("<q", values)[0] == -1))
    assert {(True, False), (False, True)} == set(kept), kept  # large: compressed; small: plain


class _Out(io.BytesIO):
    def close(self) -> None:  # (kept readable)
        pass


def test_a_stream_it_cannot_follow_is_passed_on_unchanged() -> None:
    out = _Out()
    sink = plain.PlainSink(out)
    stream = b"ARROW1\0\0" + b"\x01\x02\x03\x04" * 10  # no continuation marker after the magic
    sink.write(stream[:8])
    sink.write(stream[8:20])
    sink.write(stream[20:])
    sink.finish()
    assert out.getvalue() == stream


def test_a_stream_lost_after_a_message_moved_is_an_error_not_a_wrong_file() -> None:
    rng = np.random.default_rng(0)
    batch = pa.record_batch({"b": pa.array([rng.bytes(5000) for _ in range(10)])})
    schema_out = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    writer = pa.ipc.new_file(schema_out, batch.schema, options=options)
    writer.write_batch(batch)
    good = schema_out.getvalue()  # magic, schema, one record batch (its bytes incompressible)
    sink = plain.PlainSink(_Out())
    sink.write(good)
    with pytest.raises(RuntimeError, match="cannot follow the Arrow IPC stream"):
        sink.write(b"\x01\x02\x03\x04" * 4)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_footer_with_dictionaries_is_patched_whole(codec: str) -> None:
    """A footer listing dictionaries before its record batches (pyarrow's file writer puts a
    dictionary ahead of the first record batch using it): the record batches stored plain
    move, the dictionary stays, and the file reads back."""
    batches, shards = write_shards(codec, ["noise_bytes", "words_dict"], [40, 30, 20], 5, 1 << 30)
    ((data, _),) = shards
    n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
    footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
    vectors = ipc_blocks.block_vectors(footer)
    assert len(vectors) == 2, "no dictionary blocks: the case is not met"
    reader = pa.ipc.open_file(pa.py_buffer(data))
    assert [reader.get_batch(i) for i in range(3)] == batches
