"""The versions a snapshot keeps: ``manifest.json`` (the current one) and ``_versions/``.

Every commit writes the manifest of the version it makes into ``_versions/vNNNNNNNN.json``
before ``manifest.json``, the commit point, and nothing after it. A copy whose version was
never committed (its writer failed at the commit) is written over by the next commit, and a
copy numbered at or above the current version is not listed. So the versions listed were
committed: readers may open any of them (``snap.open(path, version=k)``), and ``snap gc``
removes a version only with the shards it no longer shares with a newer one, once it has
been superseded for longer than the retention period.
"""

from __future__ import annotations

import operator
import os
import posixpath
import time
from datetime import datetime
from typing import Any

from . import history as history_mod
from . import layout, storage
from .crc import crc32c
from .errors import CorruptShardError, ManifestError, OptionError, SnapError, StorageError
from .history import TaskRecord
from .manifest import Manifest
from .units import stored_seconds


def read(fs: Any, path: str) -> Manifest | None:
    """The manifest at ``path`` (a snapshot's ``manifest.json``, or a copy in its
    ``_versions/``), or None if there is none."""
    # its snapshot: the directory above _versions/, else its own (taken above it for
    # manifest.json too, a snapshot that is a link had its manifest "out of" its parent)
    directory = posixpath.dirname(path)
    copy = posixpath.basename(directory) == layout.VERSIONS_DIR
    root = posixpath.dirname(directory) if copy else directory
    try:
        data = storage.read_own(fs, root, path)
    except FileNotFoundError:
        return None
    return Manifest.from_json(data, where=storage.to_url(fs, path))


# Where fsspec's info gives a file's modification time: local disk, GCS and HDFS; WebHDFS; S3;
# memory.
_STORED_TIME_KEYS = ("mtime", "modificationTime", "LastModified", "created")


def committed_at(fs: Any, root: str, m: Manifest, current: bool) -> float:
    """When version ``m`` was committed, as late as either clock puts it: the time its writer
    wrote into it and the time the storage gave its file (``manifest.json`` for the
    ``current`` version, whose copy in ``_versions/`` gc may have written again just now;
    else that copy). A writer whose clock was days behind (a VM's, a container's) made its
    version look committed days ago, and gc removed the version it replaced at once, under
    readers in an epoch of it. A file written later (a snapshot copied without its times)
    makes a version look newer: its predecessor is kept longer, never shorter. An unreadable
    ``created`` counts as now."""
    try:
        when = datetime.fromisoformat(m.created).timestamp()
    except (TypeError, ValueError):
        return time.time()
    path = layout.manifest_path(root) if current else layout.version_path(root, m.version)
    try:
        info = storage.file_info(fs, path)
    except FileNotFoundError:
        return when
    for key in _STORED_TIME_KEYS:
        if (stored := stored_seconds(info.get(key))) is not None:
            return max(when, stored)
    return when


def kept(fs: Any, root: str) -> list[int]:
    """The version numbers ``_versions/`` holds manifests of, in order (listed now)."""
    out = []
    for name in storage.list_names(fs, layout.versions_dir(root)):
        found = layout.version_of(name)
        if found is not None and found[1] == "manifest":
            out.append(found[0])
    return sorted(out)


def task_table(fs: Any, root: str, m: Manifest) -> list[TaskRecord] | None:
    """The task table of the committed version ``m``; None for one made before versions.

    Raises:
        ManifestError: it is missing, has another crc32c than the manifest gives, or is
            malformed (naming it).
    """
    h = m.history
    if h is None:
        return None
    path = storage.join(root, h.tasks)
    url = storage.to_url(fs, path)
    try:
        data = storage.read_own(fs, root, path)
    except FileNotFoundError as err:
        raise ManifestError(f"{url} is missing") from err
    if f"{crc32c(data):08x}" != h.tasks_crc32c:
        raise ManifestError(f"{url} does not have the crc32c the manifest gives")
    return history_mod.decode_tasks(data, h.version, url)


def read_listed(fs: Any, root: str, k: int) -> Manifest | None:
    """The copy of version ``k``, which a listing of ``_versions/`` showed. One the storage
    then says is not there is listed again: None if it went since (removed by ``snap gc``),
    else a StorageError: unreadable is never "no such version" (gc deleted a kept version's
    shards on one 404).

    Raises:
        StorageError: listed, yet not found when read.
        ManifestError: damaged (naming it).
    """
    path = layout.version_path(root, k)
    if (m := read(fs, path)) is not None or k not in kept(fs, root):
        return m
    if (m := read(fs, path)) is not None:  # (found the second time: the first was transient)
        return m
    raise StorageError(
        f"cannot read {storage.to_url(fs, path)}: it is listed, but the storage answered "
        "that it is not there; nothing was changed: run the same command again"
    )


def check_own_copy(fs: Any, root: str, manifest: Manifest) -> None:
    """The committed manifest is its copy in ``_versions/`` (a ``manifest.json`` edited by
    hand to drop a shard had gc delete it; one edited otherwise, which ``snap verify`` says
    gc removes nothing of, had gc go on: any edit is refused, as verify says)."""
    copy = read_listed(fs, root, manifest.version)
    if copy is not None and copy.to_dict() != manifest.to_dict():
        url = storage.to_url(fs, root)
        other = {s.path for s in copy.shards} != {s.path for s in manifest.shards}
        raise ManifestError(
            f"{url}/{layout.MANIFEST_NAME} and its copy {url}/{layout.VERSIONS_DIR}/"
            f"{posixpath.basename(layout.version_path(root, manifest.version))} "
            f"{'list other shards' if other else 'differ'} (one was changed after the "
            "commit): gc removes nothing until they agree; run snap verify, and restore the "
            "manifest from the copy or recreate the snapshot"
        )


def restore_own_copy(fs: Any, root: str, current: Manifest, write: bool) -> str | None:
    """Make the committed version's copy in ``_versions/`` again from ``manifest.json`` (the
    same bytes, docs/format.md §3.1) where it is missing: a snapshot copied without
    ``_versions/`` (its manifest and shards only) made ``snap gc`` refuse for good. If it was
    missing, what was done (written now, unless not ``write``: a dry run); None if it is
    there (a listing that missed it).

    Raises:
        ManifestError: ``manifest.json`` was committed again meanwhile.
    """
    path = layout.version_path(root, current.version)
    if current.history is None or read(fs, path) is not None:
        return None
    done = f"{storage.to_url(fs, path)} again from manifest.json (it was missing)"
    if not write:
        return f"would write {done}"
    data, url = storage.read_own(fs, root, layout.manifest_path(root)), storage.to_url(fs, root)
    if Manifest.from_json(data, where=url).version != current.version:
        raise ManifestError(f"{url} was committed again meanwhile; run snap gc again")
    storage.makedirs(fs, layout.versions_dir(root))
    storage.write_atomic(fs, path, data)
    return f"wrote {done}"


def history(fs: Any, root: str, current: Manifest) -> list[Manifest]:
    """Every version kept, oldest first, ending with ``current`` (archived copies of newer
    versions than the current one, left by a writer that lost a race, are not listed).

    Raises:
        StorageError, ManifestError: a listed copy could not be read (:func:`read_listed`).
    """
    out = []
    for k in kept(fs, root):
        if k >= current.version:
            continue
        m = read_listed(fs, root, k)
        if m is not None and m.version == k:  # (a copy of another version: not version k)
            out.append(m)
    return [*out, current]


def lost(fs: Any, root: str) -> Manifest | None:
    """For a snapshot without ``manifest.json`` (deleted, or left out of a copy): the newest
    version ``_versions/`` keeps that was committed, or None (never committed: unfinished).

    A commit writes its copy first, then ``manifest.json``, and only then removes its run's
    directory from ``_runs/``: a copy whose run is still there is a commit being made (or
    one that failed, which the next create resumes), not a lost one. While a commit replaces
    ``manifest.json`` on HDFS (deleted, then renamed into place) its temporary file is there.
    """
    numbers = kept(fs, root)
    if not numbers or any(layout.is_own_temporary(n) for n in storage.list_names(fs, root)):
        return None
    runs = set(storage.list_names(fs, layout.runs_dir(root)))
    for k in reversed(numbers):
        try:
            m = read(fs, layout.version_path(root, k))
        except ManifestError:
            continue  # (damaged, or no copy of snap's: no version to restore)
        if m is not None and m.version == k and m.run not in runs:
            # (a commit that ended since manifest.json was looked for removed its run after it)
            return None if storage.exists(fs, layout.manifest_path(root)) else m
    return None


def committed_after(fs: Any, root: str, current: Manifest) -> list[Manifest]:
    """The copies in ``_versions/`` of versions above ``current`` (``manifest.json``'s) that
    were committed, oldest first: ``manifest.json`` was put back to an older copy by hand
    since. A copy above it whose run is still in ``_runs/`` is a commit being made or one that
    failed (the next commit writes over it), as for :func:`lost`; so is a damaged one."""
    above = [k for k in kept(fs, root) if k > current.version]
    if not above:
        return []
    runs = set(storage.list_names(fs, layout.runs_dir(root)))
    out = []
    for k in above:
        try:
            m = read(fs, layout.version_path(root, k))
        except ManifestError:
            continue
        if m is not None and m.version == k and m.run not in runs:
            out.append(m)
    if out and _moved_on(fs, root, current):
        return []  # (a commit between the caller's read of manifest.json and these listings)
    return out


def _moved_on(fs: Any, root: str, current: Manifest) -> bool:
    """Whether ``manifest.json`` is another version now than ``current``: a writer committed
    after the caller read it and removed its run before ``_runs/`` was listed, so its
    version's copy looked committed after ``current``, and a healthy snapshot was called
    "put back to an older copy" (``snap verify`` during a grow, 2 runs in 147; gc refused).
    """
    path = layout.manifest_path(root)
    try:
        now = Manifest.from_json(storage.read_own(fs, root, path), where=path)
    except (ManifestError, FileNotFoundError):
        return False
    return (now.version, now.run) != (current.version, current.run)


def rolled_back_error(
    fs: Any, root: str, current: Manifest, newer: list[Manifest]
) -> ManifestError:
    """The error of a writer (``snap create``, ``snap gc``) that would delete or write over
    the versions ``newer`` (:func:`committed_after`), and what to do instead."""
    url = storage.to_url(fs, root)
    last = newer[-1]
    copy = storage.to_url(fs, layout.version_path(root, last.version))
    names = ", ".join(str(m.version) for m in newer)
    files = " and ".join(
        f"{layout.VERSIONS_DIR}/{posixpath.basename(layout.version_path(root, m.version))} "
        f"(with its .tasks.json)"
        for m in newer
    )
    return ManifestError(
        f"{url}/{layout.MANIFEST_NAME} is version {current.version}, but {url}/"
        f"{layout.VERSIONS_DIR}/ keeps version{'s' if len(newer) > 1 else ''} {names}, "
        "committed after it: manifest.json was put back to an older copy. Nothing was changed "
        "(snap gc would delete a committed version, snap create write over it). To return to "
        f"version {last.version}, copy {copy} to {url}/{layout.MANIFEST_NAME}; to keep version "
        f"{current.version} and drop the newer, delete {files}, then run the command again"
    )


def lost_error(fs: Any, root: str, m: Manifest) -> ManifestError:
    """The error for a snapshot whose ``manifest.json`` is lost, its version ``m`` kept."""
    url = storage.to_url(fs, root)
    copy = storage.to_url(fs, layout.version_path(root, m.version))
    return ManifestError(
        f"{url} has lost its manifest.json (deleted, or left out of a copy of the snapshot), "
        f"but its version {m.version} was committed: restore it by copying {copy} to "
        f"{storage.to_url(fs, layout.manifest_path(root))} (then snap verify {url} checks its "
        "shards), or make the snapshot anew with snap create --overwrite"
    )


def open_version(fs: Any, root: str, current: Manifest, version: int) -> Manifest:
    """Version ``version`` of the snapshot whose current manifest is ``current``.

    Raises:
        ManifestError: it is not kept (never made, or removed by ``snap gc``), naming those
            that are.
        OptionError: it is not an integer.
    """
    try:
        if isinstance(version, bool):
            raise TypeError
        version = operator.index(version)  # (a numpy integer too)
    except TypeError:
        raise OptionError(
            f"version must be an integer (1, 2, ...: snap inspect --versions lists them), got "
            f"{version!r}"
        ) from None
    if version == current.version:
        return current
    if not 0 < version < current.version:  # (never made: not gc's doing)
        raise ManifestError(
            f"{storage.to_url(fs, root)} has no version {version}: its versions count from 1 "
            f"to its latest, {current.version} (snap inspect --versions lists those kept)"
        )
    m = read(fs, layout.version_path(root, version)) if 0 < version < current.version else None
    if m is None or m.version != version:
        have = [v.version for v in history(fs, root, current)]
        raise ManifestError(
            f"{storage.to_url(fs, root)} keeps no version {version}: it keeps {have} (snap gc "
            "removes versions superseded for longer than its retention period)"
        )
    return m


def missing_shard(readers: Any, shard: str, url: str) -> CorruptShardError:
    """The error for shard ``shard`` (its path in the snapshot) not being there, with the
    likely reason: the snapshot moved, deleted or its path led elsewhere while it was read
    (``readers``: the shard readers, their ``fs``, ``root`` and, local, the real path of
    the root when they opened it), a reader of a version since replaced whose shards
    ``snap gc`` removed, or a damaged snapshot."""
    fs, root = readers.fs, readers.root
    where = storage.to_url(fs, root)
    opened = getattr(readers, "_real_root", None) if storage.is_local(fs) else None
    again = "open it again where it is now (a loader reads the files it opened by their path)"
    if opened is not None and os.path.realpath(root) != opened:  # (a link repointed)
        return CorruptShardError(
            f"shard {url} is missing: {where} leads to {os.path.realpath(root)} now, not to "
            f"{opened}, where this snapshot was opened (a link repointed or a directory "
            f"moved while it was read); {again}"
        )
    try:
        current = read(fs, layout.manifest_path(root))
        gone = current is None and not fs.exists(layout.manifest_path(root))
    except (OSError, SnapError):
        current, gone = None, False
    if gone:
        return CorruptShardError(
            f"shard {url} is missing, and so is the snapshot's manifest.json: {where} was "
            f"moved or deleted while it was read; {again}"
        )
    if current is not None and shard not in {s.path for s in current.shards}:
        try:  # (snap gc removes only the shards no kept version lists)
            listing = [m.version for m in history(fs, root, current)
                       if any(e.path == shard for e in m.shards)]  # fmt: skip
        except (OSError, SnapError):
            listing = []
        if listing:
            kept = ("version {} does" if len(listing) == 1 else "versions {} do").format(
                ", ".join(map(str, listing)))  # fmt: skip
            return CorruptShardError(
                f"shard {url} is missing, and the snapshot's version now, {current.version}, "
                f"does not list it, but the kept {kept}: it was deleted by hand or lost, not "
                "removed by snap gc (which removes only the shards no kept version lists), and "
                "they cannot be read whole any more; open the snapshot again to read version "
                f"{current.version}"
            )
        return CorruptShardError(
            f"shard {url} is missing, and the snapshot's version now, {current.version}, does "
            "not list it: that version replaced the one being read, whose shards snap gc then "
            "removed (once a replaced version is older than its --retention, 7d by default), "
            "or the snapshot was created again or restored from a copy since; open the "
            f"snapshot again to read version {current.version}"
        )
    return CorruptShardError(
        f"shard {url} is missing: the snapshot is damaged (a file deleted or lost); "
        "snap verify lists what else is, and running the same snap create again computes "
        "the tasks of missing shards again"
    )
