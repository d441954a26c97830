"""Structure-aware mutations of the record batches in a shard, read through every reader.

Hypothesis draws changes to the fields of an Arrow IPC file that snap wrote (parsed by
:mod:`.shards`): a record batch's length, its field nodes' lengths and null counts, its
buffers' offsets and lengths, the footer's blocks, the message prefixes, the uncompressed
lengths of compressed buffers, bytes inside uncompressed bodies (list and string offsets,
ragged shapes, UTF-8, data), nulls made to pass Arrow's own checks, truncations and appends;
values adversarial (0, -1, 2**31-1, 2**63-1, off by one, ...) or random. The shard's size and
crc32c are then fixed in the manifest, so only structure checks can catch the change; its
record counts are not, so a change of counts must be caught too.

Every reader then runs in a child process (a segfault or a hang fails the test and names
the reader): the loader shuffled and in order, with and without verify, ``head``, and the
torch adapter; and ``python -m snapshot_cli verify`` as a subprocess of its own. Each either
raises CorruptShardError naming the shard, or returns exactly the manifest's columns, types
and record count, and (uncompressed shards) only bytes that are in the shard files. ``snap
verify`` exits 1 naming the shard when the readers raised, 0 when they read.

The children are forked by a server process that has imported torch once (2 s an import,
see :func:`.shards.serve`); ``snap verify`` runs meanwhile. ``pytest -s`` prints how many
cases were tried, caught and read, by codec and by kind of edit.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.manifest import MIN_BATCH_BYTES
from tests.conftest import REPO
from tests.forks import Forks, stop_server
from tests.reliability import shards as sh

CODECS = ("none", "zstd", "lz4")
INPUTS = [0, 1, 2]  # one shard each
BATCH_ROWS = 4  # record batches of 4 records: shard i holds 4 + 4, 4 + 3, 4 + 2 records


def rows(i: int) -> int:
    return 8 - i


RECORDS = sum(rows(i) for i in INPUTS)
KINDS = ("field", "data", "offsets", "shape", "text", "nulls", "blocks", "resize")
HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


@snap.ragged("tokens", "boxes")
def preprocess(i: int) -> Iterator[dict[str, Any]]:
    """Every column kind snap writes, with values whose bytes are unlikely by chance."""
    for k in range(rows(i)):
        n = 10 * i + k
        yield {
            "label": np.int64(0x1F2E3D4C5B6A0000 + n * 0x10305),
            "score": np.float32(n + 0.123456),
            "flag": n % 3 == 0,
            "name": f"name-{n:04d}-é",
            "blob": bytes((n * 37 + j * 11 + 5) % 256 for j in range(n % 5 + 4)),
            "x": np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * n + 0.5,
            "tokens": np.arange(n % 4, dtype=np.int32) + 1000 * n + 7,  # some empty
            "boxes": (np.arange(2 * (n % 3 + 1), dtype=np.int16) + 100 * n + 3).reshape(-1, 2),
        }


@dataclass(frozen=True)
class Base:
    """A pristine snapshot of one codec, with the parsed layout of each shard."""

    codec: str
    root: Path
    paths: tuple[str, ...]
    files: tuple[bytes, ...]
    layouts: tuple[sh.Layout, ...]


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Base]:
    root = tmp_path_factory.mktemp("mutations")
    out = {}
    for codec in CODECS:
        path = root / codec
        snap.create(
            preprocess,
            str(path),
            inputs=INPUTS,
            workers=0,
            inputs_per_task=1,
            compression=codec,
            batch_rows=BATCH_ROWS,
        )
        s = snap.open(str(path))
        paths = tuple(e.path for e in s.shards)
        files = tuple((path / p).read_bytes() for p in paths)
        layouts = tuple(sh.layout(f, s.schema) for f in files)
        out[codec] = Base(codec, path, paths, files, layouts)
    return out


class Prober:
    """The probe server (:func:`.shards.serve`): one forked child per snapshot probed."""

    def __init__(self, forks: Forks) -> None:
        self.forks = forks  # for snap verify
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.reliability.shards import serve; serve()"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def probe(self, path: Path, out: Path) -> int:
        """The child's exit status (minus a signal); its report is in ``out``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"path": str(path), "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], sh.PROBE_SECONDS + 60)
        assert ready, f"the probe server did not answer for {path}"
        line = self.proc.stdout.readline()
        assert line, f"the probe server ended (exit {self.proc.poll()})"
        status: int = json.loads(line)["status"]
        return status

    def close(self) -> None:
        stop_server(self.proc)


@pytest.fixture(scope="module")
def prober(forks: Forks) -> Iterator[Prober]:
    p = Prober(forks)
    yield p
    p.close()


# --- mutations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    what: str
    pos: int
    data: bytes


@dataclass(frozen=True)
class Mutation:
    shard: int
    edits: tuple[Edit, ...]
    kinds: tuple[str, ...]  # of edits (see KINDS), for the tally
    size: int | None = None  # truncate to this many bytes (after the edits)
    tail: bytes = b""  # then append this

    def apply(self, data: bytes) -> bytes:
        out = bytearray(data)
        for e in self.edits:
            out[e.pos : e.pos + len(e.data)] = e.data
        if self.size is not None:
            del out[self.size :]
        return bytes(out) + self.tail


def adversarial(draw: st.DrawFn, current: int, width: int, near: tuple[int, ...] = ()) -> int:
    """An integer for a field of ``width`` bytes holding ``current``: an edge value, a value
    near ``current`` or near a size that matters (``near``), or any value."""
    bits = 8 * width
    edges = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), 2**32 - 1, 2**63 - 1, -(2**63), 2**62, 7]
    return draw(
        st.one_of(
            st.sampled_from(edges),
            st.sampled_from((current, *near)).flatmap(
                lambda v: st.integers(v - 9, v + 9) | st.sampled_from([2 * v, -v, v // 2])
            ),
            st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1),
        )
    )


def packed(value: int, width: int) -> bytes:
    out = bytearray(width)
    sh.put(out, 0, width, value)
    return bytes(out)


def field_edit(draw: st.DrawFn, lay: sh.Layout, batch: sh.Batch) -> Edit:
    """A new value for one field of a record batch's metadata, its block or the footer."""
    slot = draw(st.sampled_from([*batch.slots(), lay.footer_length]))
    near = (lay.size, batch.body_length.value, batch.length.value, lay.footer_start)
    value = adversarial(draw, slot.value, slot.width, near)
    return Edit(f"{slot.name} {slot.value} -> {value}", slot.pos, packed(value, slot.width))


INVALID_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80"]


def body_edit(draw: st.DrawFn, lay: sh.Layout, batch: sh.Batch, target: str) -> Edit:
    """Bytes changed inside one body buffer: ``offsets`` (of a list, string or binary
    column) or ``shape`` (of a ragged n-d column) get an integer, ``text`` (string or binary
    data) bytes or invalid UTF-8, ``data`` (any buffer; compressed ones too) any bytes."""
    chosen = {
        "offsets": lambda b: b.role == "offsets",
        "shape": lambda b: b.column.endswith(".shape.item") and b.role == "data",
        "text": lambda b: pa.types.is_string(b.type) or pa.types.is_binary(b.type),
        "data": lambda b: True,
    }[target]
    buffers = [b for b in batch.buffers if b.length > 0 and chosen(b)]
    buf = draw(st.sampled_from(buffers))
    where = f"batch {batch.index} buffer {buf.column} {buf.role}"
    if target in ("offsets", "shape"):
        i = draw(st.integers(0, buf.length // 4 - 1))
        at = buf.start + 4 * i
        current = int.from_bytes(lay.data[at : at + 4], "little", signed=True)
        ends = [b.length for b in batch.buffers] + [n.length.value for n in batch.nodes]
        value = adversarial(draw, current, 4, tuple(ends))
        return Edit(f"{where} [{i}] {current} -> {value}", at, packed(value, 4))
    if target == "text":
        data = draw(st.sampled_from(INVALID_UTF8) | st.binary(min_size=1, max_size=4))
    else:
        data = draw(st.binary(min_size=1, max_size=8))
    at = draw(st.integers(0, buf.length - 1))
    return Edit(f"{where} bytes at {at} -> {data.hex()}", buf.start + at, data)


def null_edits(draw: st.DrawFn, lay: sh.Layout, batch: sh.Batch) -> list[Edit]:
    """Nulls that Arrow's validation accepts: point a node's validity buffer at bytes of the
    body and set its null count to the zero bits there."""
    node_i = draw(st.integers(0, len(batch.nodes) - 1))
    node = batch.nodes[node_i]
    n = max(1, node.length.value)
    need = (n + 7) // 8
    sources = [b for b in batch.buffers if b.length >= need and b.start + b.length <= lay.size]
    assume(sources)
    src = draw(st.sampled_from(sources))
    bits = np.unpackbits(
        np.frombuffer(lay.data[src.start : src.start + need], np.uint8), bitorder="little"
    )[:n]
    nulls = int(n - bits.sum()) if not batch.compressed else draw(st.integers(0, n))
    validity = next(b for b in batch.buffers if b.column == node.column and b.role == "validity")
    return [
        Edit(
            f"batch {batch.index} node {node.column} null_count -> {nulls}",
            node.null_count.pos,
            packed(nulls, 8),
        ),
        Edit(
            f"batch {batch.index} buffer {node.column} validity -> {src.column} {src.role}",
            validity.offset.pos,
            packed(src.offset.value, 8),
        ),
        Edit(
            f"batch {batch.index} buffer {node.column} validity length -> {src.length}",
            validity.size.pos,
            packed(src.length, 8),
        ),
    ]


def block_edits(draw: st.DrawFn, lay: sh.Layout) -> list[Edit]:
    """The footer's blocks duplicated or swapped: batches read twice, or out of order."""
    a, b = lay.batches[0], lay.batches[-1]
    block_a = lay.data[a.block_offset.pos : a.block_offset.pos + 24]
    block_b = lay.data[b.block_offset.pos : b.block_offset.pos + 24]
    how = draw(st.sampled_from(["swap", "first twice", "last twice"]))
    if how == "swap":
        return [
            Edit("blocks swapped", a.block_offset.pos, block_b),
            Edit("", b.block_offset.pos, block_a),
        ]
    if how == "first twice":
        return [Edit("block 0 read twice", b.block_offset.pos, block_a)]
    return [Edit("last block read twice", a.block_offset.pos, block_b)]


def resize(draw: st.DrawFn, lay: sh.Layout) -> tuple[int | None, bytes, str]:
    """Truncate at a boundary of the format (or anywhere), or append bytes."""
    cuts = [lay.footer_start, lay.size - 1, lay.size - 6, lay.size - 10, 8]
    for b in lay.batches:
        cuts += [b.block_offset.value, b.body_start, b.body_start + b.body_length.value]
    if draw(st.booleans()):
        size = draw(
            st.sampled_from(cuts).flatmap(lambda c: st.integers(c - 8, c + 8))
            | st.integers(0, lay.size - 1)
        )
        # no smaller than a manifest allows (64 bytes a record batch): not a structure check
        size = max(MIN_BATCH_BYTES * len(lay.batches), min(size, lay.size - 1))
        return size, b"", f"truncated to {size} of {lay.size} bytes"
    tail = draw(st.binary(min_size=1, max_size=64) | st.just(lay.data[lay.footer_start :]))
    return None, tail, f"{len(tail)} bytes appended"


@st.composite
def mutations(draw: st.DrawFn, base: Base) -> Mutation:
    shard = draw(st.integers(0, len(base.layouts) - 1))
    lay = base.layouts[shard]
    edits: list[Edit] = []
    kinds = ["field", "field", "data", "nulls", "blocks"]
    if base.codec == "none":  # the body holds the buffers as they are
        kinds += ["offsets", "offsets", "shape", "text"]
    drawn = []
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        batch = draw(st.sampled_from(lay.batches))
        kind = draw(st.sampled_from(kinds))
        drawn.append(kind)
        if kind == "field":
            edits.append(field_edit(draw, lay, batch))
        elif kind == "nulls":
            edits += null_edits(draw, lay, batch)
        elif kind == "blocks":
            edits += block_edits(draw, lay)
        else:
            edits.append(body_edit(draw, lay, batch, kind))
    size, tail = None, b""
    if draw(st.integers(0, 4)) == 0:
        size, tail, what = resize(draw, lay)
        drawn.append("resize")
        note(what)
    for e in edits:
        if e.what:
            note(e.what)
    return Mutation(shard, tuple(edits), tuple(drawn), size, tail)


# --- one case ----------------------------------------------------------------------------


@dataclass
class Tally:
    """Cases tried, caught (every reader raised CorruptShardError and verify exited 1) and
    read (every reader read the snapshot exactly, verify exited 0), by codec and by kind."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, codec: str, kinds: tuple[str, ...], caught: bool) -> None:
        outcome = "caught" if caught else "read"
        for key in (codec, *sorted(set(kinds))):
            self.counts[(key, "cases")] += 1
            self.counts[(key, outcome)] += 1

    def report(self, title: str) -> str:
        def outcomes(key: str) -> str:
            c = {k: self.counts[(key, k)] for k in ("cases", "caught", "read")}
            return f"{c['cases']} cases, {c['caught']} caught, {c['read']} read valid"

        kinds = "\n".join(f"    {k}: {outcomes(k)}" for k in KINDS if self.counts[(k, "cases")])
        codecs = "; ".join(outcomes(c) for c in CODECS if self.counts[(c, "cases")])
        return f"{title}: {codecs}; with an edit of each kind:\n{kinds}"


def probe_snapshot(base: Base, index: int, data: bytes, prober: Prober, work: Path) -> bool:
    """Put ``data`` in place of shard ``index`` (its manifest entry's size and crc32c fixed,
    its counts left), run every reader and snap verify, check what they say; returns whether
    they found the shard damaged."""
    tmp = Path(tempfile.mkdtemp(dir=work))
    try:
        out = sh.copy_snapshot(base.root, tmp / "snap")
        shard = base.paths[index]
        (out / shard).write_bytes(data)
        sh.refresh_entry(out, index)
        # snap verify, forked (:mod:`tests.forks`), runs while the probe does (two cores)
        verify = prober.forks.start(["verify", str(out), "--json"], REPO, dict(os.environ), 120)
        status = prober.probe(out, tmp / "probe.jsonl")
        try:
            verified = verify()
        except subprocess.TimeoutExpired:
            raise AssertionError("snap verify hung (120 s)") from None
        report = (tmp / "probe.jsonl").read_text()
        stderr = (tmp / "probe.jsonl.stderr").read_text(errors="replace")
        caught = check_probe(status, report, stderr, shard, RECORDS)
        check_verify(verified.returncode, verified.stdout, verified.stderr, shard, caught)
        return caught
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_probe(status: int, report: str, stderr: str, shard: str, records: int) -> bool:
    """Every reader raised CorruptShardError naming ``shard`` or read exactly the snapshot's
    columns and records; returns whether any raised."""
    lines = [json.loads(line) for line in report.splitlines() if line.endswith("}")]
    ends = {line["reader"]: line for line in lines if line["event"] == "end"}
    running = [line["reader"] for line in lines if line["reader"] not in ends]
    assert status == 0, (
        f"the probe ended with status {status} while running {running or '(no reader)'}"
        f" (a negative status is a signal: -14 is SIGALRM, a hang)\n{stderr[-3000:]}"
    )
    caught = False
    for name in sh.READERS:
        end = ends.get(name)
        assert end is not None, f"{name}: no report\n{report}\n{stderr[-3000:]}"
        if end["outcome"] == "corrupt":
            assert shard in end["message"], f"{name}: the error does not name {shard}: {end}"
            caught = True
        elif end["outcome"] == "read":
            assert not end["problems"], f"{name} read wrong values: {end['problems']}"
            assert end["records"] == records, f"{name} read {end['records']} of {records}"
        else:
            raise AssertionError(f"{name} raised {end['message']}\n{end.get('traceback')}")
    return caught


def check_verify(code: int, stdout: str, stderr: str, shard: str, caught: bool) -> None:
    assert code in (0, 1), f"snap verify exited {code}\n{stderr[-3000:]}"
    damaged = [d["path"] for d in json.loads(stdout)["damaged"]]
    if caught:
        assert code == 1 and damaged == [shard], f"readers failed; verify said {stdout}"
    else:
        assert code == 0, f"every reader read the shard; verify said {stdout}"


def run_cases(base: Base, prober: Prober, work: Path, examples: int) -> Tally:
    """``examples`` mutations of ``base``'s shards, each probed; returns the outcomes."""
    tally = Tally()

    @settings(max_examples=examples, deadline=None, suppress_health_check=HEALTH)
    @given(mutation=mutations(base))
    def case(mutation: Mutation) -> None:
        original = base.files[mutation.shard]
        mutated = mutation.apply(original)
        assume(mutated != original)
        caught = probe_snapshot(base, mutation.shard, mutated, prober, work)
        tally.add(base.codec, mutation.kinds, caught)

    case()
    return tally


def test_the_layout_is_the_one_pyarrow_reads(bases: dict[str, Base]) -> None:
    """The hand-parsed fields are where pyarrow finds them: lengths, null counts, buffers."""
    for base in bases.values():
        for i, data, lay in zip(INPUTS, base.files, base.layouts, strict=True):
            reader = pa.ipc.open_file(pa.py_buffer(data))
            assert [b.length.value for b in lay.batches] == [BATCH_ROWS, rows(i) - BATCH_ROWS]
            assert reader.num_record_batches == 2
            for b in lay.batches:
                rb = reader.get_batch(b.index)
                assert b.length.value == rb.num_rows
                assert b.compressed == (base.codec != "none")
                assert b.continuation.value == -1
                assert b.block_metadata_length.value == b.metadata_length.value + 8
                assert b.block_body_length.value == b.body_length.value
                codec = [1] if base.codec == "zstd" else []  # lz4 (0) is the default: not stored
                assert [x.value for x in b.header] == [4, 3, *codec]  # V5, RecordBatch
                arrays = list(flat_arrays(rb))
                assert [n.length.value for n in b.nodes] == [len(a) for a in arrays]
                assert all(n.null_count.value == 0 for n in b.nodes)
                if not b.compressed:
                    got = [data[x.start : x.start + x.length] for x in b.buffers if x.length]
                    want = [buf.to_pybytes() for a in arrays for buf in own_buffers(a) if buf]
                    assert [g[: len(w)] for g, w in zip(got, want, strict=True)] == want


def flat_arrays(rb: pa.RecordBatch) -> Iterator[pa.Array]:
    """Every array of a record batch, parents before children (the order of its nodes)."""

    def walk(a: pa.Array) -> Iterator[pa.Array]:
        if isinstance(a, pa.ExtensionArray):
            a = a.storage
        yield a
        if isinstance(a, (pa.ListArray, pa.FixedSizeListArray)):
            yield from walk(a.values)
        elif isinstance(a, pa.StructArray):
            for i in range(a.type.num_fields):
                yield from walk(a.field(i))

    for column in rb.columns:
        yield from walk(column)


def own_buffers(a: pa.Array) -> list[pa.Buffer | None]:
    """The buffers of ``a`` itself, not of its children."""
    return a.buffers()[: len(a.buffers()) - sum(len(c) for c in child_buffers(a))]


def child_buffers(a: pa.Array) -> list[list[pa.Buffer | None]]:
    if isinstance(a, (pa.ListArray, pa.FixedSizeListArray)):
        return [a.values.buffers()]
    if isinstance(a, pa.StructArray):
        return [a.field(i).buffers() for i in range(a.type.num_fields)]
    return []


def test_the_pristine_snapshots_read_in_every_reader(
    bases: dict[str, Base], prober: Prober, tmp_path: Path
) -> None:
    """The checks pass on what snap wrote, so a case counted as caught was caught."""
    for base in bases.values():
        assert not probe_snapshot(base, 0, base.files[0], prober, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_mutated_record_batches_are_caught_or_read_exactly(
    bases: dict[str, Base], prober: Prober, tmp_path_factory: pytest.TempPathFactory, codec: str
) -> None:
    # 25 mutations a codec, new ones every run (a second test drew 15 more beside these:
    # 78 s of the suite's worker time, in a suite near its 20-minute limit)
    tally = run_cases(bases[codec], prober, tmp_path_factory.mktemp("cases"), examples=25)
    print("\n" + tally.report(f"{codec}: mutations"))
    assert tally.counts[(codec, "caught")] > 0
