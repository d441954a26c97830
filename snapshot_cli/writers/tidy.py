"""The commit and what follows it: the run state removed, and the shards no kept version
references; a signal meanwhile ends neither half-way (:func:`committed`)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable

from fsspec import AbstractFileSystem

from .. import layout, signals, storage, versions
from ..errors import ManifestError, SnapError
from ..layout import SHARDS_DIR
from ..manifest import Manifest
from . import commit as commit_mod

log = logging.getLogger(__name__)


def cleanup_after_commit(fs: AbstractFileSystem, root: str, manifest: Manifest) -> None:
    """Remove run state, and the shards no kept version references.

    Called while holding the lease, so no live writer is using any of it: what goes are the
    partial shards of writers that died and of abandoned runs, never visible to a reader. The
    shards of the versions this one replaces stay for readers still replaying them, until
    ``snap gc`` removes them after its retention period.

    The snapshot is committed already, so a fault here (a full or failing disk) does not fail
    the create: it is logged as a warning, and ``snap gc`` removes the rest later.
    """
    try:
        # (snap's run ids only, as gc: other files and folders in _runs/ are not snap's)
        runs = [n for n in storage.list_names(fs, layout.runs_dir(root)) if layout.is_own_run(n)]
        current = {s.path for s in manifest.shards}
        shards_dir = storage.join(root, SHARDS_DIR)
        # What a run still in _runs/ wrote and this version does not name: a dead writer's
        # or an abandoned run's. The shards of committed runs (their run directories went at
        # their commit) stay for the versions that name them, and reading every kept
        # version's manifest to tell (each commit: a one-input grow took 1.5-1.9 s at 600
        # versions) is needed only for a run a failed cleanup left: such files only.
        left = [n for n in storage.list_names(fs, shards_dir) if f"{SHARDS_DIR}/{n}" not in current
                and any(layout.is_shard_of(n.lstrip("."), run) for run in runs)]  # fmt: skip
        if left:
            keep = {s.path for m in versions.history(fs, root, manifest) for s in m.shards}
            for name in left:
                if f"{SHARDS_DIR}/{name}" not in keep:
                    storage.remove(fs, storage.join(shards_dir, name))
        for name in runs:  # (last: a fault before leaves the runs that tell their shards)
            storage.remove(fs, layout.run_dir(root, name), recursive=True)
    except (OSError, ManifestError, KeyboardInterrupt) as err:  # (Ctrl-C, SIGTERM: it is done)
        said = "was interrupted" if isinstance(err, KeyboardInterrupt) else "failed: " + str(
            err if isinstance(err, SnapError) else storage.fault(err, "the snapshot"))  # fmt: skip
        url = storage.to_url(fs, root)
        log.warning(f"the snapshot is committed, but removing what it no longer needs {said}; "
                    f"run snap gc {url} later to free that space")  # fmt: skip


def committed(
    fs: AbstractFileSystem,
    root: str,
    manifest: Manifest,
    replaces: Manifest | None,
    release: Callable[[], None],
    held: Callable[[], None] | None = None,
) -> None:
    """Commit ``manifest`` (replacing ``replaces``; ``held`` raises if the lease was lost), tidy
    after it and ``release`` the lease,
    SIGINT, SIGTERM and SIGHUP held meanwhile (:func:`.signals.held`): one raised in the
    commit's last steps, manifest.json in place, was said as "interrupted; run the same
    command again to resume" of a committed snapshot (exit 130). The create ends as made
    and says it came (a command says it itself: :func:`.signals.settle`); a second one stops
    a commit that hangs, or the tidying (``snap gc`` finishes it).
    """
    with signals.held() as noted:
        commit_mod.commit(fs, root, manifest, replaces=replaces, held=held)
        signals.settle(noted)  # (a command's handlers: a signal from now on ends it as made,
        cleanup_after_commit(fs, root, manifest)  # once these are back, too)
        release()
    if noted and not signals.in_command():
        signum = noted[0]
        said = "a Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
        version = manifest.history.version if manifest.history else 1
        log.warning(f"{said} came during the commit, which it did not stop: the snapshot is "
                    f"committed (version {version})")  # fmt: skip
