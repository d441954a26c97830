"""``snap gc``: remove what no committed manifest references and no live writer uses.

Garbage is left by writers that died (partial shards, task results of a run nobody will
resume), by ``--overwrite`` runs interrupted before their commit, and by stray temporary
files of atomic writes. A commit already cleans up after itself; gc is for the rest.

Safety: gc takes the snapshot's writer lease, the same one ``snap create`` takes, so no
writer can start (and adopt a run) while files go. If a live writer holds the lease, gc
keeps that writer's run (its directory and every shard named after it) and removes only
what belongs to other, dead runs; a writer that has not yet chosen its run keeps everything.
Shards of the committed manifest are never touched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, storage
from ..errors import ManifestError
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR
from . import commit as commit_mod
from . import lease as lease_mod


@dataclass
class Garbage:
    path: str  # relative to the snapshot
    kind: str  # "shard", "run" or "temporary"
    bytes: int
    reason: str


@dataclass
class GcReport:
    url: str
    dry_run: bool
    garbage: list[Garbage] = field(default_factory=list)
    kept_runs: list[str] = field(default_factory=list)
    writer: dict[str, Any] | None = None
    note: str | None = None

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.garbage)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.url,
            "dry_run": self.dry_run,
            "removed" if not self.dry_run else "would_remove": [asdict(g) for g in self.garbage],
            "bytes": self.bytes,
            "kept_runs": self.kept_runs,
            "writer": self.writer,
            "note": self.note,
        }


def find_garbage(
    fs: AbstractFileSystem, root: str, live_run: str | None, writer_live: bool
) -> tuple[list[Garbage], list[str]]:
    """What gc would remove given the live writer's run, and the runs it keeps."""
    manifest = commit_mod.read_manifest(fs, root)  # ManifestError if damaged: stop there
    referenced = {s.path for s in manifest.shards} if manifest else set()
    keep_all = writer_live and live_run is None
    runs = storage.entry_sizes(fs, storage.join(root, RUNS_DIR))
    # lease files and the dot-named temporaries of atomic writes are not runs
    run_names = [n for n in runs if layout.is_run_name(n)]
    kept = sorted(n for n in run_names if keep_all or n == live_run)
    garbage = [
        Garbage(f"{RUNS_DIR}/{name}", "run", runs[name], "state of a dead run")
        for name in sorted(run_names)
        if name not in kept
    ]
    for name, size in sorted(storage.entry_sizes(fs, storage.join(root, SHARDS_DIR)).items()):
        rel = f"{SHARDS_DIR}/{name}"
        if rel in referenced or keep_all or (live_run and layout.is_shard_of(name, live_run)):
            continue
        if name.startswith("."):
            reason = "temporary file of an interrupted write"
            garbage.append(Garbage(rel, "temporary", size, reason))
        else:
            reason = "not in the committed manifest" if manifest else "no committed manifest"
            garbage.append(Garbage(rel, "shard", size, reason))
    for name, size in sorted(storage.entry_sizes(fs, root).items()):
        if layout.is_temporary(name):
            garbage.append(Garbage(name, "temporary", size, "temporary file of an atomic write"))
    return garbage, kept


def gc(url: str, dry_run: bool = False, storage_options: dict[str, Any] | None = None) -> GcReport:
    """Remove (or with ``dry_run`` list) the garbage of the snapshot at ``url``."""
    fs, root = storage.resolve(url, storage_options)
    report = GcReport(storage.to_url(fs, root), dry_run)
    if not storage.exists(fs, root):
        raise ManifestError(f"{report.url} does not exist")
    names = storage.list_names(fs, root)
    if MANIFEST_NAME not in names and RUNS_DIR not in names and SHARDS_DIR not in names:
        raise ManifestError(
            f"{report.url} is not a snapshot (no {MANIFEST_NAME}, shards or runs): nothing to do"
        )
    held: lease_mod.Lease | None = None
    holder: lease_mod.LeaseInfo | None
    if dry_run:
        holder = lease_mod.current(fs, root)
        if holder is not None and not lease_mod.is_alive(holder):
            holder = None
    else:
        got = lease_mod.try_acquire(fs, root)
        held, holder = (got, None) if isinstance(got, lease_mod.Lease) else (None, got)
    try:
        live_run = holder.holder.get("run") if holder is not None else None
        if holder is not None:
            report.writer = {"holder": holder.describe(), "run": live_run}
            report.note = f"a live writer ({holder.describe()}) holds the snapshot; its run " + (
                f"{live_run} is kept" if live_run else "is not chosen yet, so every run is kept"
            )
        report.garbage, report.kept_runs = find_garbage(fs, root, live_run, holder is not None)
        if not dry_run:
            for g in report.garbage:
                storage.remove(fs, storage.join(root, g.path), recursive=g.kind == "run")
    finally:
        if held is not None:
            held.release()
    return report
