"""The compiled record batch decode (``snapshot_cli/_decode.c``): a record batch checked,
decompressed and put in its slots in one call, equal to the step-by-step path it replaces."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import _decode, ipc_layout
from snapshot_cli.readers import direct, procs


def test_the_system_codecs_and_the_crc_instruction_are_found_here() -> None:
    """This suite runs on Linux x86-64 (Debian and Ubuntu install liblz4 and libzstd with
    apt itself): the one-call path must be the one tested, not the fallback."""
    assert sys.platform.startswith("linux")
    assert _decode.HW_CRC and _decode.LZ4 and _decode.ZSTD


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70_000), st.integers(0, 9), st.integers(0, 2**32 - 1))
def test_crc32c_is_the_crc32c_packages(data: bytes, skip: int, start: int) -> None:
    """Any length (the three-stream blocks of 8 KiB and 256 bytes, and the tail), any
    alignment, continuing any crc."""
    part = data[skip:]
    assert _decode.crc32c(part) == crc32c.crc32c(part)
    assert _decode.crc32c(part, start) == crc32c.crc32c(part, start)


def _message(columns: dict[str, np.ndarray], codec: str | None) -> tuple[bytes, Any, Any]:
    """A record batch of these (n, width) uint8 columns, as Arrow writes it → (its message,
    its layout, the placement of its columns)."""
    arrays = [
        pa.ExtensionArray.from_storage(
            pa.fixed_shape_tensor(pa.uint8(), [v.shape[1]]),
            pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1]),
        )
        for v in columns.values()
    ]
    batch = pa.record_batch(arrays, names=list(columns))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(
        sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=codec)
    ) as w:
        w.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    reader = pa.BufferReader(data)
    pa.ipc.read_message(reader)
    start = reader.tell()
    pa.ipc.read_message(reader)
    message = data[start : reader.tell()]
    layout = ipc_layout.batch_layout(message[: ipc_layout.metadata_size(message[:8])], len(message))
    placement = direct.Placement.of(batch.schema, list(columns))
    assert placement is not None
    return message, layout, placement


def _job(message: Any, layout: Any, where: Any, dests: Any, slots: Any, span: Any, crc: int) -> Any:
    job = direct.slot_job(message, layout, where, dests, slots, span, crc)
    assert job is not None
    return job.args


def _one(message: Any, layout: Any, where: Any, dests: Any, slots: Any, span: Any, crc: int) -> int:
    """One record batch's part through the compiled decode (DecompressError where damaged)."""
    job = direct.slot_job(message, layout, where, dests, slots, span, crc)
    return -2 if job is None else int(_decode.decode(*job.args))


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from([None, "lz4", "zstd"]),
    st.lists(st.sampled_from([1, 3, 4, 8, 32, 100]), min_size=1, max_size=3),
    st.integers(1, 300),
    st.data(),
)
def test_decode_puts_each_record_in_its_slot(
    codec: str | None, widths: list[int], rows: int, data: st.DataObject
) -> None:
    """Any codec, widths (the fixed ones and others), records [start, stop) of the batch, to
    any slots of a window with spare rows: what numpy's fancy assignment does, and the
    message's crc32c returned when asked for."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    smooth = data.draw(st.booleans())  # compressible, or not (then stored plain: size -1)
    columns = {}
    for k, w in enumerate(widths):
        v = rng.integers(0, 256, (rows, w), dtype=np.uint8)
        columns[f"c{k}"] = (v // 64 if smooth else v).astype(np.uint8)
    message, layout, placement = _message(columns, codec)
    start = data.draw(st.integers(0, rows))
    stop = data.draw(st.integers(start, rows))
    spare = data.draw(st.integers(0, 20))
    slots = rng.permutation(rows + spare)[: stop - start].astype(np.int64)
    dests = {
        c: (np.zeros((rows + spare, v.shape[1]), np.uint8), v.shape[1]) for c, v in columns.items()
    }
    where = direct.regions(layout, placement, rows)
    expected = crc32c.crc32c(message)
    unchecked = {c: (np.zeros_like(d), w) for c, (d, w) in dests.items()}
    span = (start, stop, rows)
    jobs = [
        _job(message, layout, where, dests, slots, span, expected),
        _job(message, layout, where, unchecked, slots, span, -1),
    ]
    assert direct.decode_many(jobs) == [expected, -1]
    for c, v in columns.items():
        want = np.zeros_like(dests[c][0])
        want[slots] = v[start:stop]
        assert np.array_equal(dests[c][0], want), c
        assert np.array_equal(unchecked[c][0], want), c
    again = {c: (np.zeros_like(d), w) for c, (d, w) in dests.items()}
    assert _one(message, layout, where, again, slots, span, expected) == expected
    assert all(np.array_equal(again[c][0], dests[c][0]) for c in columns)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([None, "lz4", "zstd"]),
    st.lists(st.sampled_from([1, 3, 8, 64, 4096]), min_size=1, max_size=3),
    st.integers(1, 200),
    st.integers(0, 30),
    st.integers(0, 30),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_a_whole_record_batch_to_consecutive_rows_writes_only_its_rows(
    codec: str | None,
    widths: list[int],
    rows: int,
    before: int,
    after: int,
    smooth: bool,
    seed: int,
) -> None:
    """Kept in order (every record, to consecutive rows: a column that decompresses to
    exactly its records' bytes goes straight into them, else through a scratch buffer): the
    records land in their rows and not one byte around them changes, also where Arrow padded
    the column's buffer past its records (widths 1 and 3), whose padding must not reach the
    next rows (another thread may be writing the next record batch there)."""
    rng = np.random.default_rng(seed)
    columns = {}
    for k, w in enumerate(widths):
        v = rng.integers(0, 256, (rows, w), dtype=np.uint8)
        columns[f"c{k}"] = (v // 64 if smooth else v).astype(np.uint8)
    message, layout, placement = _message(columns, codec)
    where = direct.regions(layout, placement, rows)
    dests = {
        c: (np.full((before + rows + after, v.shape[1]), 0xAB, np.uint8), v.shape[1])
        for c, v in columns.items()
    }
    slots = np.arange(before, before + rows, dtype=np.int64)
    expected = crc32c.crc32c(message)
    assert _one(message, layout, where, dests, slots, (0, rows, rows), expected) == expected
    for c, v in columns.items():
        got = dests[c][0]
        assert np.array_equal(got[before : before + rows], v), c
        assert (got[:before] == 0xAB).all() and (got[before + rows :] == 0xAB).all(), c
    # a buffer longer than the records read from it (up to 63 bytes, as padding may be)
    short = rows - 1 if rows > 1 and max(widths) < 64 else rows
    for d, _ in dests.values():
        d[:] = 0xAB
    span = (0, short, short)
    assert _one(message, layout, where, dests, slots[:short], span, -1) == -1
    for c, v in columns.items():
        got = dests[c][0]
        assert np.array_equal(got[before : before + short], v[:short]), c
        assert (got[:before] == 0xAB).all() and (got[before + short :] == 0xAB).all(), c


@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
def test_decode_writes_nothing_when_the_checksum_differs(codec: str | None) -> None:
    columns = {"x": (np.arange(400) % 7).astype(np.uint8).reshape(100, 4)}
    message, layout, placement = _message(columns, codec)
    dests = {"x": (np.zeros((100, 4), np.uint8), 4)}
    where = direct.regions(layout, placement, 100)
    slots = np.arange(100, dtype=np.int64)
    right = crc32c.crc32c(message)
    assert _one(message, layout, where, dests, slots, (0, 100, 100), right ^ 1) == right
    assert not dests["x"][0].any()


_BIG = 16 << 20  # a window from which large records are written past the caches


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1024, 1088, 12288, 8, 1000, 3072]), st.integers(0, 700)),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 40),
    st.data(),
)
def test_large_uncompressed_records_to_a_large_window_are_checked_and_put(
    columns: list[tuple[int, int]], rows: int, data: st.DataObject
) -> None:
    """An uncompressed record batch's records bound for a large window (large ones written
    past the caches): the crc32c is the whole message's, in any layout (columns in any order,
    at any offset, overlapping as no writer would make them, records [start, stop) of the
    batch), and every slot of every column holds what numpy's assignment puts there. A
    wrong checksum returns the message's own (the caller raises) and writes nothing."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    length = sum(w * rows + gap for w, gap in columns) + 64
    message = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
    start = data.draw(st.integers(0, rows))
    stop = data.draw(st.integers(start, rows))
    slots = data.draw(st.sampled_from(["shuffled", "ordered"]))
    args, wants = [], []
    for width, _ in columns:
        begin = data.draw(st.integers(0, length - width * rows))  # may overlap another
        capacity = max(rows, _BIG // width + 1)
        dest = np.zeros((capacity, width), np.uint8)
        values = np.frombuffer(message, np.uint8, width * rows, begin).reshape(rows, width)
        args.append((begin, width * rows, dest, width))
        wants.append(values[start:stop])
    to = np.arange(stop - start, dtype=np.int64)
    if slots == "shuffled":
        to = rng.choice(args[0][2].shape[0] if len(args) == 1 else rows, stop - start, False)
        to = to.astype(np.int64)
    right = crc32c.crc32c(message)
    assert _decode.decode(message, -1, args, to, start, stop, rows, right) == right
    for (_, _, dest, width), want in zip(args, wants, strict=True):
        assert np.array_equal(dest[to], want), width
        assert not np.delete(dest, to, axis=0).any(), width
    for _, _, dest, _ in args:
        dest[:] = 0
    assert _decode.decode(message, -1, args, to, start, stop, rows, right ^ 1) == right
    assert not any(dest.any() for _, _, dest, _ in args)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_damaged_compressed_buffer_is_an_arrow_error_naming_its_column(codec: str) -> None:
    """Unchecked (verify=False), a compressed stream that is damaged is the decompressor's
    error, as Arrow's decoder would raise it: never a crash or a silent short write."""
    columns = {"x": (np.arange(4000) % 5).astype(np.uint8).reshape(1000, 4)}
    message, layout, placement = _message(columns, codec)
    where = direct.regions(layout, placement, 1000)
    begin, length = where["x"]
    assert int.from_bytes(message[begin : begin + 8], "little") == 4000  # compressed
    damaged = bytearray(message)
    damaged[begin + 8 : begin + length] = bytes(length - 8)  # the stream zeroed
    dests = {"x": (np.zeros((1000, 4), np.uint8), 4)}
    slots = np.arange(1000, dtype=np.int64)
    span = (0, 1000, 1000)
    with pytest.raises(_decode.DecompressError, match="column 0 cannot be decompressed"):
        _one(bytes(damaged), layout, where, dests, slots, span, -1)
    good = {"x": (np.zeros((1000, 4), np.uint8), 4)}
    jobs = [
        _job(bytes(damaged), layout, where, dests, slots, span, -1),
        _job(message, layout, where, good, slots, span, -1),
    ]
    got = direct.decode_many(jobs)  # the damaged one said, the other one done
    assert isinstance(got[0], str) and got[0].startswith("column 0 cannot be decompressed")
    assert got[1] == -1 and np.array_equal(good["x"][0], columns["x"])
    truncated = bytearray(message)
    truncated[begin : begin + 8] = (4000 + 64).to_bytes(8, "little")  # not this column's size
    assert _one(bytes(truncated), layout, where, dests, slots, span, -1) == -2


def test_decode_refuses_what_it_cannot_place_and_writes_nothing() -> None:
    columns = {"a": np.ones((10, 4), np.uint8), "b": np.full((10, 8), 2, np.uint8)}
    message, layout, placement = _message(columns, None)
    where = direct.regions(layout, placement, 10)
    good, dest = np.zeros((10, 4), np.uint8), np.zeros((10, 8), np.uint8)
    dests = {"a": (good, 4), "b": (dest, 8)}
    slots = np.arange(10, dtype=np.int64)
    span = (0, 10, 10)
    outside = {**where, "b": (len(message) - 8, 80)}  # past the message's end
    assert _one(message, layout, outside, dests, slots, span, -1) == -2
    short = {**where, "b": (where["b"][0], 79)}  # a buffer too short for its records
    assert _one(message, layout, short, dests, slots, span, -1) == -2
    with pytest.raises(IndexError, match="column 0: slot 10 of 10"):
        _one(message, layout, where, dests, slots + 1, span, -1)
    with pytest.raises(IndexError, match="slot -1"):
        _one(message, layout, where, dests, slots - 1, span, -1)
    assert not good.any() and not dest.any()
    with pytest.raises(TypeError, match="slots must be an aligned buffer of int64"):
        _decode.decode(message, -1, [(0, 8, good, 4)], slots.astype(np.int32), 0, 10, 10, -1)
    with pytest.raises(ValueError, match=r"records \[3, 2\) of 10"):
        _decode.decode(message, -1, [(0, 8, good, 4)], slots, 3, 2, 10, -1)
    with pytest.raises(ValueError, match="1 slots for 10 records"):
        _decode.decode(message, -1, [(0, 80, good, 4)], slots[:1], 0, 10, 10, -1)
    with pytest.raises(ValueError, match="codec must be"):
        _decode.decode(message, 2, [], slots, 0, 10, 10, -1)


def _records() -> Any:
    rng = np.random.default_rng(3)
    for start in range(0, 3000, 300):
        ids = np.arange(start, start + 300)
        yield snap.Batch(
            id=ids,
            image=(rng.integers(0, 4, (300, 3, 20, 20)) * 60).astype(np.uint8),  # 1,200 bytes
            rgb=np.stack([ids % 256] * 3, axis=1).astype(np.uint8),  # 3 bytes: no fixed loop
            f=(ids * 0.25).astype(np.float32),
        )


@pytest.fixture(scope="module", params=["zstd", "lz4", "none"])
def made(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("dec") / request.param
    snap.create(_records, str(out), workers=0, shard_size="200KiB", batch_rows=100,
                compression=request.param)  # fmt: skip
    return str(out)


def _epochs(path: str, verify: bool, **options: Any) -> list[list[dict[str, np.ndarray]]]:
    with snap.open(path).loader(64, shuffle=True, seed=7, verify=verify, shuffle_buffer=3000,
                                **options) as loader:  # fmt: skip
        return [[{k: v.copy() for k, v in b.items()} for b in loader] for _ in range(2)]


@pytest.mark.parametrize("verify", [True, False])
def test_the_loader_decodes_in_one_call_and_its_batches_are_the_same(
    made: str, verify: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two shuffled epochs: the record batches of slot windows go through the one-call path
    (counted), in groups, and every batch equals the one the step-by-step path (decode, then
    scatter) gives, record for record."""
    calls: list[tuple[int, int, int]] = []
    sizes: list[int] = []
    real = direct.decode_many

    def counted(jobs: list[tuple[Any, ...]]) -> list[int | str]:
        calls.extend(job[4:7] for job in jobs)  # start, stop, rows
        sizes.append(len(jobs))
        return real(jobs)

    monkeypatch.setattr(direct, "decode_many", counted)
    fused = _epochs(made, verify)
    assert calls, "no record batch was decoded in one call"
    assert any(start > 0 or stop < rows for start, stop, rows in calls)  # parts of batches
    assert any(start == 0 and stop == rows for start, stop, rows in calls)  # and whole ones
    assert max(sizes) > 1  # record batches in groups, one call each
    monkeypatch.setattr(direct, "AVAILABLE", False)
    stepwise = _epochs(made, verify)
    assert [len(e) for e in fused] == [len(e) for e in stepwise]
    for a_epoch, b_epoch in zip(fused, stepwise, strict=True):
        for a, b in zip(a_epoch, b_epoch, strict=True):
            assert a.keys() == b.keys()
            assert all(np.array_equal(a[k], b[k]) for k in a)
    ids = np.sort(np.concatenate([b["id"] for b in fused[0]]))
    assert np.array_equal(ids, np.arange(3000))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_damaged_compressed_shard_unchecked_names_its_shard(tmp_path: Path, codec: str) -> None:
    """verify=False and a compressed stream zeroed in a shard: the loader's error names the
    shard and the record batch; nothing crashes."""
    out = tmp_path / codec
    snap.create(_records, str(out), workers=0, shard_size="200KiB", batch_rows=100,
                compression=codec)  # fmt: skip
    s = snap.open(str(out))
    victim = Path(out) / s.shards[1].path
    data = bytearray(victim.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = bytes(2000)
    victim.write_bytes(bytes(data))
    for shuffle in (True, False):  # (kept in order: decompressed straight into the rows)
        with pytest.raises(snap.SnapError, match=f"shard .*{victim.name}.* record batch"):
            for _ in s.loader(64, shuffle=shuffle, verify=False):
                pass
        with pytest.raises(snap.CorruptShardError, match=f"{victim.name} is damaged"):
            for _ in s.loader(64, shuffle=shuffle):
                pass


def test_decode_processes_take_the_same_path(made: str) -> None:
    """Decode processes (started first, so that they decode every window) write the same
    batches as threads."""
    assert len(procs.pool().wait_ready(1)) >= 1
    threads = _epochs(made, True)
    with snap.open(made).loader(
        64, shuffle=True, seed=7, shuffle_buffer=3000, processes=1
    ) as loader:
        in_processes = [[{k: v.copy() for k, v in b.items()} for b in loader] for _ in range(2)]
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0
    for a_epoch, b_epoch in zip(threads, in_processes, strict=True):
        for a, b in zip(a_epoch, b_epoch, strict=True):
            assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("missing", ["HW_CRC", "LZ4", "ZSTD"])
def test_without_a_library_or_the_crc_instruction_the_batches_are_the_same(
    made: str, missing: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A machine without liblz4, libzstd or the crc32c instruction decodes step by step
    where it must (a checksum to compute, that codec), in one call elsewhere: the batches are
    the same either way. (A copy of the snapshot: its record batches not checked yet.)"""
    want = _epochs(made, True)
    codec = Path(made).name  # the fixture's snapshot is named after its codec
    made = str(shutil.copytree(made, tmp_path / "copy"))
    jobs: list[tuple[Any, ...]] = []
    real = direct.decode_many
    monkeypatch.setattr(direct, "decode_many", lambda js: jobs.extend(js) or real(js))
    monkeypatch.setattr(_decode, missing, False)
    got = _epochs(made, True)
    for a_epoch, b_epoch in zip(got, want, strict=True):
        assert len(a_epoch) == len(b_epoch)
        for a, b in zip(a_epoch, b_epoch, strict=True):
            assert all(np.array_equal(a[k], b[k]) for k in a)
    codecs = {job[1] for job in jobs}
    if missing == "HW_CRC":  # none checked in the compiled call (a 2nd epoch: some decoded)
        assert all(job[7] == -1 for job in jobs)
        assert jobs or codec == "none"  # whose 2nd epoch gathers
    else:
        assert (0 if missing == "LZ4" else 1) not in codecs


def test_a_job_is_finished_by_its_own_reader_even_once_its_shard_was_closed(made: str) -> None:
    """A group's jobs are finished after the compiled call; a shard the open set let go of
    meanwhile is not opened again for that (its reader made the job and finishes it)."""
    loader = snap.open(made).loader(64, shuffle=True, seed=7)
    readers = loader._context.readers
    blocks = loader._context.blocks
    rows = int(blocks.rows[0])
    dests = {c: (np.zeros((rows, w), np.uint8), w) for c, w in _widths(made).items()}
    slots = np.arange(rows, dtype=np.int64)
    shard, batch = int(blocks.shard[0]), int(blocks.batch[0])
    job = readers.slot_job(shard, batch, dests, slots, (0, rows, rows))
    assert job is not None and job.reader is readers.reader(shard)
    readers.close()  # every shard let go of
    (result,) = direct.decode_many([job.args])
    assert readers.slot_done(shard, job, result)
    assert not readers._open  # nothing opened again
    loader.close()


def _widths(path: str) -> dict[str, int]:
    """Each column's bytes per record in the ``made`` snapshots."""
    batch = next(iter(snap.open(path).loader(1, shuffle=False)))
    return {c: v[0].nbytes for c, v in batch.items()}
