"""What ``snap gc`` removes of a snapshot that holds nothing but what creates that never got to
a run left: ``_runs/`` of leases their writers released, beside ``shards/`` and
``_versions/`` that are empty (a first create killed, then gc removing its dead run and its
shards: the next gc found an empty ``shards/`` and kept all, and inspect went on calling
gc's own lease an unfinished snapshot's writer). Never a snapshot holding anything else: a
file of anyone's, a directory of another name, or one of these holding a file.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os

from fsspec import AbstractFileSystem

from .. import interrupted, layout, storage
from ..layout import RUNS_DIR, SHARDS_DIR, VERSIONS_DIR
from . import lease as lease_mod

EMPTY_DIRS = (SHARDS_DIR, VERSIONS_DIR)  # what may be beside such a _runs/, if empty
WHY = "nothing but released leases: of gc, or of creates that stopped, no run of theirs left"
WHY_EMPTY = "empty, in a snapshot holding nothing else but released leases"


def leases_only(
    fs: AbstractFileSystem, root: str, own: int | None, gone: frozenset[str] = frozenset()
) -> tuple[int, list[str]] | None:
    """The bytes of ``_runs/`` and the empty directories beside it (of :data:`EMPTY_DIRS`) if
    the snapshot holds nothing else, and ``_runs/`` nothing but leases every writer released
    (creates that failed before their run began; ``own``: gc's, held), else None. Not a lease
    that is not released: its writer may only be paused, and removed, the next create would
    take its epoch again and could resume a run it then starts under the shard names that
    writer gives (two writers of one name). ``gone``: what gc removes first (its paths in
    the snapshot), taken as gone already (a dry run's: it left these out)."""

    def listed(path: str) -> list[str]:
        return [n for n in storage.list_names(fs, storage.join(root, path) if path else root)
                if (f"{path}/{n}" if path else n) not in gone]  # fmt: skip

    names = listed("")
    if RUNS_DIR not in names or not set(names) <= {RUNS_DIR, *EMPTY_DIRS}:
        return None
    empty = [n for n in names if n != RUNS_DIR]
    for name in empty:  # (a file named shards: not a snapshot's, kept)
        if not storage.isdir(fs, storage.join(root, name)) or listed(name):
            return None
    sizes = storage.entry_sizes(fs, layout.runs_dir(root))
    runs = {n: size for n, size in sizes.items() if f"{RUNS_DIR}/{n}" not in gone}
    for name in runs:
        epoch = layout.lease_epoch(name)
        if epoch is None or (epoch != own and not lease_mod.released(fs, root, epoch)):
            return None
    return sum(runs.values()), empty


def remove_empty(fs: AbstractFileSystem, root: str, names: list[str]) -> bool:
    """Remove the directories ``names`` of the snapshot while they are empty (under gc's
    lease); False, the rest kept, at one that is not (a file put there since: the leases
    stay too). Locally by ``rmdir``, which removes no file; elsewhere listed again first."""
    for name in names:
        path = storage.join(root, name)
        if storage.is_local(fs):
            try:
                interrupted.again(functools.partial(os.rmdir, path))
            except FileNotFoundError:
                continue
            except OSError as err:
                if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return False
                raise storage.fault(err, path) from err
        elif storage.list_names(fs, path):
            return False
        else:  # (recursive: HDFS removes no directory without; this one lists empty)
            storage.remove(fs, path, recursive=True)
    return True


def remove_runs_dir(fs: AbstractFileSystem, root: str) -> None:
    """After gc let go of the last lease of such a snapshot: its ``_runs/`` where the storage
    keeps an empty directory (in memory, HDFS; the lease's release removed it on local disk).
    Not under the lease any more: only by a removal that refuses a directory holding a file
    (a create's lease written since), and as tidying, never an error."""
    path = layout.runs_dir(root)
    if storage.is_local(fs):
        return
    with contextlib.suppress(Exception):  # (pyarrow's HDFS removes no directory so: kept)
        if storage.isdir(fs, path) and not storage.list_names(fs, path):
            storage.remove(fs, path)
