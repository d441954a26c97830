"""OUTPUT moved or deleted while a create writes it (``mv out elsewhere/``, ``rm -r out``, an
object store's prefix copied and deleted): the writer's lease file, or its run's
``run.json``, is gone. The lease's heartbeat notices (:meth:`.lease.Lease.beat`); the
writer stops and says so (:func:`gone`), and removes what its tasks wrote at the old path
before it noticed (:func:`remove_left_behind`): every write makes its parent directories,
so they made the old path again. The moved copy keeps the run's state, so the same create
with the new OUTPUT resumes its finished tasks.
"""

from __future__ import annotations

import contextlib
import os

from fsspec import AbstractFileSystem

from .. import layout, storage


def gone(fs: AbstractFileSystem, root: str, epoch: int, run: str | None, lease_there: bool) -> str:
    """What a create says when its lease file (``lease_there`` False) or its run's
    ``run.json`` is gone: OUTPUT was moved or deleted, or, where only the lease file went
    (its run is still there), that file was deleted. One look (the run's ``run.json``)."""
    url = storage.to_url(fs, root)
    lease = storage.to_url(fs, layout.lease_path(root, epoch))
    if lease_there:
        what = f"its run state {storage.to_url(fs, layout.run_dir(root, run or ''))} is"
    elif run and storage.exists(fs, layout.run_file(root, run)):
        return (
            f"this create's writer lease {lease} was deleted while it ran (by hand, or by a "
            f"tool that tidies {url}): it stopped and committed nothing, as another create "
            "could have started there meanwhile; run the same command to resume it"
        )
    else:
        what = f"its writer lease {lease} is"
    return (
        f"{url} was moved or deleted while this create ran ({what} gone): it stopped and "
        "committed nothing. If you moved it, run the same create with the new OUTPUT: it "
        "resumes the tasks that had finished; if you deleted it, run it again to start over"
    )


def remove_left_behind(
    fs: AbstractFileSystem, root: str, run: str, epoch: int, lease_id: str
) -> None:
    """Remove, by their exact names, what the writer of ``run`` under lease ``epoch`` wrote at
    the old path ``root`` after OUTPUT went away (its shards, which carry both in their
    names; its run's directory; a task table of its commit; a lease file a heartbeat made
    again) and the local directories that leaves empty. Nothing where a manifest or the
    run's ``run.json`` is (only the lease file was deleted: the run resumes there). A fault
    leaves the rest for ``snap gc``."""
    if not layout.is_own_run(run):
        return
    with contextlib.suppress(OSError, ValueError):
        if any(
            storage.exists(fs, p) for p in (layout.manifest_path(root), layout.run_file(root, run))
        ):
            return
        shards, kept = layout.shards_dir(root), layout.versions_dir(root)
        for name in storage.list_names(fs, shards):
            base = name[1:].rsplit(".", 2)[0] if layout.is_temporary(name) else name
            if layout.is_shard_of(base, run) and base.endswith(f"-{epoch:08d}.arrow"):
                storage.remove(fs, storage.join(shards, name))
        for name in storage.list_names(fs, kept):  # (its commit's, if the tasks all ended)
            path = storage.join(kept, name)
            if name.endswith(".tasks.json") and f"/{run}-" in _text(fs, root, path):
                storage.remove(fs, path)
        storage.remove(fs, layout.run_dir(root, run), recursive=True)
        lease = layout.lease_path(root, epoch)
        if f'"{lease_id}"' in _text(fs, root, lease):
            storage.remove(fs, lease)
        if storage.is_local(fs):
            for directory in (shards, kept, layout.runs_dir(root), root):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)  # (only if empty: nothing of anyone else's)


def _text(fs: AbstractFileSystem, root: str, path: str) -> str:
    """A small file of the snapshot as text; empty if it is missing."""
    try:
        return storage.read_own(fs, root, path).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
