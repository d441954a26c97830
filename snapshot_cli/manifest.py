"""The manifest (format 3, docs/format.md), a snapshot's commit point: parse, check, write, hash.

``manifest.json`` is written last and atomically; readers trust only it. It lists every shard
with its size, record counts and crc32c, the Arrow schema, and the fingerprint that decides
whether a later ``snap create`` reuses, resumes, or refuses.
"""

from __future__ import annotations

import builtins
import codecs
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from . import schema as schema_mod
from .errors import ManifestError
from .fingerprint import RECORDS_FORMAT, canonical_json, changed_parts, fingerprint, sha256_text
from .history import History
from .layout import MANIFEST_NAME, check_relative_path
from .manifest_text import check_text

FORMAT = "snap"
# 2: per record batch crc32c (``batch_crc32c``); 3: versions (``history``, :mod:`.history`).
# Readers read every one of them.
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

# hex digits in either case (another writer's may be uppercase), lowered once parsed
_CRC_RE = re.compile(r"^[0-9a-fA-F]{8}$")
_HEX_RE = re.compile(r"^[0-9a-fA-F]*$")
__all__ = [  # what other modules import from here, the fingerprint's helpers among them
    "FORMAT_VERSION", "RECORDS_FORMAT", "Manifest", "ShardEntry", "canonical_json",
    "changed_parts", "check_relative_path", "encode_runs", "fingerprint", "sha256_text",
]  # fmt: skip


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest records it. ``path`` is relative to the snapshot root.

    ``batch_rows`` is the number of records in each record batch, run-length encoded as
    ``((rows, count), ...)``: readers plan reads and shuffles per record batch without
    opening the shard. ``batch_crc32c`` (format 2; "" in format 1 and where the writer could
    not tell) is each record batch's crc32c, 8 hex digits each, concatenated: the bytes of
    the batch's message as the file's footer places them (:mod:`.ipc_blocks`).
    """

    path: str
    records: int
    record_batches: int
    bytes: int
    uncompressed_bytes: int
    crc32c: str
    batch_rows: tuple[tuple[int, int], ...]
    batch_crc32c: str = ""

    def batch_sizes(self) -> list[int]:
        """Records in each record batch, in order."""
        return [rows for rows, count in self.batch_rows for _ in range(count)]

    def to_json(self) -> dict[str, Any]:
        """The entry as manifest.json's ``shards`` list holds it (:meth:`from_json` reads it)."""
        return {"path": self.path, "records": self.records, "record_batches": self.record_batches,
                "bytes": self.bytes, "uncompressed_bytes": self.uncompressed_bytes,
                "crc32c": self.crc32c, "batch_rows": [list(pair) for pair in self.batch_rows],
                "batch_crc32c": self.batch_crc32c}  # fmt: skip

    @classmethod
    def from_json(cls, d: Any, where: str) -> ShardEntry:
        """An entry of the manifest ``where``, validated; ManifestError saying what is wrong."""
        if not isinstance(d, dict):
            raise ManifestError(f"{where}: a shard entry must be an object, got {d!r}")
        try:
            entry = cls(
                path=check_relative_path(d["path"], where),  # (without "." segments)
                records=d["records"],
                record_batches=d["record_batches"],
                bytes=d["bytes"],
                uncompressed_bytes=d["uncompressed_bytes"],
                crc32c=d["crc32c"],
                batch_rows=_pairs(d["batch_rows"], where),
                batch_crc32c=d.get("batch_crc32c", ""),
            )
        except KeyError as err:
            named = f" ({d['path']!r:.120})" if isinstance(d.get("path"), str) else ""
            raise ManifestError(f"{where}: shard entry{named} lacks {err.args[0]!r}") from err
        entry.validate(where)  # (one spelling from here on: what readers compare, gc keeps)
        return replace(entry, crc32c=entry.crc32c.lower(), batch_crc32c=entry.batch_crc32c.lower())

    def validate(self, where: str) -> None:
        """ManifestError unless the entry is consistent: a path inside the snapshot, counts
        that are integers and agree with ``batch_rows``, checksums of 8 hex digits."""
        check_relative_path(self.path, where)
        for name in ("records", "record_batches", "bytes", "uncompressed_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_INT:
                raise ManifestError(
                    f"{where}: shard {self.path!r} has invalid {name} {str(value)[:40]!r}"
                )
        if self.record_batches * MIN_BATCH_BYTES > self.bytes:
            # bounded before anything is allocated per record batch
            raise ManifestError(
                f"{where}: shard {self.path!r} cannot hold {self.record_batches} record batches "
                f"in {self.bytes} bytes"
            )
        if not isinstance(self.crc32c, str) or not _CRC_RE.match(self.crc32c):
            raise ManifestError(f"{where}: shard {self.path!r} has invalid crc32c {self.crc32c!r}")
        crcs = self.batch_crc32c
        if not isinstance(crcs, str) or (
            crcs and (len(crcs) != 8 * self.record_batches or not _HEX_RE.match(crcs))
        ):
            raise ManifestError(
                f"{where}: shard {self.path!r} has invalid batch_crc32c {str(crcs)[:40]!r} "
                f"(expected 8 hex digits for each of its {self.record_batches} record batches)"
            )
        counts = sum(c for _, c in self.batch_rows)
        rows = sum(r * c for r, c in self.batch_rows)
        if (counts, rows) != (self.record_batches, self.records):
            raise ManifestError(
                f"{where}: shard {self.path!r} batch_rows describe {counts} record batches of "
                f"{rows} records, not {self.record_batches} of {self.records}"
            )


def encode_runs(sizes: list[int]) -> tuple[tuple[int, int], ...]:
    """``[5, 5, 5, 2]`` → ``((5, 3), (2, 1))``."""
    runs: list[tuple[int, int]] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1] = (size, runs[-1][1] + 1)
        else:
            runs.append((size, 1))
    return tuple(runs)


def _pairs(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    ok = isinstance(value, list) and all(
        isinstance(p, list)
        and len(p) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in p)
        for p in value
    )
    if not ok:
        raise ManifestError(f"{where}: batch_rows must be a list of [rows, count] pairs > 0")
    return tuple((p[0], p[1]) for p in value)


MAX_INT = 1 << 53  # counts and sizes above this are no real snapshot's
MIN_BATCH_BYTES = 64  # an Arrow IPC record batch takes at least this much of its file
_TOP_KEYS: dict[str, type] = {
    "fingerprint": str, "fingerprint_parts": dict, "pipeline": dict, "schema": dict,
    "compression": dict, "totals": dict, "created": str, "created_by": dict, "run": str,
    "shards": list,
}  # fmt: skip
_CODECS = ("zstd", "lz4", "none")
_NEWER = "it was written by a newer snap; upgrade snap to read it"  # (no repair advice added)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")  # what a newer snap's codec may be named


def _check_document(d: dict[str, Any], where: str) -> None:
    """The shape of a manifest, every key, before anything uses it (ManifestError names it)."""
    check_text(d, where, "", depth=-1)  # (the document itself: its values are at depth 0)
    for key, kind in _TOP_KEYS.items():
        if key not in d:
            raise ManifestError(f"{where} lacks the field {key!r}")
        if not isinstance(d[key], kind):
            raise ManifestError(
                f"{where}: {key!r} must be a JSON {'object' if kind is dict else kind.__name__}"
                f"{' (list)' if kind is list else ''}, got {type(d[key]).__name__}"
            )
    if not isinstance(d["schema"].get("arrow_ipc_base64"), str):
        raise ManifestError(f"{where}: 'schema.arrow_ipc_base64' must be a string")
    codec, level = d["compression"].get("codec"), d["compression"].get("level")
    if codec not in _CODECS:  # a name this snap does not know is a newer one's, not damage
        newer = f" ({_NEWER})" if isinstance(codec, str) and _NAME_RE.match(codec) else ""
        raise ManifestError(f"{where}: 'compression.codec' is {codec!r:.40}, which this snap does "
                            f"not read: it reads {', '.join(_CODECS)}{newer}")  # fmt: skip
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)
                              or not -100 <= level <= 100):  # fmt: skip
        raise ManifestError(f"{where}: 'compression.level' must be null or a small integer")
    for key in ("inputs", "params"):
        if not isinstance(d["pipeline"].get(key, {}), dict):
            raise ManifestError(f"{where}: 'pipeline.{key}' must be a JSON object")
    for key, value in d["created_by"].items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ManifestError(f"{where}: 'created_by.{key}' must be a string or a number, "
                                f"not {type(value).__name__}")  # fmt: skip


@dataclass(frozen=True)
class Manifest:
    """A committed snapshot's description. Build with the constructor; load with from_json."""

    fingerprint: str
    fingerprint_parts: dict[str, Any]
    pipeline: dict[str, Any]
    schema: pa.Schema
    compression: dict[str, Any]
    shards: tuple[ShardEntry, ...]
    created: str
    created_by: dict[str, Any]
    run: str
    extra: dict[str, Any] = field(default_factory=dict)
    history: History | None = None  # format 3: the version and where it came from

    @property
    def version(self) -> int:
        """The version number (1 for a snapshot made before versions)."""
        return self.history.version if self.history is not None else 1

    @property
    def num_records(self) -> int:
        """Records in the snapshot (all its shards)."""
        return sum(s.records for s in self.shards)

    @property
    def num_shards(self) -> int:
        """Shard files of this version."""
        return len(self.shards)

    @property
    def num_record_batches(self) -> int:
        """Arrow record batches in all its shards (the loader's unit of reading)."""
        return sum(s.record_batches for s in self.shards)

    @property
    def bytes(self) -> int:
        """Bytes of its shard files on storage (compressed)."""
        return sum(s.bytes for s in self.shards)

    @property
    def uncompressed_bytes(self) -> int:
        """Bytes of its shards' buffers, uncompressed (about what the records take in memory)."""
        return sum(s.uncompressed_bytes for s in self.shards)

    def totals(self) -> dict[str, int]:
        """manifest.json's ``totals``: records, shards, record_batches, bytes and
        uncompressed_bytes (checked against the shards when it is read)."""
        return {"records": self.num_records, "shards": self.num_shards,
                "record_batches": self.num_record_batches, "bytes": self.bytes,
                "uncompressed_bytes": self.uncompressed_bytes}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """manifest.json's document (:meth:`to_json` is its text)."""
        return {
            "format": FORMAT,
            # a manifest without versions is written as format 2 (which readers of 2 read)
            "format_version": FORMAT_VERSION if self.history is not None else 2,
            "fingerprint": self.fingerprint,
            "fingerprint_parts": self.fingerprint_parts,
            "pipeline": self.pipeline,
            "schema": {
                "arrow_ipc_base64": schema_mod.encode_schema(self.schema),
                "columns": schema_mod.describe(self.schema),
            },
            "compression": self.compression,
            "totals": self.totals(),
            "created": self.created,
            "created_by": self.created_by,
            "run": self.run,
            **({"extra": self.extra} if self.extra else {}),
            **({"history": self.history.to_json()} if self.history is not None else {}),
            "shards": [s.to_json() for s in self.shards],
        }

    def to_json(self) -> builtins.bytes:  # (the name "bytes" is the property above)
        """manifest.json's bytes: :meth:`to_dict` as indented UTF-8 JSON."""
        return (json.dumps(self.to_dict(), indent=1) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: builtins.bytes, where: str = MANIFEST_NAME) -> Manifest:
        """Parse and validate a manifest.

        Raises:
            ManifestError: not JSON, not a snap manifest, an unknown version, a shard path that
                leaves the snapshot, totals that disagree with the shards, an unreadable schema;
                saying what to do (:func:`repair_advice`).
        """
        try:
            return cls._parse(data, where)
        except ManifestError as err:
            if "upgrade snap" in str(err):  # (a newer snap's: nothing is wrong with it)
                raise
            raise ManifestError(f"{err}; {repair_advice(where)}") from err

    @classmethod
    def _parse(cls, data: builtins.bytes, where: str) -> Manifest:
        if data.startswith(codecs.BOM_UTF8):  # (json.loads of bytes skips one: §3.1 has none)
            raise ManifestError(f"{where} starts with a UTF-8 byte order mark (EF BB BF), which "
                                "a manifest must not have: remove those 3 bytes")  # fmt: skip
        try:  # UTF-8 only (json.loads of bytes would take UTF-16 and UTF-32 too)
            d = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as err:  # incl. integers over 4,300 digits
            raise ManifestError(f"{where} is not valid JSON in UTF-8: {err}"[:500]) from err
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ManifestError(f'{where} is not a snap manifest (no "format": "snap")')
        version = d.get("format_version")
        if version not in READABLE_VERSIONS or type(version) is not int:  # (not True, 3.0)
            hint = (
                _NEWER
                if isinstance(version, int) and version > FORMAT_VERSION
                else "the file is damaged or not from snap"
            )
            raise ManifestError(
                f"{where} has format_version {version!r}; this snap reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))} ({hint})"
            )
        _check_document(d, where)
        history = None
        if version >= 3:
            if "history" not in d:
                raise ManifestError(f"{where} lacks the field 'history' (format 3)")
            history = History.from_json(_one_spelling(d["history"], where), where)
        try:
            shards_raw = d["shards"]
            shards = tuple(ShardEntry.from_json(s, where) for s in shards_raw)
            try:
                arrow_schema = schema_mod.decode_schema(d["schema"]["arrow_ipc_base64"])
            except (ValueError, TypeError, pa.ArrowException) as err:
                raise ManifestError(f"{where}: the Arrow schema cannot be decoded: {err}") from err
            if twice := sorted(n for n, k in Counter(arrow_schema.names).items() if k > 1):
                raise ManifestError(  # (snap's create refuses them: every reader names columns)
                    f"{where}: the schema has the column {twice[0]!r} more than once, which snap "
                    "never writes: the snapshot was not written by snap, or is damaged"
                )
            if "snap" in d["created_by"]:  # (another writer's description is not read: §3.5)
                _described(arrow_schema, d["schema"].get("columns"), where)
            m = cls(fingerprint=d["fingerprint"], fingerprint_parts=d["fingerprint_parts"],
                    pipeline=d["pipeline"], schema=arrow_schema, compression=d["compression"],
                    shards=shards, created=d["created"], created_by=d["created_by"], run=d["run"],
                    extra=d.get("extra", {}), history=history)  # fmt: skip
            totals = d["totals"]
        except KeyError as err:
            raise ManifestError(f"{where} lacks the field {err.args[0]!r}") from err
        if twice := [p for p, k in Counter(s.path for s in shards).items() if k > 1]:
            raise ManifestError(f"{where} lists the shard {twice[0]!r} twice")
        if totals != m.totals():
            raise ManifestError(
                f"{where}: totals {totals} disagree with the shard entries {m.totals()}"
            )
        return m


def _described(schema: pa.Schema, columns: Any, where: str) -> None:
    """ManifestError unless the schema has the columns its description beside it lists (names,
    kinds, dtypes, shapes), where there is one: a bit flipped in the base64 text may decode to
    another schema, which every shard would then seem to contradict (and be called damaged)."""
    if not isinstance(columns, list) or not columns:
        return
    try:
        now: list[Any] = schema_mod.describe(schema)
    except (ValueError, TypeError, KeyError, AssertionError, pa.ArrowException) as err:
        raise ManifestError(f"{where}: the Arrow schema cannot be described: {err}") from err
    for want, got in itertools.zip_longest(columns, now):
        keys = ("name", "kind", "shape") if got and got["kind"] == "arrow" else _DESCRIBED
        if (
            not isinstance(want, dict)
            or got is None
            or any(k in want and want[k] != got[k] for k in keys)
        ):
            said = {k: want[k] for k in _DESCRIBED if k in want} if isinstance(want, dict) else want
            raise ManifestError(
                f"{where}: the Arrow schema (schema.arrow_ipc_base64) has "
                f"{'no column' if got is None else f'the column {got}'} where its description "
                f"(schema.columns) has {'none' if want is None else said}: one of them is damaged"
            )


_DESCRIBED = ("name", "kind", "dtype", "shape")


def _one_spelling(history: Any, where: str) -> Any:
    """``history`` with its task table's path and crc32c as snap writes them (gc keeps the
    file by that path), before :meth:`History.from_json` checks it."""
    crc = history.get("tasks_crc32c") if isinstance(history, dict) else None
    if not isinstance(crc, str) or "tasks" not in history:
        return history  # (History.from_json names what is missing)
    tasks = check_relative_path(history.get("tasks"), f"{where}: history.tasks")
    return {**history, "tasks": tasks, "tasks_crc32c": crc.lower() if _CRC_RE.match(crc) else crc}


def repair_advice(where: str) -> str:
    """What to do about the damaged or hand-edited manifest at ``where``."""
    if "/_versions/" in where.replace("\\", "/"):
        return (
            "this kept copy of a version is damaged or edited (manifest.json does not use it): "
            "delete it (snap gc writes the current version's again; an older one is not kept)"
        )
    return (
        "the manifest is damaged or was edited by hand: put back the newest copy, the "
        "highest-numbered _versions/vNNNNNNNN.json in the snapshot (each committed version's "
        "manifest is kept there; snap verify checks the result), or make the snapshot again "
        "with snap create --overwrite"
    )
