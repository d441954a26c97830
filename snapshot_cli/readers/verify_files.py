"""What ``snap verify`` checks of a snapshot's own files beside its shards.

- ``manifest.json`` against its copy in ``_versions/``, written with it at the commit: one
  edited since (a shard's entry dropped by hand) had ``snap gc`` refuse to run and send the
  user to ``snap verify``, which said "ok".
- The version's task table against the crc32c its manifest gives: a damaged one is no
  damage to the records, but a grow (the same ``snap create`` on more inputs) cannot reuse
  a task by it and computes every one again.
- The copies of the older versions kept, each readable and of the version its name says:
  ``snap inspect --versions``, ``snap gc`` and ``snap.open(version=k)`` read them.
- No version committed after the current one: ``manifest.json`` put back to an older copy,
  which ``snap create`` and ``snap gc`` refuse to write over or delete.

Each problem is one line naming the file and what to do. A snapshot made before versions
(formats 1 and 2) has none of these files; an older version opened (``snap.open(path,
version=k)``) is checked for its own task table only.
"""

from __future__ import annotations

from typing import Any

from .. import layout, storage, versions
from ..errors import ManifestError
from ..manifest import Manifest
from .snapshot import Snapshot


def problems(snapshot: Snapshot, notes: list[str] | None = None) -> list[str]:
    """The problems of ``snapshot``'s own files (see the module's doc), none if intact. A
    missing task table is no problem but a note appended to ``notes``: a snapshot copied
    without ``_versions/`` (README: supported) reads as it is, and verify said "DAMAGED".

    Raises:
        StorageError: a file could not be read (the storage's failure, not damage).
    """
    fs, root, m = snapshot.fs, snapshot.root, snapshot.manifest
    if m.history is None:
        return []
    out: list[str] = []
    try:
        versions.task_table(fs, root, m)
    except ManifestError as err:
        missing = isinstance(err.__cause__, FileNotFoundError)
        copied = " (a copy made without _versions/? copy it from the original)" * missing
        (notes if missing and notes is not None else out).append(
            f"{err}{copied}: the records read as they are, but a grow of the snapshot (the "
            "same snap create on more inputs) cannot reuse its tasks and computes every one "
            "again; snap create --overwrite makes the snapshot anew"
        )
    manifest_path = layout.manifest_path(root)
    current = versions.read(fs, manifest_path)
    if current is None or current.version != m.version:
        return out  # (an older version opened: manifest.json is another's)
    out += _own_copy(fs, root, current)
    if newer := versions.committed_after(fs, root, current):
        out.append(str(versions.rolled_back_error(fs, root, current, newer)))
    for k in versions.kept(fs, root):
        if k < m.version:
            try:
                copy = versions.read_listed(fs, root, k)
            except ManifestError as err:
                out.append(str(err))
                continue
            if copy is not None and copy.version != k:
                path = storage.to_url(fs, layout.version_path(root, k))
                out.append(
                    f"{path} holds the manifest of version {copy.version}, not {k}: no copy of "
                    f"version {k} (snap.open(version={k}) refuses it); delete it, or put version "
                    f"{k}'s manifest there"
                )
    return out


def _own_copy(fs: Any, root: str, current: Manifest) -> list[str]:
    """``manifest.json`` and the copy of its version in ``_versions/`` say the same, as snap
    reads them (whitespace, a crc32c's case, ``./`` in a path aside: a writer may spell them
    so, docs/format.md); a missing copy is none (``snap gc`` writes it again)."""
    manifest_path, copy_path = (
        layout.manifest_path(root),
        layout.version_path(root, current.version),
    )
    try:
        data = storage.read_own(fs, root, copy_path)
    except FileNotFoundError:
        return []
    url, copy_url = storage.to_url(fs, manifest_path), storage.to_url(fs, copy_path)
    try:
        copy = Manifest.from_json(data, where=copy_url)
    except ManifestError as err:
        return [f"{err} (the copy of version {current.version} kept with {url})"]
    if copy.to_dict() == current.to_dict():
        return []
    return [
        f"{url} differs from {copy_url}, the copy written with it at the commit (one of them "
        f"was edited since; snap gc removes nothing until they agree): copy {copy_url} to "
        f"{url} and run snap verify again, or make the snapshot anew with snap create "
        "--overwrite"
    ]
