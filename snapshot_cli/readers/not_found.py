"""Why a path has no snapshot to open: a shard given, a lost manifest, an unfinished create, a
path inside a snapshot or beside one, a directory of snapshots, or nothing there at all.
Each is an error that says what the path is and what to open instead (pure advice, read
from the storage)."""

from __future__ import annotations

import difflib
import os
import posixpath
from typing import Any

from .. import faults, layout, other_formats, storage
from .. import versions as versions_mod
from ..errors import ManifestError
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR

__all__ = ["ShardGiven", "directory_of", "no_manifest"]


def no_manifest(fs: Any, root: str) -> ManifestError:
    """Why ``root`` has no manifest.json: a shard given, a lost one, a create's, no snapshot."""
    if (given := _shard_given(fs, root)) is not None:  # a shard that is missing
        return given
    if (kept := versions_mod.lost(fs, root)) is not None:  # (deleted, or left out of a copy)
        return versions_mod.lost_error(fs, root, kept)
    url, runs = storage.to_url(fs, root), storage.list_names(fs, storage.join(root, RUNS_DIR))
    if any(layout.lease_epoch(n) is not None or layout.is_own_run(n) for n in runs):
        return ManifestError(  # (an empty _runs/: a create that failed at once)
            f"{url} is an unfinished snapshot (no manifest.json yet): a snap create is writing "
            "it, or was interrupted; snap inspect says which (and who is writing); once a "
            "create commits it, it can be read"
        )
    if not runs and storage.isdir(fs, storage.join(root, RUNS_DIR)):  # (a lease being taken)
        return ManifestError(
            f"{url} is not a snapshot yet (no manifest.json, an empty {RUNS_DIR}/): a snap "
            "create is starting there, or one failed at once; once a create commits it, it "
            "can be read"
        )
    there = "is not a snapshot (no manifest.json)" if storage.exists(fs, root) else ""
    inside = faults.inside_snapshot(fs, root)  # (a snapshot's shards/: not another format's)
    if there and not inside and (kind := other_formats.folder_kind(fs, root)) is not None:
        there = f"is {kind}, not a snapshot (no manifest.json): {other_formats.ADVICE}"
    absent = "" if there else faults.absent_hint(fs, root)  # (a bucket, memory://)
    return ManifestError(
        f"{url} {there or 'does not exist: check the path'}{absent}{inside}"
        + f"{_near_snapshots(fs, root)}{_snapshots_inside(fs, root)}"
    )


def _near_snapshots(fs: Any, root: str) -> str:
    """ "; did you mean ...?" naming the snapshots beside local ``root`` whose names are like
    its own (``snap inspect runs/snapshots`` for ``runs/snapshot``); "" elsewhere."""
    if not storage.is_local(fs):
        return ""
    parent, name = posixpath.split(root.rstrip("/"))
    try:
        names = [e.name for e in os.scandir(parent or "/") if e.is_dir()]
    except OSError:
        return ""
    near = [
        n
        for n in difflib.get_close_matches(name, names, n=3, cutoff=0.75)
        if n != name and os.path.isfile(posixpath.join(parent, n, MANIFEST_NAME))
    ]
    shown = " or ".join(storage.to_url(fs, posixpath.join(parent, n)) for n in near[:2])
    return f"; did you mean {shown}?" if near else ""


def _snapshots_inside(fs: Any, root: str) -> str:
    """ "; it holds the snapshots a, b: give one" for a local directory of snapshots given as
    one (``snap inspect demo-output``); "" elsewhere."""
    if not storage.is_local(fs):
        return ""
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return ""
    inside = [n for n in names if os.path.isfile(posixpath.join(root, n, MANIFEST_NAME))]
    if not inside:
        return ""
    shown = ", ".join(inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
    one = storage.to_url(fs, posixpath.join(root, inside[0]))
    return f"; it holds the snapshot{'s' if len(inside) > 1 else ''} {shown}: give one ({one})"


def directory_of(fs: Any, file: str) -> str:
    """The snapshot a file given as one stands for: its directory, if the file is its
    manifest; else a ManifestError (a shard named: which snapshot it belongs to)."""
    parent = posixpath.dirname(file)
    if posixpath.basename(file) == MANIFEST_NAME:
        return parent
    given = _shard_given(fs, file)
    if given is not None:
        raise given
    url, above = storage.to_url(fs, file), posixpath.dirname(parent)
    if posixpath.basename(parent) == SHARDS_DIR and storage.exists(
        fs, storage.join(above, RUNS_DIR)
    ):
        raise ManifestError(  # (it said "is a file, not a snapshot")
            f"{url} is in the shards of {storage.to_url(fs, above)}, which no snap create has "
            "committed yet (one is running, or was stopped: run it again to finish it, or "
            f"snap gc {storage.to_url(fs, above)} removes what it left)"
        )
    kept = layout.version_of(posixpath.basename(file))
    if posixpath.basename(parent) == layout.VERSIONS_DIR and kept is not None:
        snapshot, (k, what) = storage.to_url(fs, above), kept
        raise ManifestError(  # (it said "is a file, not a snapshot")
            f"{url} is the kept copy of version {k}'s "
            f"{'manifest' if what == 'manifest' else 'task table'} of the snapshot "
            f"{snapshot}: give the snapshot (snap inspect {snapshot} --versions lists the "
            f"versions it keeps; in Python, snap.open({snapshot!r}, version={k}) reads version "
            f"{k})"
        )
    if (kind := other_formats.file_kind(fs, file)) is not None:
        raise ManifestError(f"{url} is {kind}, not a snapshot: {other_formats.ADVICE}")
    raise ManifestError(f"{url} is a file, not a snapshot (a directory with a manifest.json)")


def _shard_given(fs: Any, path: str) -> ShardGiven | None:
    """The error for ``path`` in the shards directory of a committed snapshot, else None."""
    parent = posixpath.dirname(path)
    above = posixpath.dirname(parent)
    if posixpath.basename(parent) != SHARDS_DIR or not storage.exists(
        fs, storage.join(above, MANIFEST_NAME)
    ):
        return None
    shard = posixpath.join(SHARDS_DIR, posixpath.basename(path))
    try:
        there = storage.exists(fs, path)
    except OSError:  # (a link in a loop: there is something there)
        there = True
    return ShardGiven(storage.to_url(fs, path), storage.to_url(fs, above), shard, there)


class ShardGiven(ManifestError):
    """A shard file was given where a snapshot was expected (``snap inspect``, ``head`` and
    ``verify`` take one: :mod:`.target`)."""

    def __init__(self, url: str, snapshot: str, shard: str, there: bool = True) -> None:
        said = f"{url} is a shard of the snapshot {snapshot}"
        takes = " (snap inspect, snap head and snap verify take the shard itself)"
        if not there:  # (bench said a missing one "is a shard")
            said = f"{url} does not exist (it would be a shard of the snapshot {snapshot})"
        elif not layout.is_own_shard(posixpath.basename(shard)):  # (notes.txt: said one too)
            said, takes = f"{url} is in the shards of {snapshot}, not a shard snap wrote", ""
        super().__init__(f"{said}: give the snapshot's directory{takes}")
        self.url, self.snapshot, self.shard, self.there = url, snapshot, shard, there

    def __reduce__(self) -> tuple[Any, ...]:
        return ShardGiven, (self.url, self.snapshot, self.shard, self.there)
