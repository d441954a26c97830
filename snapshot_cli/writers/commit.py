"""Run state and the commit: task results → manifest.json (written last, atomically)."""

from __future__ import annotations

import dataclasses
import logging
import platform
import socket
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from fsspec import AbstractFileSystem

from .. import __version__, durable, layout, mismatch, storage, stored_types, versions
from .. import history as history_mod
from .. import schema as schema_mod
from ..crc import crc32c
from ..errors import (
    ManifestError,
    SchemaMismatchError,
    SnapError,
    SnapshotExistsError,
    StorageError,
)
from ..history import History, TaskRecord
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR, VERSIONS_DIR
from ..manifest import Manifest, ShardEntry
from ..progress import counted
from . import advice
from . import lost as lost_mod
from .pipeline import IDENTITY_SCHEME

log = logging.getLogger(__name__)


def read_manifest(fs: AbstractFileSystem, root: str, lost_ok: bool = False) -> Manifest | None:
    """The committed manifest, or None if the snapshot was never committed.

    Raises:
        ManifestError: damaged; or ``manifest.json`` is lost while ``_versions/`` keeps a
            committed version (:func:`versions.lost`), saying how to restore it. With
            ``lost_ok`` that version is returned instead (an ``--overwrite`` follows it).
    """
    if (m := _current(fs, root)) is not None or (kept := versions.lost(fs, root)) is None:
        return m
    if lost_ok:
        return kept
    raise versions.lost_error(fs, root, kept)


def _current(fs: AbstractFileSystem, root: str) -> Manifest | None:
    """``manifest.json``, or None where there is none: one the storage says is not there
    while a listing of the snapshot shows it is read again, and if still not found is a
    StorageError (gc took it for a snapshot never committed, and removed nothing it could)."""
    path = storage.join(root, MANIFEST_NAME)
    try:
        data = storage.read_own(fs, root, path)
    except FileNotFoundError:
        if MANIFEST_NAME not in storage.list_names(fs, root):
            return None
        try:  # (listed: read once more)
            data = storage.read_own(fs, root, path)
        except FileNotFoundError:
            raise StorageError(
                f"cannot read {storage.to_url(fs, path)}: it is listed, but the storage "
                "answered that it is not there; nothing was changed: run the same command again"
            ) from None
    return Manifest.from_json(data, where=storage.to_url(fs, path))


def check_output(fs: AbstractFileSystem, root: str) -> None:
    """Refuse an OUTPUT that is a file, or a directory holding something that is no snapshot."""
    url = storage.to_url(fs, root)
    if storage.exists(fs, root) and not storage.isdir(fs, root):
        raise SnapshotExistsError(f"OUTPUT {url} is a file, not a snapshot directory")
    names = [n for n in storage.list_names(fs, root) if not n.startswith(".")]
    foreign = [n for n in names if n not in (MANIFEST_NAME, SHARDS_DIR, RUNS_DIR, VERSIONS_DIR)]
    if foreign and MANIFEST_NAME not in names:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise SnapshotExistsError(
            f"OUTPUT {url} exists and is not a snapshot (it holds {shown}); choose a new or "
            "empty directory"
        )


def _two_snaps(name: str, types: list[tuple[pa.DataType, str]]) -> SchemaMismatchError | None:
    """The error for two tasks that wrote one column's values as two Arrow types that snap
    now stores as one: a task kept from a run of an earlier snap, which stored a yielded type
    as it came (a ``large_string``, a fixed-size list). None for a real change of type."""
    (t1, w1), (t2, w2) = types
    if stored_types.stored_type(t1) != stored_types.stored_type(t2):
        return None
    return SchemaMismatchError(
        f"column {name!r} was stored as {t1} by {w1} and as {t2} by {w2}: the same values, "
        "written by two versions of snap (earlier ones stored a yielded Arrow type as it "
        "came); run the same create with --overwrite (or into a new OUTPUT) to write every "
        "task alike"
    )


class SchemaAgreement:
    """The schema every task that wrote records must share, checked as each result arrives,
    so that a task that disagrees stops the run at once rather than after every other task.
    ``describe(task)`` names a task in the error (default: ``task N``), e.g. with its inputs."""

    def __init__(
        self, describe: Callable[[int], str] | None = None, results: Iterable[dict[str, Any]] = ()
    ) -> None:
        self.describe = describe or (lambda task: f"task {task}")
        self.first: tuple[pa.Schema, int] | None = None
        self.said = True  # (the results given here were said of when they were computed)
        for r in sorted(results, key=lambda r: r["task"]):
            self.add(r)
        self.said = False

    def add(self, result: dict[str, Any]) -> None:
        if result["schema"] is None:
            return
        s = schema_mod.decode_schema(result["schema"])
        declared = result.get("ragged", ())  # (@snap.ragged's names, as the task had them)
        if not self.said:  # once a create, as its first task's records show the columns
            self.said = True
            advice.warn_unmatched_ragged(declared, s)
        if self.first is None:
            self.first = (s, result["task"])
            return
        base, base_task = self.first
        if [(f.name, f.type) for f in s] == [(f.name, f.type) for f in base]:
            return
        name, task = self.describe, result["task"]
        for field in base:
            if field.name in s.names and s.field(field.name).type != field.type:
                kinds = [(field.type, name(base_task)), (s.field(field.name).type, name(task))]
                err = _two_snaps(field.name, kinds) or mismatch.unify_error(field.name, kinds)
                note = advice.ragged_names_note(advice.unmatched_ragged(declared, s.names), s.names)
                raise SchemaMismatchError(f"{err}. {note}") if note else err
        if sorted(s.names) == sorted(base.names):
            raise SchemaMismatchError(
                f"{name(base_task)} and {name(task)} wrote the same columns in another order: "
                f"{base.names} vs {s.names}; yield the columns in one order everywhere: a record "
                f"as {{k: record[k] for k in {base.names}}}, a DataFrame as df[{base.names}]"
            )
        raise SchemaMismatchError(
            f"{name(base_task)} and {name(task)} wrote different columns: {base.names} "
            f"vs {s.names}; every record must have the same keys, in the same order"
        )

    @property
    def schema(self) -> pa.Schema:
        return self.first[0] if self.first is not None else pa.schema([])


def unify_schema(
    results: list[dict[str, Any]], describe: Callable[[int], str] | None = None
) -> pa.Schema:
    """The snapshot's schema: every task that wrote records must have written the same one
    (the first task's, in task order)."""
    return SchemaAgreement(describe, results).schema


def build_manifest(
    *,
    fingerprint: str,
    parts: dict[str, Any],
    pipeline: dict[str, Any],
    compression: dict[str, Any],
    results: list[dict[str, Any]],
    run: str,
    history: History | None = None,
    describe: Callable[[int], str] | None = None,
) -> Manifest:
    """The manifest of a create's results (``describe``: see :func:`unify_schema`)."""
    results = sorted(results, key=lambda r: r["task"])
    shards = tuple(
        ShardEntry.from_json(e, f"task {r['task']} result") for r in results for e in r["shards"]
    )
    return Manifest(
        fingerprint=fingerprint,
        fingerprint_parts=parts,
        pipeline=pipeline,
        schema=unify_schema(results, describe),
        compression=compression,
        shards=shards,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        created_by={
            "snap": __version__,
            "pyarrow": pa.__version__,
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "identity_scheme": IDENTITY_SCHEME,  # (how the code hash was computed)
        },
        run=run,
        history=history,
    )


def write_tasks_table(
    fs: AbstractFileSystem, root: str, version: int, tasks: list[TaskRecord]
) -> tuple[str, str]:
    """Write version ``version``'s task table; its path (relative) and crc32c."""
    data = history_mod.encode_tasks(version, tasks)
    rel = layout.tasks_table(version)
    storage.write_atomic(fs, storage.join(root, rel), data)
    return rel, f"{crc32c(data):08x}"


def read_tasks_table(
    fs: AbstractFileSystem, root: str, m: Manifest
) -> tuple[list[TaskRecord] | None, str]:
    """The task table of the committed version ``m`` (None when it has none: made before
    versions), or None and why it cannot be trusted (then nothing of it is reused: see
    :func:`say_table_unusable`)."""
    try:
        return versions.task_table(fs, root, m), ""
    except ManifestError as err:
        return None, str(err)


def say_table_unusable(m: Manifest, problem: str) -> None:
    """Warn, as a create plans its tasks, that version ``m``'s task table (``problem``)
    cannot be used: every task is computed and every input counts as added (an up-to-date
    create, which reads its inputs again instead, says nothing)."""
    log.warning("cannot use the task table of version %d (%s): every task is computed again, "
                "and every input counts as added against it", m.version, problem)  # fmt: skip


def _archive(fs: AbstractFileSystem, root: str, m: Manifest, check: bool = True) -> None:
    """Keep version ``m``'s manifest in ``_versions/``. ``check``: unless a copy of this very
    version (same fingerprint and run) is there already; else it is written over (a copy a
    writer left before failing to commit is no version)."""
    path = layout.version_path(root, m.version)
    if check:
        try:
            kept = versions.read(fs, path)
        except ManifestError:
            kept = None
        if kept is not None and (kept.fingerprint, kept.run) == (m.fingerprint, m.run):
            return
    storage.write_atomic(fs, path, m.to_json())


def commit(
    fs: AbstractFileSystem, root: str, manifest: Manifest, replaces: Manifest | None = None,
    held: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """Write manifest.json, the commit point, in one atomic step.

    A first commit creates the manifest exclusively (locally a hard link of a finished
    file; on GCS/S3 a PUT with the store's precondition), so two writers can never both
    commit, even one that lost its lease without noticing. ``replaces`` (the version this one
    follows) is checked to still be the committed one, then replaced; it is checked again,
    and the lease with ``held`` (raises if it is lost), at the last moment before: a writer
    paused after the first check (a stopped job, a suspended VM) wrote its manifest over the
    version the writer that took its lease had committed meanwhile, whose tidying had removed
    its shards. Only a pause within the final write itself is left to race (a conditional
    write of ``manifest.json`` on the store would close that).

    Both versions' manifests are kept in ``_versions/`` first (the new one's copy is no
    version until manifest.json says so: readers and gc go by manifest.json), so nothing is
    written after the commit point.

    A grow or a rerun (new records of the same snapshot) carries the replaced version's
    ``extra``, a writer's own data about the snapshot, into the new version; an overwrite,
    which makes the snapshot anew, does not (the replaced version's copy keeps it).
    """
    if replaces is not None and replaces.extra and not manifest.extra:
        overwrite = manifest.history is not None and manifest.history.changes["overwrite"]
        manifest = manifest if overwrite else dataclasses.replace(manifest, extra=replaces.extra)
    path = storage.join(root, MANIFEST_NAME)
    url = storage.to_url(fs, path)
    _readable(manifest, url)
    if held is not None:  # (a taker's tidying removed our shards: said as the lease lost)
        held()
    _all_there(fs, root, manifest)
    kept = {s.path for s in replaces.shards} if replaces is not None else set()
    durable.sync(fs, [storage.join(root, s.path) for s in manifest.shards if s.path not in kept])
    if replaces is None:
        _archive(fs, root, manifest, check=False)
        try:
            created: bool | None = storage.create_exclusive(fs, path, manifest.to_json())
        except Exception as err:  # (its answer damaged or lost: the PUT may have landed)
            created = _landed(fs, root, manifest, err)
        else:  # refused: our PUT that landed and was retried, another's, or nothing there
            created = created or _landed(fs, root, manifest)
        if created:
            _synced(fs, root)
            return
        if created is None:
            raise StorageError(
                f"the storage refused to create {url} as if it existed (a failed precondition), "
                "yet there is none: nothing of this run was committed; run the same snap create "
                "again (it reuses the tasks done)"
            )
        raise SnapshotExistsError(
            f"another writer committed {url} meanwhile; nothing of this run was committed "
            "(run snap create again to reuse or --overwrite it)"
        )
    _still_replaces(fs, root, replaces, url)
    _archive(fs, root, replaces)  # readers of it keep it until gc's retention period ends
    _archive(fs, root, manifest, check=False)
    now = _still_replaces(fs, root, replaces, url, raising=False)
    if now is not None and now.version == manifest.version:  # (its copy, ours wrote over)
        _archive(fs, root, now, check=False)
    if held is not None:
        held()  # (LeaseError: taken over meanwhile)
    if now is not None:
        raise SnapshotExistsError(
            f"{url} was replaced by another writer meanwhile; nothing of this run was committed"
        )
    try:
        storage.write_atomic(fs, path, manifest.to_json())
    except Exception as err:  # (as above: it may have landed; else the error stands)
        if not _landed(fs, root, manifest, err):
            raise
    _synced(fs, root)


def _still_replaces(
    fs: AbstractFileSystem, root: str, replaces: Manifest, url: str, raising: bool = True
) -> Manifest | None:
    """The committed version if it is no longer ``replaces`` (raising: SnapshotExistsError
    instead); None if it still is, or if there is none (a lost manifest.json, whose version
    --overwrite follows)."""
    now = _current(fs, root)
    if now is None or (now.fingerprint, now.run) == (replaces.fingerprint, replaces.run):
        return None
    if raising:
        raise SnapshotExistsError(
            f"{url} was replaced by another writer meanwhile; nothing of this run was committed"
        )
    return now


def _readable(manifest: Manifest, url: str) -> None:
    """Refuse to commit a manifest that snap's readers would refuse: a value out of their
    range (an ``inputs_per_task`` of 2**40 was committed, and no command, not even an
    ``--overwrite``, could read the snapshot after)."""
    try:
        Manifest.from_json(manifest.to_json(), where=url)
    except ManifestError as err:
        raise SnapError(
            f"nothing was committed: the manifest this create made would not be readable "
            f"({err}); this is a bug in snap: please report it with the command you ran"
        ) from err


def _all_there(fs: AbstractFileSystem, root: str, manifest: Manifest) -> None:
    """Refuse to commit a version whose shards are not all in ``shards/`` at their sizes (one
    listing): removed while the create ran (a ``snap gc`` that saw another writer hold the
    lease, a user's ``rm``), a commit made anyway was damaged from the start (on GCS, 18 of
    120 shards missing, in a probe)."""
    if not (lost := lost_mod.lost_shards(fs, root, manifest)):
        return
    what, shown = lost_mod.said(lost, missing="gone")
    raise StorageError(
        f"nothing was committed: {counted(len(lost), 'shard')} of the version this create "
        f"made {'is' if len(lost) == 1 else 'are'} {what} ({shown}), removed while it ran (a "
        "snap gc, or by hand): run the same snap create again, which computes their tasks again"
    )


def _landed(
    fs: AbstractFileSystem, root: str, manifest: Manifest, err: Exception | None = None
) -> bool | None:
    """After a commit's write was refused or failed (``err``): whether ``manifest.json`` is
    this commit's (its fingerprint and run) or another's (False), read afresh, as a write
    whose answer was lost or damaged may have landed; None if there is none. With ``err``:
    none, or a failing look, raises ``err`` again (nothing was committed, or it is unknown)."""
    try:
        now = _current(fs, root)
    except Exception:
        if err is None:
            raise
        now = None
    if now is None and err is not None:
        raise err
    ours = now is not None and (now.fingerprint, now.run) == (manifest.fingerprint, manifest.run)
    return None if now is None else ours


def _synced(fs: AbstractFileSystem, root: str) -> None:
    """The commit's names on disk: the manifest's, and the version copies' beside it. The
    snapshot is committed already (readers see it), so a fault here is a warning, not a
    failed create."""
    try:
        durable.sync_directory(fs, storage.join(root, VERSIONS_DIR))
        durable.sync_directory(fs, root)
    except StorageError as err:
        log.warning("committed, but the commit may not survive a power loss: %s", err)
