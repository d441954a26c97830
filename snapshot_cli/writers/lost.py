"""The shards of a snapshot's last version that a reader would not find: deleted, cut short,
or (local) refused by readers, such as a link out of the snapshot. A create of the same
snapshot computes their tasks again, so that "up to date" means readable."""

from __future__ import annotations

import contextlib
import logging
import os

from fsspec import AbstractFileSystem

from .. import layout, storage
from ..errors import SnapError, SnapshotExistsError
from ..local_files import link_out_of
from ..manifest import Manifest
from ..progress import counted
from .options import overwrite_said

log = logging.getLogger(__name__)


def lost_shards(fs: AbstractFileSystem, root: str, m: Manifest) -> dict[str, str]:
    """The shards of version ``m`` a reader of it would not find, each with why (one
    listing): deleted or lost, cut short, or (local) no regular file inside the snapshot,
    such as a link out of it, which readers refuse. A create of the same snapshot computes
    their tasks again, so that "up to date" means readable."""
    sizes = storage.entry_sizes(fs, layout.shards_dir(root))
    lost = {}
    for entry in m.shards:
        size = sizes.get(entry.path.rsplit("/", 1)[-1])
        if size != entry.bytes:
            lost[entry.path] = (  # (bytes appended to one: not "cut short", a probe)
                "missing" if size is None else "cut short" if size < entry.bytes else "longer"
            )
    if storage.is_local(fs):
        lost.update(_refused_here(root, [e.path for e in m.shards if e.path not in lost]))
    return lost


def _refused_here(root: str, paths: list[str]) -> dict[str, str]:
    """Of the local shards ``paths``, those readers refuse, with why: a link out of the
    snapshot, or no regular file. Only what the listing shows to be a link or no regular
    file is looked at closer (36 us a shard otherwise: 0.5 s of 12,800)."""
    real_root, shards = os.path.realpath(root), layout.shards_dir(root)
    try:
        if link_out_of(root, shards, real_root) is None:
            with os.scandir(shards) as listing:
                odd = {e.name for e in listing if not e.is_file(follow_symlinks=False)}
            paths = [path for path in paths if path.rsplit("/", 1)[-1] in odd]
    except OSError:
        return {}
    refused = {}
    for path in paths:
        local = storage.join(root, path)
        with contextlib.suppress(OSError, SnapError):  # (gone since: the reader says)
            if (real := link_out_of(root, local, real_root)) is not None:
                refused[path] = f"is a link out of the snapshot, to {real}"
            elif problem := storage.local_file_problem(root, local, real_root):
                refused[path] = problem
    return refused


def say_lost(url: str, m: Manifest, lost: dict[str, str]) -> None:
    """For a snapshot up to date but for shards ``lost``: a warning that their tasks are
    computed again (a new version), or, made before versions (no task table), refused."""
    what, shown = said(lost)
    if m.history is None:
        raise SnapshotExistsError(
            f"{url} is up to date but {counted(len(lost), 'shard')} of it "
            f"{'is' if len(lost) == 1 else 'are'} {what} ({shown}); it was made "
            f"before snapshots had versions: pass {overwrite_said()} to make it anew"
        )
    log.warning("%s: %s of version %d %s (%s); computing their tasks again",
                url, counted(len(lost), "shard"), m.version, what, shown)  # fmt: skip


def said(lost: dict[str, str], missing: str = "missing") -> tuple[str, str]:
    """What the shards ``lost`` are, as a phrase ("missing or cut short", ``missing`` the
    word for an absent one), and the first three of them, with why where that is no plain
    absence or truncation."""
    gone = ("missing", "cut short", "longer")
    kinds = [missing, "cut short"] + ["longer than written"] * ("longer" in lost.values())
    kinds += ["refused by readers"] * any(why not in gone for why in lost.values())
    what = f"{', '.join(kinds[:-1])} or {kinds[-1]}"
    shown = ", ".join(p if lost[p] in gone else f"{p} {lost[p]}" for p in sorted(lost)[:3])
    return what, shown + (f", ... ({len(lost)} in all)" if len(lost) > 3 else "")


def intact_shards(fs: AbstractFileSystem, root: str, previous: Manifest | None) -> set[str] | None:
    """The last version's shards that are there at their size (None for no last version):
    only tasks whose shards all are can be reused."""
    if previous is None:
        return None
    return {e.path for e in previous.shards} - set(lost_shards(fs, root, previous))
