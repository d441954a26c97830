"""A snapshot's versions (format 3): what a commit records of where it came from (pure).

Every commit is a version. Its manifest carries a ``history`` object: the version number,
its parent, how inputs were grouped into tasks (``chunking``), what changed against the parent
(``changes``) and where its *task table* is. The task table (``_versions/vNNNNNNNN.tasks.json``,
written before the manifest, never changed) lists each task's key, the identities of its
inputs and its shards: what the next incremental ``snap create`` compares its inputs with,
so that only the tasks whose inputs changed are computed again. Readers never need it.

    {"version": 3, "parent": 2,
     "chunking": {"inputs": 16, "bytes": 67108864, "fixed": false},
     "changes": {"tasks_reused": 30, "tasks_computed": 2, "inputs_added": 20,
                 "inputs_removed": 0, "inputs_changed": 1, "overwrite": false},
     "tasks": "_versions/v00000003.tasks.json", "tasks_crc32c": "1b2c3d4e"}
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from .errors import ManifestError
from .layout import check_relative_path

CHANGE_COUNTS = ("tasks_reused", "tasks_computed", "inputs_added", "inputs_removed",
                 "inputs_changed")  # fmt: skip
MAX_COUNT = 1 << 40  # the largest count a manifest's history holds, + 1
_CRC_RE = re.compile(r"^[0-9a-f]{8}$")
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


def _count(value: Any, key: str, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < MAX_COUNT:
        raise ManifestError(f"{where}: {key!r} must be an integer >= {low}, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class History:
    """The ``history`` object of a format 3 manifest (see the module docstring)."""

    version: int
    parent: int | None
    chunking: dict[str, Any]
    changes: dict[str, Any]
    tasks: str  # the task table's path, relative to the snapshot
    tasks_crc32c: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any, where: str) -> History:
        """Raises ManifestError naming the field for anything but a valid history object."""
        w = f"{where}: history"
        if not isinstance(d, dict):
            raise ManifestError(f"{w} must be a JSON object, got {type(d).__name__}")
        missing = [k for k in ("version", "parent", "chunking", "changes", "tasks",
                               "tasks_crc32c") if k not in d]  # fmt: skip
        if missing:
            raise ManifestError(f"{w} lacks {missing}")
        version = _count(d["version"], "history.version", where, 1)
        parent = d["parent"]
        if parent is not None and _count(parent, "history.parent", where, 1) >= version:
            raise ManifestError(f"{w}.parent {parent} must be below its version {version}")
        chunking = d["chunking"]
        if not isinstance(chunking, dict) or set(chunking) != {"inputs", "bytes", "fixed"}:
            raise ManifestError(f"{w}.chunking must be {{inputs, bytes, fixed}}: {chunking!r:.80}")
        _count(chunking["inputs"], "history.chunking.inputs", where, 1)
        _count(chunking["bytes"], "history.chunking.bytes", where)
        if not isinstance(chunking["fixed"], bool):
            raise ManifestError(f"{w}.chunking.fixed must be true or false")
        changes = d["changes"]
        if not isinstance(changes, dict) or set(changes) != {*CHANGE_COUNTS, "overwrite"}:
            raise ManifestError(f"{w}.changes must hold {[*CHANGE_COUNTS, 'overwrite']}")
        for k in CHANGE_COUNTS:
            _count(changes[k], f"history.changes.{k}", where)
        if not isinstance(changes["overwrite"], bool):
            raise ManifestError(f"{w}.changes.overwrite must be true or false")
        check_relative_path(d["tasks"], f"{w}.tasks")
        if not isinstance(d["tasks_crc32c"], str) or not _CRC_RE.match(d["tasks_crc32c"]):
            raise ManifestError(f"{w}.tasks_crc32c must be 8 lowercase hex digits")
        return cls(version, parent, dict(chunking), dict(changes), d["tasks"], d["tasks_crc32c"])


@dataclass(frozen=True)
class TaskRecord:
    """One task of a version's task table."""

    key: str  # sha256 of what decides its records: code, params, its inputs' contents
    inputs: list[list[Any]]  # [name, size, version, content] per input
    shards: list[str]  # its shards' paths
    schema: str | None  # its records' Arrow schema (base64), None if it wrote none

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "inputs": self.inputs, "shards": self.shards,
                "schema": self.schema}  # fmt: skip


def encode_tasks(version: int, tasks: list[TaskRecord]) -> bytes:
    return json.dumps({"version": version, "tasks": [t.to_json() for t in tasks]}).encode()


def decode_tasks(data: bytes, version: int, where: str) -> list[TaskRecord]:
    """A task table; ManifestError naming the entry for anything malformed."""
    try:
        d = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise ManifestError(f"{where} is not valid JSON: {err}"[:300]) from err
    if (
        not isinstance(d, dict)
        or d.get("version") != version
        or not isinstance(d.get("tasks"), list)
    ):
        raise ManifestError(f"{where} is not the task table of version {version}")
    out = []
    for i, t in enumerate(d["tasks"]):
        w = f"{where}: task {i}"
        if not isinstance(t, dict) or set(t) != {"key", "inputs", "shards", "schema"}:
            raise ManifestError(f"{w} must hold key, inputs, shards and schema")
        if not isinstance(t["key"], str) or not _KEY_RE.match(t["key"]):
            raise ManifestError(f"{w}: key must be 64 hex digits")
        inputs = t["inputs"]
        if not isinstance(inputs, list) or not all(
            isinstance(x, list) and len(x) == 4 and isinstance(x[0], str) for x in inputs
        ):
            raise ManifestError(f"{w}: inputs must be [name, size, version, content] lists")
        if not isinstance(t["shards"], list) or not all(isinstance(p, str) for p in t["shards"]):
            raise ManifestError(f"{w}: shards must be a list of paths")
        if t["schema"] is not None and not isinstance(t["schema"], str):
            raise ManifestError(f"{w}: schema must be null or a string")
        shards = [check_relative_path(p, w) for p in t["shards"]]  # (as the manifest's)
        out.append(TaskRecord(t["key"], inputs, shards, t["schema"]))
    return out
