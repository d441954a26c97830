"""Per record batch crc32c (manifest format 2): the footer parser, the writer's derived
checksums, and the loader and ``snap verify`` checking each record batch against them."""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import ipc_blocks, ipc_layout
from snapshot_cli.ipc_blocks import TAIL, Block, FooterError
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers.shard import ChecksumSink
from tests.conftest import snap_subprocess
from tests.reliability import shards as sh

MIB = 1 << 20

# --- range_crc -------------------------------------------------------------------------------

# Lengths around the 1 MiB chunk of ``shift``: below, at, just past, and several chunks.
_EDGES = [0, 1, MIB - 1, MIB, MIB + 1, MIB + 7, 2 * MIB, 2 * MIB + 3, 3 * MIB]
_lengths = st.one_of(
    st.sampled_from(_EDGES),
    st.integers(0, 4096),
    st.integers(MIB - 64, MIB + 64),
    st.integers(0, 3 * MIB),
)


@settings(max_examples=60, deadline=None)
@given(prefix_len=_lengths, length=_lengths, seed=st.integers(0, 2**32 - 1))
@example(prefix_len=0, length=0, seed=0)
@example(prefix_len=0, length=MIB, seed=1)
@example(prefix_len=5, length=MIB + 1, seed=2)
def test_range_crc_is_the_crc_of_the_range(prefix_len: int, length: int, seed: int) -> None:
    """The crc32c of a range, derived from the running crc32c just before and just after it,
    is the crc32c of its bytes alone, whatever precedes it and however long it is."""
    rng = random.Random(seed)
    prefix, data = rng.randbytes(prefix_len), rng.randbytes(length)
    before = crc32c.crc32c(prefix)
    after = crc32c.crc32c(data, before)
    assert ipc_blocks.range_crc(before, after, len(data)) == crc32c.crc32c(data)


@given(st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_encode_decode_round_trip(crcs: list[int]) -> None:
    """The manifest's string holds 8 lowercase hex digits per record batch and decodes back."""
    text = ipc_blocks.encode(crcs)
    assert len(text) == 8 * len(crcs) and re.fullmatch("[0-9a-f]*", text)
    assert ipc_blocks.decode(text) == crcs


# --- the writer's checksums agree with the footer ------------------------------------------


class _Kept(io.BytesIO):
    """An in-memory file that keeps its bytes when closed (ChecksumSink closes its raw file)."""

    kept = b""

    def close(self) -> None:
        if not self.closed:
            self.kept = self.getvalue()
        super().close()


def write_file(
    schema: pa.Schema, batches: list[pa.RecordBatch], options: pa.ipc.IpcWriteOptions
) -> tuple[bytes, ChecksumSink]:
    """An Arrow IPC file of ``batches`` written through :class:`ChecksumSink` as
    ``ShardRoller`` writes a shard; returns its bytes and the sink."""
    raw = _Kept()
    sink = ChecksumSink(raw)
    writer = pa.ipc.new_file(sink, schema, options=options)
    for batch in batches:
        writer.write_batch(batch)
    sink.keep_tail()
    writer.close()
    sink.close()
    assert raw.closed
    return raw.kept, sink


def file_blocks(data: bytes) -> list[Block]:
    """The record batch blocks the footer of ``data`` lists (parsed by ``ipc_blocks``)."""
    n = ipc_blocks.footer_length(data[-TAIL:])
    return ipc_blocks.record_batch_blocks(data[len(data) - TAIL - n : len(data) - TAIL], len(data))


_WORDS = pa.array(["alpha", "beta", "gamma", "delta", "épsilon"])


def make_batches(
    kind: str, rows: list[int], metadata: dict[bytes, bytes] | None, seed: int
) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """Record batches of ``rows`` records each, of one kind of schema."""
    rng = np.random.default_rng(seed)
    out = []
    for n in rows:
        y = pa.array(rng.integers(-(2**40), 2**40, n), pa.int64())
        if kind == "numbers":
            cols = {"y": y, "f": pa.array(rng.random(n, dtype=np.float32))}
        elif kind == "strings":
            text = [f"r{v}" * int(v % 5) for v in rng.integers(0, 1000, n)]
            cols = {
                "y": y,
                "s": pa.array(text, pa.string()),
                "b": pa.array([t.encode() for t in text], pa.binary()),
            }
        elif kind == "dictionary":  # one dictionary for every batch: the file format needs it
            idx = pa.array(rng.integers(0, len(_WORDS), n), pa.int32())
            cols = {"y": y, "d": pa.DictionaryArray.from_arrays(idx, _WORDS)}
        else:  # "tensor": fixed-size lists, as snap writes tensor columns
            values = pa.array(rng.integers(0, 255, n * 12).astype(np.uint8))
            cols = {"y": y, "t": pa.FixedSizeListArray.from_arrays(values, 12)}
        out.append(pa.RecordBatch.from_pydict(cols))
    schema = out[0].schema.with_metadata(metadata) if metadata else out[0].schema
    return schema, [b.replace_schema_metadata(schema.metadata) for b in out]


def decode_block(buf: bytes, schema: pa.Schema) -> pa.RecordBatch:
    """A block decoded as the loader decodes it. A dictionary column's record batch holds only
    its indices (the dictionary is a message of its own): decoded as indices here."""
    indices = [
        pa.field(f.name, f.type.index_type) if pa.types.is_dictionary(f.type) else f for f in schema
    ]
    return ipc_layout.message_batch(pa.py_buffer(buf), pa.schema(indices, schema.metadata))[0]


def as_decoded(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` as :func:`decode_block` reads it back (dictionary columns as indices)."""
    cols = [c.indices if pa.types.is_dictionary(c.type) else c for c in batch.columns]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


_metadata = st.sampled_from(
    [None, {b"snap": b"meta"}, {b"big": b"x" * 20_000, b"k\xc3\xa9": b"\x00\x01\xff"}]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["numbers", "strings", "dictionary", "tensor"]),
    codec=st.sampled_from([None, "lz4", "zstd"]),
    rows=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    metadata=_metadata,
    seed=st.integers(0, 2**32 - 1),
)
@example(kind="numbers", codec=None, rows=[1], metadata=None, seed=0)
@example(kind="numbers", codec="zstd", rows=[0], metadata=None, seed=0)
@example(kind="strings", codec="lz4", rows=[50] * 12, metadata={b"snap": b"meta"}, seed=1)
@example(kind="dictionary", codec=None, rows=[10, 0, 30], metadata=None, seed=2)
@example(kind="dictionary", codec="zstd", rows=[100] * 5, metadata={b"a": b"b" * 9000}, seed=3)
@example(kind="tensor", codec="lz4", rows=[0, 7, 0], metadata=None, seed=4)
def test_writer_checksums_are_the_footers_blocks(
    kind: str, codec: str | None, rows: list[int], metadata: dict[bytes, bytes] | None, seed: int
) -> None:
    """Whatever the schema, compression and batch sizes, the checksums the writer derives from
    its write boundaries are the crc32c of the bytes at each block the footer lists: one block
    per record batch written, in order, each decoding to the batch written."""
    schema, batches = make_batches(kind, rows, metadata, seed)
    data, sink = write_file(schema, batches, pa.ipc.IpcWriteOptions(compression=codec))
    assert (sink.size, sink.crc) == (len(data), crc32c.crc32c(data))
    blocks = file_blocks(data)
    assert len(blocks) == len(batches)
    crcs = ipc_blocks.decode(sink.block_crcs())
    assert crcs == [crc32c.crc32c(data[b.offset : b.offset + b.length]) for b in blocks]
    ends = [8] + [b.offset + b.length for b in blocks]  # after "ARROW1\0\0", in order, apart
    assert all(b.offset >= end for b, end in zip(blocks, ends, strict=False))
    reader = pa.ipc.open_file(data)
    for i, (block, batch) in enumerate(zip(blocks, batches, strict=True)):
        got = decode_block(data[block.offset : block.offset + block.length], schema)
        assert got.equals(as_decoded(batch)), i
        assert reader.get_batch(i).equals(batch), i


def test_block_crcs_is_empty_when_the_tail_was_not_kept() -> None:
    """Without the footer's bytes the writer cannot place the blocks: it says "" (readers then
    check the whole shard) rather than guessing."""
    schema, batches = make_batches("numbers", [10, 10], None, 0)
    raw = _Kept()
    sink = ChecksumSink(raw)
    writer = pa.ipc.new_file(sink, schema)
    for batch in batches:
        writer.write_batch(batch)
    writer.close()
    sink.close()
    assert sink.block_crcs() == ""
    assert len(file_blocks(raw.kept)) == 2  # the file itself is fine


# --- the footer parser on untrusted bytes -----------------------------------------------------


def check_parse(footer: bytes, file_size: int) -> list[Block] | None:
    """Parse ``footer``: blocks inside the file's messages, or FooterError (None) - nothing
    else may escape."""
    try:
        blocks = ipc_blocks.record_batch_blocks(footer, file_size)
    except FooterError:
        return None
    end = file_size - TAIL - len(footer)
    for b in blocks:
        assert isinstance(b.offset, int) and isinstance(b.length, int)
        assert b.offset >= 0 and b.length > 0 and b.offset + b.length <= end, (b, end)
    return blocks


def _real_file() -> tuple[bytes, bytes]:
    schema, batches = make_batches("strings", [20, 0, 35, 5], {b"k": b"v"}, 9)
    data, _ = write_file(schema, batches, pa.ipc.IpcWriteOptions(compression="zstd"))
    n = ipc_blocks.footer_length(data[-TAIL:])
    return data, data[len(data) - TAIL - n : len(data) - TAIL]


REAL_FILE, REAL_FOOTER = _real_file()


def test_a_real_footer_parses_and_bounds_are_checked() -> None:
    """The real footer's blocks are found; the same footer in a file too short to hold them is
    a FooterError, as is one of a few bytes."""
    blocks = check_parse(REAL_FOOTER, len(REAL_FILE))
    assert blocks is not None and len(blocks) == 4
    last = blocks[-1].offset + blocks[-1].length
    assert check_parse(REAL_FOOTER, last + TAIL + len(REAL_FOOTER)) == blocks
    with pytest.raises(FooterError, match="record batch 3"):
        ipc_blocks.record_batch_blocks(REAL_FOOTER, last + TAIL + len(REAL_FOOTER) - 1)
    for short in (b"", b"\x00", b"\x04\x00\x00"):
        with pytest.raises(FooterError):
            ipc_blocks.record_batch_blocks(short, 1000)


@settings(max_examples=400, deadline=None)
@given(footer=st.binary(max_size=300), extra=st.integers(-400, 1 << 40))
@example(footer=b"\x00" * 4, extra=0)
@example(footer=b"\xff" * 8, extra=100)
@example(footer=struct.pack("<Ii", 4, 0) + b"\x00" * 8, extra=100)
def test_arbitrary_footer_bytes_are_blocks_or_footer_error(footer: bytes, extra: int) -> None:
    """Arbitrary bytes as a footer never raise anything but FooterError, and never yield a
    block outside the file's messages."""
    check_parse(footer, max(0, len(footer) + TAIL + extra))


@settings(max_examples=400, deadline=None)
@given(
    flips=st.lists(
        st.tuples(st.integers(0, len(REAL_FOOTER) - 1), st.integers(1, 255)), max_size=4
    ),
    words=st.lists(
        st.tuples(
            st.integers(0, len(REAL_FOOTER) - 1),
            st.sampled_from([2, 4, 8]),
            st.sampled_from([0, 1, -1, 2**15, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1 << 32]),
        ),
        max_size=2,
    ),
    keep=st.one_of(st.none(), st.integers(0, len(REAL_FOOTER))),
    extra=st.sampled_from([0, -1, 1 << 20]),
)
def test_mutated_real_footer_is_blocks_or_footer_error(
    flips: list[tuple[int, int]],
    words: list[tuple[int, int, int]],
    keep: int | None,
    extra: int,
) -> None:
    """A real footer with bytes flipped, integers overwritten by extremes, or cut short still
    parses only to blocks inside the file, or is a FooterError."""
    footer = bytearray(REAL_FOOTER)
    for pos, mask in flips:
        footer[pos] ^= mask
    for pos, width, value in words:  # an integer field overwritten, little-endian
        raw = (value % (1 << 8 * width)).to_bytes(width, "little")
        footer[pos : pos + width] = raw[: len(footer) - pos]
    body = bytes(footer[:keep] if keep is not None else footer)
    check_parse(body, len(REAL_FILE) - len(REAL_FOOTER) + len(body) + extra)


@given(st.binary(min_size=0, max_size=14))
@example(b"\x00\x00\x00\x00ARROW1")
@example(b"\xff\xff\xff\xffARROW1")
@example(b"\x05\x00\x00\x00ARROW1")
def test_footer_length_is_positive_or_footer_error(tail: bytes) -> None:
    """The last 10 bytes give a positive footer length, or a FooterError."""
    try:
        n = ipc_blocks.footer_length(tail)
    except FooterError:
        assert len(tail) != TAIL or tail[4:] != b"ARROW1" or struct.unpack("<i", tail[:4])[0] <= 0
        return
    assert n > 0 and (len(tail), tail[4:]) == (TAIL, b"ARROW1")


# --- end to end: snapshots, the loader, snap verify --------------------------------------------

N = 2500
Y0 = 0x5A5A << 32  # a y value's 8 bytes are easy to find, and unlike any metadata
EXPECTED = [Y0 + i for i in range(N)]


def records() -> Iterator[snap.Batch]:
    """2,500 records: random float32 vectors (barely compressible) and distinctive ids."""
    rng = np.random.default_rng(0)
    for start in range(0, N, 250):
        yield snap.Batch(
            x=rng.random((250, 16), dtype=np.float32),
            y=Y0 + np.arange(start, start + 250, dtype=np.int64),
        )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two snapshots of :func:`records`, compressed (zstd) and not, several shards each."""
    root = tmp_path_factory.mktemp("blocks")
    out = {}
    for codec in ("zstd", "none"):
        path = root / codec
        snap.create(
            records, str(path), workers=0, shard_size="64KiB", batch_rows=50, compression=codec
        )
        out[codec] = path
    return out


@pytest.fixture
def zstd_copy(made: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(made["zstd"], tmp_path / "s"))


@pytest.fixture
def plain_copy(made: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(made["none"], tmp_path / "s"))


def replay(path: Path, **kwargs: Any) -> tuple[list[int], snap.CorruptShardError | None]:
    """The ids delivered in written order, and the CorruptShardError that stopped it, if any."""
    seen: list[int] = []
    try:
        with snap.open(str(path)).loader(batch_size=50, shuffle=False, **kwargs) as loader:
            for batch in loader:
                seen.extend(int(v) for v in batch["y"])
    except snap.CorruptShardError as err:
        return seen, err
    return seen, None


def batch_start(s: snap.Snapshot, shard: int, batch: int) -> int:
    """Index (in written order) of the first record of record batch ``batch`` of ``shard``."""
    before = sum(e.records for e in s.shards[:shard])
    return before + sum(s.shards[shard].batch_sizes()[:batch])


def edit_manifest(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = path / "manifest.json"
    doc = json.loads(manifest.read_text())
    change(doc)
    manifest.write_text(json.dumps(doc, indent=1))


def damage(path: Path, pos: int, mask: int = 0x01) -> None:
    """Flip bits of one byte of the file, and move its mtime on (the clock the kernel stamps
    files with is coarse: a rewrite within the same tick could otherwise look unchanged)."""
    data = bytearray(path.read_bytes())
    data[pos] ^= mask
    mtime = path.stat().st_mtime_ns
    path.write_bytes(bytes(data))
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))


def test_manifest_lists_each_record_batchs_crc(made: dict[str, Path]) -> None:
    """Every shard's entry lists one crc32c per record batch (since format 2): the crc32c of
    the bytes at the block the shard's footer gives for it."""
    for path in made.values():
        doc = json.loads((path / "manifest.json").read_text())
        assert doc["format_version"] == snap.FORMAT_VERSION >= 2
        assert len(doc["shards"]) >= 3
        for entry in doc["shards"]:
            assert len(entry["batch_crc32c"]) == 8 * entry["record_batches"] > 0
            data = (path / entry["path"]).read_bytes()
            blocks = file_blocks(data)
            want = [crc32c.crc32c(data[b.offset : b.offset + b.length]) for b in blocks]
            assert ipc_blocks.decode(entry["batch_crc32c"]) == want
        seen, err = replay(path)
        assert err is None and seen == EXPECTED


@pytest.mark.parametrize(
    ("shard", "batch", "where"),
    [(0, 0, "first"), (1, -1, "middle"), (-1, 2, "last"), (1, 3, "length")],
)
def test_a_damaged_record_batch_is_named(
    zstd_copy: Path, shard: int, batch: int, where: str
) -> None:
    """One flipped byte anywhere in a record batch's block (its first byte, its body, its last
    byte of padding, the metadata length) stops the loader before any of its records is
    delivered, naming the shard and record batch; snap verify reports that shard damaged."""
    s = snap.open(str(zstd_copy))
    shard %= len(s.shards)
    entry = s.shards[shard]
    batch %= entry.record_batches
    victim = zstd_copy / entry.path
    block = file_blocks(victim.read_bytes())[batch]
    offsets = {"first": 0, "middle": block.length // 2, "last": block.length - 1, "length": 5}
    damage(victim, block.offset + offsets[where])
    seen, err = replay(zstd_copy)
    assert err is not None
    assert re.search(f"shard .*{victim.name} is damaged: record batch {batch} has crc32c", str(err))
    assert seen == EXPECTED[: len(seen)] and len(seen) <= batch_start(s, shard, batch)
    report = verify(snap.open(str(zstd_copy)))
    assert [c.path for c in report.damaged] == [entry.path]
    assert "crc32c" in str(report.damaged[0].problem)


def swap_blocks(path: Path, schema: pa.Schema, k: int) -> None:
    """Swap the offsets of the footer's blocks ``k`` and ``k + 1`` (blocks of equal lengths)."""
    data = bytearray(path.read_bytes())
    layout = sh.layout(bytes(data), schema)
    a, b = layout.batches[k], layout.batches[k + 1]
    lengths = {(x.block_metadata_length.value, x.block_body_length.value) for x in (a, b)}
    assert len(lengths) == 1, "the test needs blocks of equal length to swap"
    for mine, theirs in ((a, b), (b, a)):
        pos = mine.block_offset.pos
        data[pos : pos + 8] = struct.pack("<q", theirs.block_offset.value)
    path.write_bytes(bytes(data))


def test_a_footer_that_lies_about_its_blocks_is_caught(plain_copy: Path) -> None:
    """A footer listing two record batches in each other's places is a well-formed Arrow file
    with the right whole-file crc32c: the per-batch checksums still catch it, in the loader
    (before any record of those batches is delivered) and in snap verify."""
    s = snap.open(str(plain_copy))
    shard, k = 1, 2
    entry = s.shards[shard]
    victim = plain_copy / entry.path
    before = pa.ipc.open_file(victim.read_bytes())
    swap_blocks(victim, s.schema, k)
    after = pa.ipc.open_file(victim.read_bytes())
    assert after.get_batch(k).equals(before.get_batch(k + 1))  # the lie is well-formed
    assert after.get_batch(k + 1).equals(before.get_batch(k))
    new_crc = f"{crc32c.crc32c(victim.read_bytes()):08x}"
    assert new_crc != entry.crc32c

    def fix(doc: dict[str, Any]) -> None:
        doc["shards"][shard].update(crc32c=new_crc, bytes=victim.stat().st_size)

    edit_manifest(plain_copy, fix)
    assert snap.open(str(plain_copy)).shards[shard].batch_crc32c == entry.batch_crc32c

    seen, err = replay(plain_copy)
    assert err is not None
    assert re.search(f"{victim.name} is damaged: record batch ({k}|{k + 1}) has crc32c", str(err))
    assert seen == EXPECTED[: len(seen)] and len(seen) <= batch_start(s, shard, k)

    report = verify(snap.open(str(plain_copy)))
    assert [c.path for c in report.damaged] == [entry.path]
    assert f"record batch {k} has crc32c" in str(report.damaged[0].problem)
    run = snap_subprocess("verify", str(plain_copy), "--quiet")
    assert run.returncode == 1, run.stderr
    assert victim.name in run.stdout and f"record batch {k} has crc32c" in run.stdout


@pytest.mark.parametrize("form", ["version 1", "version 2 without batch checksums"])
def test_without_batch_checksums_the_whole_shard_is_checked(plain_copy: Path, form: str) -> None:
    """A format 1 manifest (no ``batch_crc32c``), or a format 2 entry whose writer could not
    place the blocks (""), replays every record; a damaged byte is then caught by the whole
    shard's crc32c, before any record of that shard is delivered."""

    def older(doc: dict[str, Any]) -> None:
        for entry in doc["shards"]:
            if form == "version 1":
                del entry["batch_crc32c"]
            else:
                entry["batch_crc32c"] = ""
        if form == "version 1":
            doc["format_version"] = 1

    edit_manifest(plain_copy, older)
    s = snap.open(str(plain_copy))
    assert all(e.batch_crc32c == "" for e in s.shards)
    seen, err = replay(plain_copy)
    assert err is None and seen == EXPECTED
    shuffled = [int(v) for b in s.loader(batch_size=64, seed=1) for v in b["y"]]
    assert sorted(shuffled) == EXPECTED and shuffled != EXPECTED

    entry = s.shards[1]
    victim = plain_copy / entry.path
    block = file_blocks(victim.read_bytes())[1]
    damage(victim, block.offset + block.length // 2)
    seen, err = replay(plain_copy)
    assert err is not None
    assert re.search(f"shard .*{victim.name} is damaged: crc32c", str(err))
    assert seen == EXPECTED[: len(seen)] and len(seen) <= batch_start(s, 1, 0)
    report = verify(snap.open(str(plain_copy)))
    assert [c.path for c in report.damaged] == [entry.path]


def test_verify_false_skips_the_record_batch_check(plain_copy: Path) -> None:
    """With ``verify=False`` a damaged value in an uncompressed shard reaches the consumer
    (nothing else notices it); the same loader with ``verify=True`` refuses the batch. So it is
    ``verify`` that controls the per-batch check."""
    s = snap.open(str(plain_copy))
    target = batch_start(s, 1, 1) + 7
    entry = s.shards[1]
    victim = plain_copy / entry.path
    data = victim.read_bytes()
    needle = struct.pack("<q", EXPECTED[target])
    assert data.count(needle) == 1
    damage(victim, data.index(needle) + 4, 0xFF)  # the 0x5A byte of the id
    wrong = EXPECTED[target] ^ (0xFF << 32)

    seen, err = replay(plain_copy, verify=False)
    assert err is None
    assert seen == EXPECTED[:target] + [wrong] + EXPECTED[target + 1 :]

    seen, err = replay(plain_copy)
    assert err is not None and "record batch 1 has crc32c" in str(err)
    assert wrong not in seen


def _entry_batches(doc: dict[str, Any]) -> int:
    return int(doc["shards"][0]["record_batches"])


@pytest.mark.parametrize(
    ("what", "bad"),
    [
        ("too short", lambda n: "0" * (8 * n - 1)),
        ("too long", lambda n: "0" * (8 * n + 8)),
        ("one crc", lambda n: "0" * 8),
        ("not hex", lambda n: "g" * (8 * n)),
        ("spaces", lambda n: " " * (8 * n)),
        ("uppercase, one short", lambda n: "ABCDEF01" * n + "A"),  # (uppercase itself is fine)
        ("a number", lambda n: 12345678),
        ("null", lambda n: None),
        ("a list", lambda n: ["00000000"] * n),
    ],
)
def test_malformed_batch_crc32c_is_a_manifest_error(
    made: dict[str, Path], tmp_path: Path, what: str, bad: Callable[[int], Any]
) -> None:
    """A ``batch_crc32c`` that is not 8 hex digits per record batch (or "") makes
    the manifest unreadable, naming the field, before any shard is read."""
    path = Path(shutil.copytree(made["none"], tmp_path / "s"))

    def spoil(doc: dict[str, Any]) -> None:
        doc["shards"][0]["batch_crc32c"] = bad(_entry_batches(doc))

    edit_manifest(path, spoil)
    with pytest.raises(snap.ManifestError, match="batch_crc32c"):
        snap.open(str(path))


@pytest.mark.parametrize("form", ["Batch", "RecordBatch", "Table"])
def test_dictionary_columns_are_stored_decoded(tmp_path: Path, form: str) -> None:
    """Dictionary-encoded columns (a pandas categorical, a pyarrow DictionaryArray), whose
    dictionaries differ from yield to yield and are nested in a list, are written decoded:
    the shards read back (an IPC file holds one dictionary per column, so they once failed
    with 'Unsupported dictionary replacement in IPC file'), every record batch has its own
    checksum, and the loader gives the values."""
    words = ["alpha", "beta", "gamma", "delta"]

    def gen() -> Iterator[Any]:
        for start in range(0, 400, 100):
            idx = pa.array(np.arange(start, start + 100) % 3, pa.int32())
            vocab = pa.array(words[start // 100 % 2 :][:3])  # another dictionary every yield
            d = pa.DictionaryArray.from_arrays(idx, vocab)
            inner = pa.DictionaryArray.from_arrays(pa.array(np.arange(200) % 2, pa.int8()), vocab)
            nested = pa.ListArray.from_arrays(pa.array(np.arange(0, 201, 2, np.int32)), inner)
            y = pa.array(np.arange(start, start + 100, dtype=np.int64))
            if form == "Batch":
                yield snap.Batch(d=d, n=nested, y=y)
            else:
                rb = pa.RecordBatch.from_arrays([d, nested, y], names=["d", "n", "y"])
                yield rb if form == "RecordBatch" else pa.Table.from_batches([rb])

    path = tmp_path / "d"
    snap.create(gen, str(path), workers=0, batch_rows=50)
    s = snap.open(str(path))
    assert s.schema.field("d").type == pa.string()
    assert s.schema.field("n").type == pa.list_(pa.string())
    assert all(e.batch_crc32c for e in s.shards)
    assert verify(s).ok
    got = list(s.loader(batch_size=50, shuffle=False))
    ids = [int(v) for b in got for v in b["y"]]
    assert ids == list(range(400))
    values = [str(v) for b in got for v in b["d"]]
    expected = [words[i // 100 % 2 :][:3][i % 3] for i in range(400)]
    assert values == expected


@pytest.mark.parametrize(
    "start", [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff\x00\x00\x00\x00"], ids=["old-eos", "eos"]
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_block_that_starts_with_an_end_of_stream_marker_is_corrupt(
    plain_copy: Path, start: bytes, shuffle: bool
) -> None:
    """A record batch whose message begins with an end-of-stream marker (a zero length), its
    checksum in the manifest made to match: Arrow's reader raises EOFError on it, which must
    reach the user as CorruptShardError naming the shard and the record batch, not as EOFError
    (found by tests/reliability/test_mutations.py: 'batch 0 continuation -1 -> 0')."""
    s = snap.open(str(plain_copy))
    shard, k = 1, 0
    entry = s.shards[shard]
    victim = plain_copy / entry.path
    data = bytearray(victim.read_bytes())
    block = file_blocks(bytes(data))[k]
    data[block.offset : block.offset + len(start)] = start
    victim.write_bytes(bytes(data))
    crcs = [
        crc32c.crc32c(bytes(data[b.offset : b.offset + b.length])) for b in file_blocks(bytes(data))
    ]

    def fix(doc: dict[str, Any]) -> None:
        doc["shards"][shard].update(
            crc32c=f"{crc32c.crc32c(bytes(data)):08x}",
            batch_crc32c="".join(f"{c:08x}" for c in crcs),
        )

    edit_manifest(plain_copy, fix)
    for verify_flag in (True, False):
        err = None
        try:
            with snap.open(str(plain_copy)).loader(
                batch_size=50, shuffle=shuffle, verify=verify_flag
            ) as loader:
                for _ in loader:
                    pass
        except snap.CorruptShardError as e:
            err = e
        assert err is not None, f"verify={verify_flag}: the damaged block was read"
        assert victim.name in str(err) and f"record batch {k}" in str(err), str(err)


FIELDS = ("block_offset", "block_metadata_length", "block_body_length")


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_the_loader_and_verify_agree_on_every_footer_block_field(
    made: dict[str, Path], tmp_path: Path, codec: str
) -> None:
    """Every field of a footer block (offset, metadata length, body length) of the first,
    a middle and the last record batch of a shard, moved by a byte, by 8 and by 16 either way
    (the manifest's checksums made to match where the footer now places the blocks): the
    loader, shuffled and not, and ``snap verify`` (Arrow's own file reader) either all read
    the snapshot exactly or all call that shard damaged. Arrow requires blocks aligned to 8
    bytes and a message of exactly its block's lengths; the loader used to read some such files
    that verify refused (found by tests/reliability/test_mutations.py: 'batch 0 block
    metaDataLength 768 -> 769')."""
    base = made[codec]
    s = snap.open(str(base))
    shard = 1
    entry = s.shards[shard]
    original = (base / entry.path).read_bytes()
    layout = sh.layout(original, s.schema)
    last = len(layout.batches) - 1
    outcomes: dict[str, int] = {"read": 0, "damaged": 0}
    for b in sorted({0, last // 2, last}):
        for name in FIELDS:
            slot = getattr(layout.batches[b], name)
            for delta in (-16, -8, -1, 1, 8, 16):
                case = tmp_path / f"{b}-{name}-{delta}"
                shutil.copytree(base, case)
                data = bytearray(original)
                sh.put(data, slot.pos, slot.width, slot.value + delta)
                (case / entry.path).write_bytes(bytes(data))
                sh.refresh_entry(case, shard)
                what = f"batch {b} {name} {slot.value} -> {slot.value + delta}"
                report = verify(snap.open(str(case)))
                damaged = [c.path for c in report.damaged]
                for shuffle in (False, True):
                    seen, err = replay_all(case, shuffle)
                    if damaged:
                        assert damaged == [entry.path], f"{what}: verify said {damaged}"
                        assert err is not None, f"{what}: verify said damaged, the loader read"
                        assert Path(entry.path).name in str(err), f"{what}: {err}"
                    else:
                        assert err is None, f"{what}: verify said OK, the loader raised {err}"
                        assert seen == EXPECTED, f"{what}: the loader read other records"
                outcomes["damaged" if damaged else "read"] += 1
    assert outcomes["damaged"] > 0  # the sweep reaches the checks it is about


def replay_all(path: Path, shuffle: bool) -> tuple[list[int], snap.CorruptShardError | None]:
    """The ids delivered (sorted when shuffled), and the CorruptShardError met, if any."""
    seen: list[int] = []
    try:
        with snap.open(str(path)).loader(batch_size=50, shuffle=shuffle, seed=3) as loader:
            for batch in loader:
                seen.extend(int(v) for v in batch["y"])
    except snap.CorruptShardError as err:
        return seen, err
    return (sorted(seen) if shuffle else seen), None
