"""Helpers for tests that damage shards on purpose: rewrite a shard and fix its manifest entry
(size, crc32c) so that only structure checks can catch the damage, and find the fields of an
Arrow IPC file (the footer's blocks, each record batch's metadata and body buffers) by parsing
its flatbuffers by hand, so that a test can change one of them and nothing else.

Arrow IPC file format (https://arrow.apache.org/docs/format/Columnar.html#ipc-file-format)::

    "ARROW1" 00 00 | schema message | record batch messages | EOS | footer | int32 | "ARROW1"
    message = ffffffff | int32 metadata length | flatbuffer Message (padded to 8) | body

``Message`` {version: short, header_type: ubyte, header: RecordBatch, bodyLength: long},
``RecordBatch`` {length: long, nodes: [FieldNode {length, null_count: long}], buffers:
[Buffer {offset, length: long}], compression}, ``Footer`` {version, schema, dictionaries,
recordBatches: [Block {offset: long, metaDataLength: int, (pad), bodyLength: long}]}.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

import snapshot_cli as snap
from snapshot_cli import ipc_blocks
from snapshot_cli import schema as schema_mod
from snapshot_cli.readers.checksum import crc32c_file

MAGIC = b"ARROW1"


def copy_snapshot(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def load_manifest(out: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return manifest


def block_crcs(data: bytes, old: str) -> str:
    """The checksum of each record batch where the (possibly mutated) footer places it; the
    manifest's old ones where the footer cannot be parsed (the reader must then say so)."""
    try:
        n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
        footer = data[len(data) - ipc_blocks.TAIL - n : len(data) - ipc_blocks.TAIL]
        blocks = ipc_blocks.record_batch_blocks(footer, len(data))
    except (ipc_blocks.FooterError, struct.error):
        return old
    return ipc_blocks.encode([crc32c.crc32c(data[b.offset : b.offset + b.length]) for b in blocks])


def refresh_entry(out: Path, index: int, **counts: Any) -> str:
    """Set shard ``index``'s manifest entry to the file's size and crc32c (and ``counts``:
    records, record_batches, batch_rows), recompute the totals, in ``manifest.json`` and its
    copy in ``_versions/`` (as a writer of such a shard would commit both: ``snap verify``
    names a manifest edited after its commit); returns the shard's path."""
    manifest = load_manifest(out)
    entry = manifest["shards"][index]
    path = out / entry["path"]
    entry.update(bytes=path.stat().st_size, crc32c=crc32c_file(str(path)), **counts)
    entry["batch_crc32c"] = block_crcs(path.read_bytes(), entry.get("batch_crc32c", ""))
    totals = manifest["totals"]
    for key in ("records", "record_batches", "bytes"):
        totals[key] = sum(s[key] for s in manifest["shards"])
    (out / "manifest.json").write_text(json.dumps(manifest))
    version = (manifest.get("history") or {}).get("version")
    copy = out / "_versions" / f"v{version:08d}.json" if isinstance(version, int) else None
    if copy is not None and copy.exists():
        copy.write_text(json.dumps(manifest))
    return str(entry["path"])


# --- the flatbuffers of an Arrow IPC file ------------------------------------------------


class _Table:
    """A flatbuffer table at absolute position ``pos`` of ``buf``."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vtable_size = struct.unpack_from("<H", buf, self.vtable)[0]

    def field(self, i: int) -> int | None:
        """Absolute position of field ``i``, or None where it is absent (default value)."""
        entry = 4 + 2 * i
        if entry + 2 > self.vtable_size:
            return None
        offset = struct.unpack_from("<H", self.buf, self.vtable + entry)[0]
        return self.pos + offset if offset else None

    def scalar(self, i: int, fmt: str) -> int:
        pos = self.field(i)
        return 0 if pos is None else int(struct.unpack_from(fmt, self.buf, pos)[0])

    def table(self, i: int) -> _Table | None:
        pos = self.field(i)
        return None if pos is None else _Table(self.buf, pos + _u32(self.buf, pos))

    def vector(self, i: int) -> tuple[int, int]:
        """(position of the first element, number of elements) of a vector field."""
        pos = self.field(i)
        if pos is None:
            return 0, 0
        start = pos + _u32(self.buf, pos)
        return start + 4, _u32(self.buf, start)


def _u32(buf: bytes, pos: int) -> int:
    return int(struct.unpack_from("<I", buf, pos)[0])


def _root(buf: bytes, start: int) -> _Table:
    return _Table(buf, start + _u32(buf, start))


@dataclass(frozen=True)
class Slot:
    """An integer field of the file: where it is, its width in bytes and its value."""

    name: str
    pos: int
    width: int
    value: int


@dataclass(frozen=True)
class Buffer:
    """One body buffer of a record batch, as a region of the file."""

    column: str  # field path, e.g. "boxes.shape.item"
    role: str  # "validity", "offsets" or "data"
    type: pa.DataType  # of the array the buffer belongs to
    start: int
    length: int
    offset: Slot
    size: Slot
    prefix: Slot | None  # compressed: the int64 uncompressed length the buffer starts with


@dataclass(frozen=True)
class Node:
    column: str
    length: Slot
    null_count: Slot


@dataclass(frozen=True)
class Batch:
    """A record batch: its footer block, its message's fields and its body."""

    index: int
    block_offset: Slot
    block_metadata_length: Slot
    block_body_length: Slot
    continuation: Slot
    metadata_length: Slot
    body_length: Slot
    length: Slot
    nodes: tuple[Node, ...]
    buffers: tuple[Buffer, ...]
    body_start: int
    compressed: bool
    header: tuple[Slot, ...]  # the message's version and header type, the codec if stored

    def slots(self) -> Iterator[Slot]:
        """Every integer field of the record batch, in the footer, message and metadata."""
        yield from (self.block_offset, self.block_metadata_length, self.block_body_length)
        yield from (self.continuation, self.metadata_length, self.body_length, self.length)
        yield from self.header
        for node in self.nodes:
            yield from (node.length, node.null_count)
        for buf in self.buffers:
            yield from (buf.offset, buf.size)
            if buf.prefix is not None:
                yield buf.prefix


@dataclass(frozen=True)
class Layout:
    data: bytes = field(repr=False)
    size: int
    footer_start: int
    footer_length: Slot
    batches: tuple[Batch, ...]


def _slot(buf: bytes, name: str, pos: int, width: int) -> Slot:
    return Slot(name, pos, width, int.from_bytes(buf[pos : pos + width], "little", signed=True))


def _columns(schema: pa.Schema) -> Iterator[tuple[str, pa.DataType, tuple[str, ...]]]:
    """(field path, type, buffer roles) of every node of a record batch, in the order of its
    nodes and buffers (depth first, a parent before its children)."""

    def walk(path: str, t: pa.DataType) -> Iterator[tuple[str, pa.DataType, tuple[str, ...]]]:
        if isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        if pa.types.is_string(t) or pa.types.is_binary(t):
            yield path, t, ("validity", "offsets", "data")
        elif pa.types.is_list(t):
            yield path, t, ("validity", "offsets")
            yield from walk(f"{path}.{t.value_field.name}", t.value_type)
        elif pa.types.is_fixed_size_list(t):
            yield path, t, ("validity",)
            yield from walk(f"{path}.{t.value_field.name}", t.value_type)
        elif pa.types.is_struct(t):
            yield path, t, ("validity",)
            for child in t:
                yield from walk(f"{path}.{child.name}", child.type)
        else:
            yield path, t, ("validity", "data")

    for f in schema:
        yield from walk(f.name, f.type)


def layout(data: bytes, schema: pa.Schema) -> Layout:
    """Where the footer's blocks and every record batch's fields and buffers are in ``data``,
    an Arrow IPC file of ``schema`` written by snap."""
    if data[:6] != MAGIC or data[-6:] != MAGIC:
        raise ValueError("not an Arrow IPC file")
    footer_length = _slot(data, "footer length", len(data) - 10, 4)
    footer_start = len(data) - 10 - footer_length.value
    footer = _root(data, footer_start)
    first, count = footer.vector(3)  # recordBatches
    columns = list(_columns(schema))
    batches = []
    for b in range(count):
        block = first + 24 * b
        offset = _slot(data, f"batch {b} block offset", block, 8)
        meta_len = _slot(data, f"batch {b} block metaDataLength", block + 8, 4)
        body_len = _slot(data, f"batch {b} block bodyLength", block + 16, 8)
        pos = offset.value
        message = _root(data, pos + 8)
        header = message.table(2)
        body_field = message.field(3)
        if message.scalar(1, "<B") != 3 or header is None or body_field is None:
            raise ValueError(f"block {b} is not a record batch message")
        length_field = header.field(0)
        if length_field is None:
            raise ValueError(f"record batch {b} has no length field")
        body_start = pos + meta_len.value
        compressed = header.table(3) is not None
        node_start, node_count = header.vector(1)
        buf_start, buf_count = header.vector(2)
        if node_count != len(columns) or buf_count != sum(len(c[2]) for c in columns):
            raise ValueError(f"record batch {b} does not match the schema's layout")
        nodes, buffers = [], []
        k = 0
        for i, (path, t, roles) in enumerate(columns):
            at = node_start + 16 * i
            nodes.append(
                Node(
                    path,
                    _slot(data, f"batch {b} node {path} length", at, 8),
                    _slot(data, f"batch {b} node {path} null_count", at + 8, 8),
                )
            )
            for role in roles:
                at = buf_start + 16 * k
                where = f"batch {b} buffer {path} {role}"
                off = _slot(data, f"{where} offset", at, 8)
                size = _slot(data, f"{where} length", at + 8, 8)
                start = body_start + off.value
                prefix = (
                    _slot(data, f"{where} uncompressed length", start, 8)
                    if compressed and size.value >= 8
                    else None
                )
                buffers.append(Buffer(path, role, t, start, size.value, off, size, prefix))
                k += 1
        batches.append(
            Batch(
                index=b,
                block_offset=offset,
                block_metadata_length=meta_len,
                block_body_length=body_len,
                continuation=_slot(data, f"batch {b} continuation", pos, 4),
                metadata_length=_slot(data, f"batch {b} metadata length", pos + 4, 4),
                body_length=_slot(data, f"batch {b} message bodyLength", body_field, 8),
                length=_slot(data, f"batch {b} length", length_field, 8),
                nodes=tuple(nodes),
                buffers=tuple(buffers),
                body_start=body_start,
                compressed=compressed,
                header=tuple(_small_slots(data, b, message, header)),
            )
        )
    return Layout(data, len(data), footer_start, footer_length, tuple(batches))


def _small_slots(data: bytes, b: int, message: _Table, header: _Table) -> Iterator[Slot]:
    """Message.version (int16), Message.header_type (uint8) and, in a compressed record
    batch, BodyCompression.codec (int8), where the flatbuffer stores them."""
    fields = [(message, 0, "version", 2), (message, 1, "header type", 1)]
    compression = header.table(3)
    if compression is not None:
        fields.append((compression, 0, "compression codec", 1))
    for table, i, name, width in fields:
        pos = table.field(i)
        if pos is not None:
            yield _slot(data, f"batch {b} {name}", pos, width)


def put(data: bytearray, pos: int, width: int, value: int) -> None:
    """Write ``value`` as a little-endian integer of ``width`` bytes (wrapped to fit)."""
    bits = 8 * width
    data[pos : pos + width] = (value % (1 << bits)).to_bytes(width, "little")


# --- every reader, in a child process ----------------------------------------------------
#
# ``serve()`` runs in a subprocess started once per test module: it imports snap, numpy and
# torch once (torch alone takes 2 s), then forks one child per request. The child runs every
# reader in turn and writes a JSON line before and after each to its output file, so that a
# crash (a signal) or a hang (SIGALRM) is attributed to the reader that was running.

READERS = (
    "loader shuffle verify",
    "loader shuffle noverify",
    "loader ordered verify",
    "loader ordered noverify",
    "head",
    "torch",
)
PROBE_SECONDS = 60  # per child: SIGALRM ends a hung one


def serve() -> None:
    """Answer requests ``{"path", "out"}`` (JSON lines on stdin) with ``{"status"}``: the
    exit code of a child that probed every reader on the snapshot at ``path``, or minus the
    signal that ended it."""
    import torch  # noqa: F401  (imported once, before the children fork)

    import snapshot_cli.readers.torch  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: its output goes to a file, never to the server's stdout
            code = 3
            try:
                signal.alarm(PROBE_SECONDS)
                with open(request["out"] + ".stderr", "wb") as err:
                    os.dup2(err.fileno(), 1)
                    os.dup2(err.fileno(), 2)
                probe(request["path"], request["out"])
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"status": code}) + "\n")
        sys.stdout.flush()


def probe(path: str, out: str) -> None:
    """Run every reader on the snapshot at ``path``, checking what each returns; one JSON
    line per reader in ``out``."""
    with open(out, "w", buffering=1) as log:
        for name in READERS:
            log.write(json.dumps({"reader": name, "event": "start"}) + "\n")
            result: dict[str, Any] = {"reader": name, "event": "end"}
            try:
                s = snap.open(path)
                raw = s.manifest.compression["codec"] == "none"
                files = [Path(path, e.path).read_bytes() for e in s.shards] if raw else None
                check = Check(s.schema, files)
                _READ[name](s, check)
            except snap.CorruptShardError as err:
                result.update(outcome="corrupt", message=str(err))
            except Exception as err:
                result.update(
                    outcome="error",
                    message=f"{type(err).__name__}: {err}",
                    traceback=traceback.format_exc()[-3000:],
                )
            else:
                result.update(outcome="read", records=check.records, problems=check.problems[:5])
            log.write(json.dumps(result) + "\n")


def _loader(shuffle: bool, verify: bool) -> Any:
    def read(s: Any, check: Check) -> None:
        with s.loader(4, shuffle=shuffle, verify=verify) as loader:
            for batch in loader:
                check.batch(batch)

    return read


def _head(s: Any, check: Check) -> None:
    for record in s.head(100):
        check.record(record)


def _torch(s: Any, check: Check) -> None:
    import torch

    with s.loader(4, shuffle=True) as loader:
        for tensors in loader.to_torch():
            batch: dict[str, Any] = {}
            for name, value in tensors.items():
                k = check.kinds.get(name)
                if isinstance(value, torch.Tensor) and k in ("scalar", "tensor"):
                    want = torch.from_numpy(np.empty(0, check.dtypes[name])).dtype
                    if value.dtype != want:
                        check.problem(f"{name}: torch dtype {value.dtype}, not {want}")
                    batch[name] = value.numpy()
                elif isinstance(value, list) and k == "ragged":
                    if not all(isinstance(v, torch.Tensor) for v in value):
                        check.problem(f"{name}: not a list of tensors")
                        return
                    batch[name] = _objects([v.numpy() for v in value])
                elif isinstance(value, list) and k in ("string", "binary"):
                    batch[name] = _objects(value)
                else:
                    check.problem(f"{name}: a {type(value).__name__} from to_torch")
                    return
            check.batch(batch)


_READ: dict[str, Any] = {
    "loader shuffle verify": _loader(True, True),
    "loader shuffle noverify": _loader(True, False),
    "loader ordered verify": _loader(False, True),
    "loader ordered noverify": _loader(False, False),
    "head": _head,
    "torch": _torch,
}


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


class Check:
    """Checks values read back against the manifest's schema: each column has exactly its
    type, and (uncompressed shards, ``files`` given) every value's bytes are in a shard file,
    so nothing was read from outside the file. Bools are exempt from the second check: a
    numpy bool is not how the file holds it (bits)."""

    def __init__(self, schema: pa.Schema, files: list[bytes] | None) -> None:
        self.names = list(schema.names)
        self.kinds: dict[str, str] = {}
        self.dtypes: dict[str, Any] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.ndims: dict[str, int] = {}
        for f in schema:
            t, k = f.type, schema_mod.kind(f.type)
            self.kinds[f.name] = k
            if k == "tensor":
                self.dtypes[f.name] = np.dtype(schema_mod.dtype_name(t.value_type))
                self.shapes[f.name] = tuple(t.shape)
            elif k == "scalar":
                self.dtypes[f.name] = np.dtype(schema_mod.dtype_name(t))
                self.shapes[f.name] = ()
            elif k == "ragged":
                value_type, ndim = schema_mod.ragged_info(t)  # type: ignore[misc]
                self.dtypes[f.name] = np.dtype(schema_mod.dtype_name(value_type))
                self.ndims[f.name] = ndim
        self.files = files
        self.records = 0
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def _in_file(self, name: str, data: bytes) -> None:
        if self.files is not None and not any(data in f for f in self.files):
            self.problem(f"{name}: value bytes {data[:16].hex()} are in no shard file")

    def batch(self, batch: dict[str, Any]) -> None:
        if sorted(batch) != sorted(self.names):
            self.problem(f"columns {sorted(batch)}, not {sorted(self.names)}")
            return
        rows = len(batch[self.names[0]])
        self.records += rows
        for name, value in batch.items():
            k = self.kinds[name]
            if not isinstance(value, np.ndarray) or len(value) != rows:
                self.problem(f"{name}: {type(value).__name__} of {len(value)} rows, not {rows}")
                continue
            if k in ("scalar", "tensor"):
                want = (rows, *self.shapes[name])
                if value.dtype != self.dtypes[name] or value.shape != want:
                    self.problem(
                        f"{name}: {value.dtype}{value.shape}, not {self.dtypes[name]}{want}"
                    )
                    continue
                if value.dtype.kind != "b":
                    for row in value:
                        self._in_file(name, np.ascontiguousarray(row).tobytes())
            elif value.dtype != object:
                self.problem(f"{name}: dtype {value.dtype}, not object")
            else:
                for v in value:
                    self.value(name, v)

    def record(self, record: dict[str, Any]) -> None:
        if sorted(record) != sorted(self.names):
            self.problem(f"columns {sorted(record)}, not {sorted(self.names)}")
            return
        self.records += 1
        for name, v in record.items():
            k = self.kinds[name]
            if k in ("scalar", "tensor"):
                ok = isinstance(v, (np.generic, np.ndarray)) and v.dtype == self.dtypes[name]
                if not ok or np.shape(v) != self.shapes[name]:
                    self.problem(
                        f"{name}: {type(v).__name__} {getattr(v, 'dtype', '')} "
                        f"{np.shape(v)} in a record"
                    )
                elif self.dtypes[name].kind != "b":
                    self._in_file(name, np.ascontiguousarray(v).tobytes())
            else:
                self.value(name, v)

    def value(self, name: str, v: Any) -> None:
        """One value of a ragged, string or binary column."""
        k = self.kinds[name]
        if k == "ragged":
            if (
                not isinstance(v, np.ndarray)
                or v.dtype != self.dtypes[name]
                or v.ndim != self.ndims[name]
            ):
                self.problem(
                    f"{name}: {type(v).__name__} {getattr(v, 'dtype', '')} "
                    f"ndim {getattr(v, 'ndim', '')}"
                )
            elif self.dtypes[name].kind != "b":
                self._in_file(name, np.ascontiguousarray(v).tobytes())
        elif k == "string":
            if not isinstance(v, str):
                self.problem(f"{name}: {type(v).__name__}, not str")
            else:
                self._in_file(name, v.encode("utf-8", "surrogatepass"))
        elif k == "binary":
            if not isinstance(v, bytes):
                self.problem(f"{name}: {type(v).__name__}, not bytes")
            else:
                self._in_file(name, v)
        else:
            self.problem(f"{name}: a column of kind {k}")
