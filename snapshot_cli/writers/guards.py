"""Where a create must not go on, and how it waits for another writer's lease.

An OUTPUT that is a file, holds other files, or whose ``shards/``, ``_runs/``, ``_versions/``
or ``manifest.json`` is a link out of it (where no reader would read what the create wrote)
is refused before any work (:func:`check_output`). A create called while a worker process
imports the pipeline's module, or while a "spawn" / "forkserver" child re-runs its parent's
script, can only deadlock on its parent: it fails at once (:func:`refuse_nested`). Otherwise
a create waits for the writer lease of its snapshot while another live writer holds it,
saying so (:func:`wait_for_lease`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import multiprocessing
import os
import posixpath
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fsspec import AbstractFileSystem

from .. import faults, interrupted, layout, literal, storage
from ..errors import OptionError, SnapError, SnapshotExistsError, StorageError
from ..hidden_frames import HIDDEN
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR, VERSIONS_DIR
from ..local_files import denies_write, link_out_of, mode_of, write_hint
from ..manifest import Manifest
from ..os_paths import cwd_deleted
from ..shortages import no_room
from . import commit as commit_mod
from . import importing
from . import lease as lease_mod
from . import worker as worker_mod

log = logging.getLogger("snapshot_cli")


def check_output(fs: AbstractFileSystem, root: str) -> None:
    """Refuse, before anything is computed or written, an OUTPUT a create must not write:
    a file, a directory holding other files (:func:`.commit.check_output`), or a local one
    whose own directories or manifest lead out of it through a link (shards on a bigger disk
    by ``ln -s``): every reader refuses a snapshot's file outside it, so the create would
    report success, or "up to date", for a snapshot nothing can read."""
    commit_mod.check_output(fs, root)
    if not storage.is_local(fs):
        return
    if (url := literal.meant_url(root)) is not None and not os.path.lexists(root):
        raise OptionError(  # (a local directory named "gs:", made with exit 0: a probe)
            f"OUTPUT {root} is a local path; did you mean {url}? (to write a local directory "
            "of that name, make it first)"
        )
    for name in (SHARDS_DIR, RUNS_DIR, VERSIONS_DIR, MANIFEST_NAME):
        path = storage.join(root, name)
        there = mode_of(path, follow=False) is not None  # (EIO: raised, not "not there")
        if there and (real := link_out_of(root, path)) is not None:
            raise SnapshotExistsError(
                f"{storage.to_url(fs, path)} is a link to {real}, outside the snapshot (a "
                "snapshot's files are read only inside it, whoever made it): no reader "
                "would read the files there, nor what this create writes. To keep the "
                "snapshot on another disk, make OUTPUT itself the link (move all of the "
                "snapshot to a directory there and link OUTPUT to it), or put a copy of what "
                "the link points to in its place (cp -rL); nothing was written"
            )


def bootstrapping() -> bool:
    """True while a multiprocessing "spawn"/"forkserver" child re-runs its parent's script."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


_GUARD = (
    'put the code that runs snap.create under\n\n    if __name__ == "__main__":\n\n'
    "so that it runs only when the script is started, not when another process imports it"
)


def refuse_in_import(url: str) -> None:
    """Fail at once where a create runs at the top level of a file snap imports to find a
    function in (``snap create script.py:fn`` of a script that calls snap.create itself): it
    was the script's whole create, run by surprise, and failed as another one ("holds a
    snapshot made with different pipeline code; pass --overwrite", which changed nothing)."""
    if worker_mod.IMPORTING:  # (a worker's import: said as such)
        refuse_nested(url)
    if (target := importing.loading()) is not None:
        raise OptionError(
            f"snap.create({url!r}) was called at the top level of {target!r}, which snap "
            "imported to find a function in: put the code that runs snap.create under\n\n"
            '    if __name__ == "__main__":\n\nso that it runs when the script is run, not '
            "when snap imports it for its functions"
        )


def refuse_nested(url: str) -> None:
    """Fail at once, not wait forever, where a create can only deadlock on its parent."""
    if worker_mod.IMPORTING:
        raise OptionError(
            f"snap.create({url!r}) was called inside a snap worker process, while it imported "
            f"the pipeline's module: {_GUARD}"
        )
    if bootstrapping():
        raise OptionError(
            f"snap.create({url!r}) was called while this process "
            f"({multiprocessing.current_process().name}), started by multiprocessing's "
            f"'spawn' or 'forkserver' method, re-ran its parent's script, and the snapshot is "
            f"not ready yet: {_GUARD}"
        )


def refuse_unwritable(fs: Any, root: str, url: str) -> None:
    """On local disk, before the lease: a StorageError if this user may not write the
    snapshot's directory, ``shards/``, ``_versions/`` or ``_runs/`` (another user's, made
    under umask 022), naming the first and the ``chmod -R`` of the whole snapshot. Such a
    create waited out the other user's whole run before failing at its lease, and the lease
    named only ``_runs/``: after its chmod, the next try was refused at the snapshot's."""
    if not storage.is_local(fs):
        return
    for name in ("", SHARDS_DIR, VERSIONS_DIR, RUNS_DIR):
        directory = storage.join(root, name) if name else root
        try:
            denied = denies_write(directory)
        except OSError as err:  # (a look that failed, EIO or ENOMEM: no permission said)
            raise storage.fault(err, directory) from err
        if denied:
            hint = write_hint(directory, "run the same command as {owner}", tree=root)
            raise StorageError(f"cannot add to {url}: {hint}")


def warn_missing_bucket(fs: Any, root: str, url: str) -> None:
    """A dry run's word that OUTPUT's bucket does not exist (the create it plans would fail
    at once): it said "would become version 1 ... (nothing done)" and exited 0."""
    if missing := faults.missing_bucket_hint(fs, root):
        log.warning("%s: a create would fail: %s (create it, or check the URL)", url,
                    missing.removeprefix("; "))  # fmt: skip


def output_missing(fs: Any, root: str) -> bool:
    """Whether OUTPUT does not exist yet: a create that makes it removes it again, empty, if
    it fails before its run begins (:func:`remove_made`)."""
    return not storage.exists(fs, root)


def first_alone(fs: Any, root: str, epoch: int) -> bool:
    """Whether the lease of ``epoch`` is the first ever taken of the snapshot and ``_runs/``
    holds nothing else: only then may a create that failed before its run remove it. Else
    the next create would take an epoch again that a writer it took over (paused, not dead)
    holds, and resume that writer's run under the same shard names."""
    names = storage.list_names(fs, storage.join(root, RUNS_DIR))
    return epoch == 0 and names == [posixpath.basename(layout.lease_path(root, 0))]


def remove_made(fs: Any, root: str, made: bool) -> None:
    """After a create that failed before its run began let go of its lease, removing it and
    ``_runs/``: OUTPUT too if the create ``made`` it (:func:`output_missing`) and it is empty
    (a lease-only directory, said to be an unfinished snapshot, was left)."""
    if made and storage.is_local(fs):
        with contextlib.suppress(OSError):  # (not empty: another writer's files, kept)
            os.rmdir(root)


def unmade(fs: Any, root: str) -> list[str]:
    """The local directories taking the lease makes (``_runs/``, OUTPUT, its parents) that
    do not exist yet, innermost first; none elsewhere. A look that fails (EIO) ends the list:
    what cannot be told made is not removed."""
    made: list[str] = []
    path = layout.runs_dir(root)
    while storage.is_local(fs) and os.path.dirname(path) != path:
        try:
            interrupted.again(functools.partial(os.lstat, path))
            break
        except FileNotFoundError:
            made.append(path)
            path = os.path.dirname(path)
        except OSError:
            break
    return made


def remove_unmade(made: list[str]) -> None:
    """Remove the directories :func:`unmade` listed, innermost first, while they are empty
    (one that is not holds another writer's files: it and those above it stay)."""
    for directory in made:
        try:
            interrupted.again(functools.partial(os.rmdir, directory))
        except FileNotFoundError:
            continue
        except OSError:
            return


WAIT_REPORT_S = 15.0  # a waiting writer says again who holds the lease this often
ABSENT_TRIES = 5  # creates of a lease refused while no file is there before a create gives up


def wait_for_lease(
    fs: Any, root: str, ttl: float, wait: bool, url: str, reusable: Callable[[], Manifest | None]
) -> lease_mod.Lease | Manifest:
    """Take the writer lease, waiting while another live writer holds it (saying so on
    stderr, again every WAIT_REPORT_S), or return the snapshot that writer committed. First,
    a snapshot this user may not add to is refused (:func:`refuse_unwritable`). A create
    that fails before it holds the lease (its file not written: a name too long, a full or
    read-only disk) leaves none of the directories it made for it (:func:`unmade`)."""
    made = unmade(fs, root)
    try:
        return _wait_for_lease(fs, root, ttl, wait, url, reusable)
    except KeyboardInterrupt as stop:  # (Ctrl-C to give up: nothing to resume, said so)
        remove_unmade(made)
        where = "while waiting for the writer lease; nothing was written"
        stop.snap_while = where  # type: ignore[attr-defined]
        raise
    except StorageError as err:
        remove_unmade(made)
        if (room := no_room(err)) is None:
            raise
        raise StorageError(  # (the storage's advice said "it resumes": nothing had begun)
            f"cannot take the writer lease of {url}, a small file in {RUNS_DIR}/ written before "
            f"anything else ({str(err).split('; ', 1)[0]}): {room[0]}; nothing "
            "was written: free space (or inodes) there, then run the same command again"
        ) from err
    except BaseException:
        remove_unmade(made)
        raise


def _wait_for_lease(
    fs: Any, root: str, ttl: float, wait: bool, url: str, reusable: Callable[[], Manifest | None]
) -> lease_mod.Lease | Manifest:
    storage.makedirs(fs, root)
    refuse_unwritable(fs, root, url)
    said, absent = -float("inf"), 0
    while True:
        got = lease_mod.try_acquire(fs, root, ttl, watch=wait)  # (one look: the clocks decide)
        if isinstance(got, lease_mod.Lease):
            return got
        absent = absent + 1 if got.absent else 0
        if absent >= ABSENT_TRIES or got.absent and not wait:
            raise lease_mod.absent_error(fs, root, got.epoch, absent)
        who = got.describe()
        if not wait:
            raise lease_mod.LeaseError(
                f"another snap create is writing {url}: {who}; wait for it to finish"
            )
        h = got.holder
        if h.get("host") == socket.gethostname() and h.get("pid") == os.getppid():
            raise lease_mod.LeaseError(
                f"the writer lease of {url} is held by this process's parent ({who}), which "
                f"waits for this process: waiting would never end. {_GUARD[0].upper()}"
                f"{_GUARD[1:]}"
            )
        if time.monotonic() - said >= WAIT_REPORT_S:
            log.warning(
                "waiting for the writer lease of %s, held by %s; it is taken over if that "
                "writer stops (Ctrl-C to give up)",
                url,
                who,
            )
            said = time.monotonic()
        time.sleep(min(2.0, ttl / 10))
        if (m := reusable()) is not None:  # the other writer committed what we wanted
            return m


F = TypeVar("F", bound=Callable[..., Any])


def faults_answered(fn: F) -> F:
    """OS errors of ``fn`` (full, read-only, denied...) as StorageErrors, threads unstarted."""

    @functools.wraps(fn)
    def wrapper(pipeline: Any, output: str | os.PathLike[str], **options: Any) -> Any:
        __tracebackhide__ = HIDDEN  # (snap's frames in a notebook: hidden_frames.py)
        try:
            return fn(pipeline, output, **options)
        except OSError as err:
            if isinstance(err, SnapError):
                raise
            if err.filename is None and err.errno == errno.ENOENT and cwd_deleted():
                raise StorageError(
                    f"snap.create of {output} failed ({err}): the current directory was "
                    "deleted, and this create needed it: cd (os.chdir) to a directory that "
                    "exists, then run it again"
                ) from err
            raise storage.fault(err, os.fspath(output)) from err
        except RuntimeError as err:
            fewer = "" if options.get("workers") == 0 else "use fewer --workers"  # (0: none)
            faults.raise_no_thread(f"create of {output}", err, fewer)
            raise

    return wrapper  # type: ignore[return-value]
