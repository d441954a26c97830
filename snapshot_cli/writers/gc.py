"""``snap gc``: remove what no kept version references and no live writer uses.

Garbage is left by writers that died (partial shards, task results of a run nobody will
resume), by runs interrupted before their commit, by stray temporary files of atomic writes,
and by versions: a commit never removes the shards of the version it replaces (a reader may
be in the middle of an epoch of it). gc removes a version superseded more than the retention
period ago (7 days by default, like Delta Lake's VACUUM; ``--retention``), with the shards no
newer kept version shares, and its files in ``_versions/``.

Safety: gc takes the snapshot's writer lease, the same one ``snap create`` takes, so no
writer can start (and adopt a run) while files go. If a live writer holds the lease, gc
keeps that writer's run (its directory and every shard named after it) and removes only
what belongs to other, dead runs; a writer that has not yet chosen its run keeps everything.
A live writer also keeps the files of the version it is about to commit (``_versions/`` files
newer than the committed version: its task table is written before its commit) and the
temporary files of its manifest's atomic write. Shards of the current version are never
touched. Without ``manifest.json``, nothing a copy in ``_versions/`` references goes: a
snapshot whose manifest was lost (deleted, or left out of a copy) while ``_versions/`` keeps a
committed version is refused, saying how to restore it; a first commit being made or cut
short keeps its run and shards. The committed version's own copy, missing (a snapshot copied
without ``_versions/``), is written again from ``manifest.json`` first.
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Iterable
from typing import Any

from fsspec import AbstractFileSystem

from .. import faults, layout, other_formats, storage, versions
from ..errors import ManifestError, OptionError, SnapError, StorageError
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR, VERSIONS_DIR
from ..manifest import Manifest
from ..units import flag, options_dict, parse_duration
from . import commit as commit_mod
from . import gc_leases, gc_uploads, gc_watch
from . import lease as lease_mod
from . import runs as runs_mod
from .gc_denied import cannot_write, no_room_for_lease, removed_before
from .gc_report import Garbage, GcReport

DEFAULT_RETENTION = 7 * 86400.0  # seconds: Delta Lake's VACUUM keeps 7 days too


def retained_versions(
    fs: AbstractFileSystem, root: str, current: Manifest, retention: float, now: float,
    until: dict[int, float] | None = None,
) -> tuple[list[Manifest], dict[int, str]]:  # fmt: skip
    """The versions whose shards stay: the current one, and every one superseded less than
    ``retention`` seconds ago (a reader may still be in an epoch of it: ``until``, if given,
    takes when each goes); and why each other kept version goes."""
    chain = versions.history(fs, root, current)
    keep, gone = [current], {}
    for older, newer in zip(chain, chain[1:], strict=False):
        age = now - versions.committed_at(fs, root, newer, newer is current)  # (its commit)
        if age < retention:
            keep.append(older)
            if until is not None:
                until[older.version] = now - age + retention
        else:
            gone[older.version] = (
                f"of version {older.version}, superseded {_age(age)} ago (retention "
                f"{_age(retention)})"
            )
    return keep, gone


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def find_garbage(
    fs: AbstractFileSystem, root: str, live_run: str | None, writer_live: bool,
    retention: float = DEFAULT_RETENTION, now: float | None = None, dry_run: bool = False,
    kept_until: dict[int, float] | None = None,
) -> tuple[list[Garbage], list[str], str | None]:  # fmt: skip
    """What gc would remove given the live writer's run and the retention period, the runs
    it keeps (``dry_run``: as gc would, which takes the lease first) and, if the committed
    version's copy was missing, that gc wrote it again first (would, in a dry run)."""
    manifest = commit_mod.read_manifest(fs, root)  # ManifestError if damaged or lost: stop
    now = time.time() if now is None else now
    keep_all = writer_live and live_run is None
    referenced, copied = _uncommitted_copies(fs, root) if manifest is None else (set(), set())
    restored = None
    lost = held = False
    retired: dict[str, str] = {}  # shard → why it goes
    kept_tables: set[str] = set()
    garbage: list[Garbage] = []
    if manifest is not None:
        versions.check_own_copy(fs, root, manifest)
        if newer := versions.committed_after(fs, root, manifest):
            raise versions.rolled_back_error(fs, root, manifest, newer)
        unwritten = dry_run or writer_live  # (only under gc's own lease)
        restored = versions.restore_own_copy(fs, root, manifest, not unwritten)
        keep, gone = retained_versions(fs, root, manifest, retention, now, kept_until)
        referenced = {s.path for m in keep for s in m.shards}
        kept_tables = {m.history.tasks for m in keep if m.history is not None}
        for k in sorted(gone, reverse=True):  # (a shared shard: the newest had it last)
            m = versions.read_listed(fs, root, k)
            for s in m.shards if m is not None else ():
                retired.setdefault(s.path, gone[k])
        sizes = storage.entry_sizes(fs, layout.versions_dir(root))
        if restored and unwritten:  # (as it would be listed once written; else the
            sizes.setdefault(posixpath.basename(layout.version_path(root, manifest.version)), 0)
        kept_versions = {m.version for m in keep}  # listing must show the copy gc wrote)
        listed = _check_listing(fs, root, manifest, sizes, kept_versions | set(gone), dry_run)
        h = manifest.history  # the copies of the versions before lost (rm -r, a partial copy):
        lost = h is not None and h.parent not in (None, *listed)  # their shards unknown,
        held = lost and now - versions.committed_at(fs, root, manifest, True) < retention
        if not keep_all:
            for name, size in sorted(sizes.items()):
                found = layout.version_of(name)
                rel = f"{VERSIONS_DIR}/{name}"
                if found is None or rel in kept_tables or found[0] in kept_versions:
                    continue
                if writer_live and found[0] > manifest.version:
                    continue  # the live writer's next version: written before its commit
                why = gone.get(found[0], "a version that was never committed")
                garbage.append(Garbage(rel, "version", size, why))
    runs = storage.entry_sizes(fs, storage.join(root, RUNS_DIR))
    # lease files and the dot-named temporaries of atomic writes are not runs; a name snap
    # never gives is no garbage of snap's (a folder gc was pointed at by mistake)
    run_names = [n for n in runs if layout.is_own_run(n)]
    kept = sorted(n for n in run_names if keep_all or n == live_run or n in copied)
    garbage += [
        Garbage(f"{RUNS_DIR}/{name}", "run", runs[name], "state of a dead run")
        for name in sorted(run_names)
        if name not in kept
    ]
    for name, size in sorted(storage.entry_sizes(fs, storage.join(root, SHARDS_DIR)).items()):
        rel = f"{SHARDS_DIR}/{name}"
        if rel in referenced or keep_all or (live_run and layout.is_shard_of(name, live_run)):
            continue
        if not layout.is_own_shard(name):
            continue  # (not a name snap gives: someone else's file, left alone)
        if name.startswith("."):
            reason = "temporary file of an interrupted write"
            garbage.append(Garbage(rel, "temporary", size, reason))
        elif rel in retired:
            garbage.append(Garbage(rel, "shard", size, retired[rel]))
        elif not held:
            reason = "in no committed version" if manifest else "no committed manifest"
            lost_copies = f" kept in {VERSIONS_DIR}/ (older versions' copies are missing)"
            garbage.append(Garbage(rel, "shard", size, reason + (lost_copies if lost else "")))
    if not writer_live:  # (a live writer's are its commit or heartbeat being written)
        garbage += _temporaries(fs, root, runs, taking=dry_run)
    # A manifest may list a shard anywhere in the snapshot (docs/format.md §3.10): nothing a
    # kept version lists goes, nor a directory holding it (a run's name was removed whole).
    spared = _with_parents(posixpath.normpath(path) for path in referenced)
    return [g for g in garbage if posixpath.normpath(g.path) not in spared], kept, restored


def _check_listing(
    fs: AbstractFileSystem, root: str, manifest: Manifest, sizes: dict[str, int], read: set[int],
    dry_run: bool = False,
) -> set[int]:  # fmt: skip
    """Stop unless the listing of ``_versions/`` shows the committed version's own copy
    (written before its commit) and no older version but those read (``read``): a listing
    that failed (a 404 is an empty one) or went stale had gc take kept versions for never
    committed, and delete them with their shards. Returns the versions it lists."""
    listed = {f[0] for n in sizes if (f := layout.version_of(n)) and f[1] == "manifest"}
    own = manifest.version in listed or manifest.history is None  # (made before versions)
    unread = sorted(k for k in listed if k < manifest.version and k not in read)
    if own and not unread:
        return listed
    nothing = "snap gc --dry-run: none would be removed" if dry_run else "snap gc removed nothing"
    copy = _read_or_none(fs, root, unread[0]) if unread else None
    if copy is not None and copy.version != unread[0]:  # (a copy of another: said as such)
        k, path = unread[0], storage.to_url(fs, layout.version_path(root, unread[0]))
        raise ManifestError(
            f"{nothing}: {path} holds the manifest of version {copy.version}, not {k}, so "
            f"which shards version {k} holds is not known; delete it, or put version {k}'s "
            "manifest there, and run snap gc again"
        )
    what = f"shows version {unread[0]}, not read" if unread else "lacks the committed version"
    raise StorageError(
        f"{nothing}: the listing of {storage.to_url(fs, layout.versions_dir(root))} "
        f"{what} (a listing that failed or is stale, or a copy not of its version); run snap "
        "gc again, and if it says the same, snap verify the snapshot"
    )


def _read_or_none(fs: AbstractFileSystem, root: str, k: int) -> Manifest | None:
    try:
        return versions.read_listed(fs, root, k)
    except (OSError, SnapError):  # (the listing's fault, said as that)
        return None


def _with_parents(paths: Iterable[str]) -> set[str]:
    """``paths`` and every directory above each (relative to the snapshot)."""
    out: set[str] = set()
    for path in paths:
        while path and path not in out:
            out.add(path)
            path = posixpath.dirname(path)
    return out


def _temporaries(
    fs: AbstractFileSystem, root: str, runs: dict[str, int], taking: bool = False
) -> list[Garbage]:
    """The temporary files atomic writes of snap's files left (a process killed while
    writing its manifest, a version's copy, a lease's heartbeat), with no live writer: at
    the top, in ``_versions/`` and in ``_runs/``. A lease's of the newest epoch stays (a
    create taking the lease over may be writing it this moment); ``taking``: a dry run's
    list, of a gc that takes a newer one first."""
    epochs = [e for n in runs if (e := layout.lease_epoch(n)) is not None]
    newest = max(epochs, default=-1) + (1 if taking else 0)
    found: list[Garbage] = []
    for where, sizes in (
        ("", storage.entry_sizes(fs, root)),
        (VERSIONS_DIR, storage.entry_sizes(fs, layout.versions_dir(root))),
        (RUNS_DIR, runs),
    ):
        for name, size in sorted(sizes.items()):
            target = layout.temporary_of(name)
            if target is None:
                continue
            if where == RUNS_DIR:
                epoch = layout.lease_epoch(target)
                own = epoch is not None and epoch < newest
            else:
                own = (
                    target == MANIFEST_NAME if not where else layout.version_of(target) is not None
                )
            if own:
                rel = posixpath.join(where, name)
                found.append(Garbage(rel, "temporary", size, "temporary file of an atomic write"))
    return found


def gc(
    url: str | os.PathLike[str],
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
    retention: float | str = DEFAULT_RETENTION,
) -> GcReport:
    """Remove (or with ``dry_run`` list) the garbage of the snapshot at ``url``: files no kept
    version and no live writer uses; a version superseded more than ``retention`` ago (7
    days: ``"7d"``, ``"12h"``, seconds) goes, with the shards only it had.
    ``storage_options``: fsspec options of ``url``'s filesystem (credentials, project...)."""
    try:
        seconds = parse_duration(retention, "retention")
        dry_run = flag(dry_run, "dry_run")  # (None or "" removed files; "false" listed them)
        storage_options = options_dict(storage_options, "storage_options")
    except ValueError as err:
        raise OptionError(str(err)) from err
    with lease_mod.released_after():  # (also if a Ctrl-C skipped the lease's own release)
        return _gc(os.fspath(url), dry_run, storage_options, seconds)


def _gc(
    url: str, dry_run: bool, storage_options: dict[str, Any] | None, seconds: float
) -> GcReport:
    fs, root = storage.resolve(url, storage_options)
    report = GcReport(storage.to_url(fs, root), dry_run)
    if not storage.exists(fs, root):
        absent = faults.absent_hint(fs, root)  # (a bucket missing, memory://)
        raise ManifestError(f"{report.url} does not exist: check the path{absent}")
    if not storage.isdir(fs, root):  # (listing a file lists it: manifest.json looked right)
        raise ManifestError(
            f"{report.url} is {_file_kind(fs, root)}, not a snapshot: give the snapshot's "
            f"directory (the one holding {MANIFEST_NAME})"
        )
    _check_is_snapshot(fs, root, report.url)
    held: lease_mod.Lease | None = None
    holder: lease_mod.LeaseInfo | None
    leases = None  # the bytes of a _runs/ of released leases only, all the snapshot holds
    # but empty shards/ and _versions/ (gc_leases): they go, and so does it
    if dry_run:
        holder = lease_mod.current(fs, root)
        if holder is not None and not lease_mod.is_alive(holder):
            holder = None
    else:
        for tries in range(1, 4):  # (a lease removed between the refusal and the read: again)
            try:
                got = lease_mod.try_acquire(fs, root)
            except StorageError as err:
                raise no_room_for_lease(report.url, err) or cannot_write(report.url, err) from err
            held, holder = (got, None) if isinstance(got, lease_mod.Lease) else (None, got)
            if holder is None or not holder.absent:
                break
            if tries == 3:  # (nothing holds it, and removing without it is not safe)
                raise lease_mod.absent_error(fs, root, holder.epoch, tries)
            time.sleep(0.5 * tries)
    try:
        live_run = holder.holder.get("run") if holder is not None else None
        if holder is not None:
            report.writer = {"holder": holder.describe(), "run": live_run}
            report.note = f"a live writer ({holder.describe()}) holds the snapshot; its run " + (
                f"{live_run} is kept" if live_run else "is not chosen yet, so every run is kept"
            )
        report.garbage, report.kept_runs, restored = find_garbage(
            fs,
            root,
            live_run,
            holder is not None,
            seconds,
            dry_run=dry_run,
            kept_until=report.kept_versions,
        )
        uploads, unlisted = gc_uploads.unfinished(fs, root, live_run, bool(holder) and not live_run)
        report.garbage += [Garbage(rel, "upload", n, gc_uploads.WHY) for rel, n in uploads]
        report.note = "; ".join(filter(None, [report.note, restored, unlisted])) or None
        watch = gc_watch.Watch(fs, root, holder) if holder is not None else None
        report.garbage = watch.spare(report.garbage) if watch else report.garbage
        # (a run's state before its shards: one of another user's, which this user may not
        # remove, stops gc before its shards go; shards left without their run's state are
        # the next gc's to remove)
        if not dry_run:
            for done, g in enumerate(report.garbage):
                if watch is not None and watch.due(done, g) and watch.taken_over():
                    report.garbage = report.garbage[:done]
                    report.note = "; ".join(filter(None, [report.note, gc_watch.STOPPED]))
                    break
                try:
                    gc_uploads.remove(fs, root, g.path, g.kind)
                except StorageError as err:
                    where = storage.to_url(fs, storage.join(root, g.path))
                    raise cannot_write(report.url, err, where, report.garbage[:done]) from err
                except KeyboardInterrupt:  # (Ctrl-C, SIGTERM: said as "interrupted" alone)
                    if done:
                        logging.getLogger("snapshot_cli").warning(
                            "snap gc of %s was interrupted%s; run it again to finish",
                            report.url, removed_before(report.garbage[:done]))  # fmt: skip
                    raise
        own = held.epoch if held is not None else None
        gone = frozenset(g.path for g in report.garbage)  # (removed, or a dry run's)
        if holder is None and (found := gc_leases.leases_only(fs, root, own, gone)) is not None:
            size, empty = found  # (empty shards/, _versions/ first, while the lease is held)
            try:
                removed = dry_run or gc_leases.remove_empty(fs, root, empty)
            except StorageError as err:
                raise cannot_write(report.url, err) from err
            if removed:
                leases = size
                kinds = {SHARDS_DIR: "shard", VERSIONS_DIR: "version"}
                why = gc_leases.WHY_EMPTY
                report.garbage += [Garbage(name, kinds[name], 0, why) for name in empty]
                report.garbage.append(Garbage(RUNS_DIR, "run", leases, gc_leases.WHY))
    finally:
        if held is not None:
            held.release(remove=leases is not None)
    if held is not None and leases is not None:
        gc_leases.remove_runs_dir(fs, root)
    return report


def _file_kind(fs: AbstractFileSystem, path: str) -> str:
    """What a file given to gc as the snapshot is: a shard of one, another tool's, a file."""
    above = posixpath.dirname(posixpath.dirname(path))
    if posixpath.basename(posixpath.dirname(path)) == SHARDS_DIR and storage.exists(
        fs, storage.join(above, MANIFEST_NAME)
    ):
        return f"a shard of the snapshot {storage.to_url(fs, above)}"
    return other_formats.file_kind(fs, path) or "a file"


def _uncommitted_copies(fs: AbstractFileSystem, root: str) -> tuple[set[str], set[str]]:
    """For a snapshot never committed: the shards and runs of the copies in ``_versions/``
    (a first commit being made, or cut short between its copy and ``manifest.json``: the
    same create commits it), kept, as what any kept version references is."""
    copies = [versions.read_listed(fs, root, k) for k in versions.kept(fs, root)]
    shards = {s.path for m in copies if m is not None for s in m.shards}
    return shards, {m.run for m in copies if m is not None}


def _check_is_snapshot(fs: AbstractFileSystem, root: str, url: str) -> None:
    """Refuse, before the lease is written, a directory gc must not remove anything from: one
    that is no snapshot (a WebDataset folder's ``shards/``, a ``_runs/`` of experiments lost
    their files) or one whose directories link out of it (gc deleted through them)."""
    names = storage.list_names(fs, root)
    if storage.is_local(fs):
        for name in (SHARDS_DIR, RUNS_DIR, VERSIONS_DIR):
            path = storage.join(root, name)
            if name in names and os.path.islink(path):
                raise ManifestError(
                    f"{storage.to_url(fs, path)} is a link to {os.path.realpath(path)}: gc "
                    "removes nothing through a link (it could delete files outside the "
                    "snapshot); copy the snapshot's files into it (cp -rL) and remove the link"
                )
    commit_mod.read_manifest(fs, root)  # (damaged, or not snap's: said before any write)
    if MANIFEST_NAME in names:
        return
    runs = storage.list_names(fs, layout.runs_dir(root)) if RUNS_DIR in names else []
    if any(layout.lease_epoch(n) is not None for n in runs) or runs_mod.find_runs(fs, root):
        return  # an unfinished snapshot: what a stopped create left
    raise ManifestError(
        f"{url} is not a snapshot (no {MANIFEST_NAME}, and no run or lease of a snap create "
        f"in _runs/): gc removes nothing there{faults.inside_snapshot(fs, root)}"
    )
