"""What ``snap inspect``, ``snap head`` and ``snap verify`` were given: a snapshot, or one
shard file of one.

A shard is named by the path an error or ``snap inspect --shards`` printed; the commands then
show or check that shard alone, as the newest kept version that lists it describes it (its
records, checksums, and the task and inputs that wrote it). ``snap.open`` of a shard stays an
error: a loader reads snapshots.
"""

from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass
from typing import Any

from .. import schema as schema_mod
from .. import storage
from .. import versions as versions_mod
from ..errors import ManifestError
from ..layout import is_own_shard
from ..manifest import Manifest
from .not_found import ShardGiven
from .snapshot import Snapshot
from .snapshot import open as open_snapshot


@dataclass(frozen=True)
class Target:
    """``snapshot`` is what the command reads: the whole snapshot, or, when a shard was given,
    the version that lists it narrowed to that shard (``shard`` is then its index there, and
    ``version`` the whole version)."""

    snapshot: Snapshot
    shard: int | None = None
    version: Manifest | None = None
    current: int | None = None  # the snapshot's current version, when a shard was given

    @property
    def shard_url(self) -> str | None:
        return None if self.shard is None else self.snapshot.shard_url(self.snapshot.shards[0])


def open_target(url: str) -> Target:
    """The snapshot at ``url``, or the shard file ``url`` is, with the version listing it.

    Raises:
        ManifestError: neither; or a shard file no kept version lists (a create's that has
            not committed), naming the snapshot.
    """
    try:
        return Target(open_snapshot(url))
    except ShardGiven as err:
        given = err
    snapshot = open_snapshot(given.snapshot)
    fs, root = snapshot.fs, snapshot.root
    for m in reversed(versions_mod.history(fs, root, snapshot.manifest)):
        for i, entry in enumerate(m.shards):
            if entry.path == given.shard:
                narrowed = dataclasses.replace(m, shards=(entry,))
                return Target(Snapshot(fs, root, narrowed), i, m, snapshot.version)
    listed = f"snap inspect {given.snapshot} --shards lists the shards"
    if not storage.exists(fs, storage.join(root, given.shard)):
        raise ManifestError(
            f"{given.url} does not exist, and no version of {given.snapshot} lists it ({listed})"
        )
    if not is_own_shard(posixpath.basename(given.shard)):  # (notes.txt: gc keeps it)
        raise ManifestError(
            f"{given.url} is in the shards of {given.snapshot}, but it is not a shard snap "
            f"wrote (snap names them RUN-TASK-SEQ-WRITER.arrow, and leaves other files be): "
            f"{listed}"
        )
    raise ManifestError(
        f"{given.url} is in the shards of {given.snapshot}, but no version it keeps lists it: "
        "a snap create wrote it that has not committed (it is running, or was stopped: "
        f"snap gc {given.snapshot} removes what a stopped one left)"
    )


def shard_doc(target: Target) -> dict[str, Any]:
    """The ``snap inspect SHARD --json`` document: the shard's manifest entry, where its
    records fall in the version's order, and the task (with its inputs) that wrote it."""
    assert target.shard is not None and target.version is not None
    m, i = target.version, target.shard
    entry = m.shards[i]
    first = sum(s.records for s in m.shards[:i])
    return {
        **entry.to_json(),
        "path": target.shard_url,
        "shard": entry.path,
        "snapshot": target.snapshot.url,
        "version": m.version,
        "current_version": target.current,
        "index": i,
        "num_shards": m.num_shards,
        "first_record": first,
        "compression": m.compression,
        "schema": schema_mod.describe(m.schema),
        "task": _task_of(target.snapshot, m, entry.path),
    }


def _task_of(snapshot: Snapshot, m: Manifest, shard: str) -> dict[str, Any] | None:
    """The task of version ``m`` that wrote ``shard``: its key and inputs (None when the
    version has no task table, made before versions, or it cannot be read)."""
    try:
        tasks = versions_mod.task_table(snapshot.fs, snapshot.root, m) or []
    except (OSError, ManifestError):
        return None
    for t in tasks:
        if shard in t.shards:
            return {"key": t.key, "shards": list(t.shards), "inputs": [x[0] for x in t.inputs]}
    return None
