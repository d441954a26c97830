"""What ``snap gc`` says when it may not write: gc takes the lease and deletes files, so it
needs write access where reading the snapshot does not; on local disk the whole path and the
directory this user may not write, with its owner."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

from ..errors import StorageError
from ..local_files import denies_write, write_hint
from ..retry import status_of
from ..shortages import no_room


def cannot_write(
    url: str, err: StorageError, where: str | None = None, removed: Sequence[Any] = ()
) -> StorageError:
    """A refused write as gc's to answer: the storage's own advice ("choose another OUTPUT")
    is a writer's. gc takes the lease and deletes files, so it needs write access; reading
    the snapshot does not. ``where``: what was being removed, if the error does not say;
    ``removed``: what gc removed before (its Garbage), said (it said "cannot remove
    anything" after removing a run's state). On local disk the error names the whole path
    (a recursive removal's says only a file's name) and the directory this user may not
    write, with its owner."""
    cause = err.__cause__
    status = None if cause is None else status_of(cause)
    denied = isinstance(cause, PermissionError) or status in (401, 403)  # (S3's AccessDenied)
    before = removed_before(removed)
    if not denied and (
        not isinstance(cause, OSError)
        or cause.errno not in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return StorageError(f"{err}{before}") if before else err
    rofs = isinstance(cause, OSError) and cause.errno == errno.EROFS
    why = "it is on a read-only filesystem" if rofs else "this user may not write there"
    filename = getattr(cause, "filename", None)
    place = filename if isinstance(filename, str) else where or url
    said = getattr(cause, "strerror", None) or " ".join(str(cause).split())
    remedy = "run it as a user who may write there (its owner), or where the filesystem is writable"
    if not rofs and os.path.isabs(url):
        place = _whole_path(place, where)
        if (directory := _blocking_dir(url, where, place)) is not None:
            remedy = write_hint(directory, "run snap gc as {owner}")
    start = (
        f"snap gc stopped partway through {url}"
        if before
        else (f"snap gc cannot remove anything from {url}")
    )
    return StorageError(
        f"{start}: {why} ({said}: {place}). gc takes the snapshot's writer lease "
        f"and deletes files: {remedy}; reading the snapshot (inspect, verify, head, the "
        f"loader) needs no write access{before}"
    )


def no_room_for_lease(url: str, err: StorageError) -> StorageError | None:
    """gc's answer to a full disk (or quota) when it writes its lease, before it removes
    anything: the storage's own advice ("then run the same command again: it resumes") is a
    writer's, and gc is what a user runs to make room. None for any other failure."""
    if (room := no_room(err)) is None:
        return None
    return StorageError(
        f"snap gc cannot take the writer lease of {url}, a small file in _runs/ it writes "
        f"before it removes anything: {room[0]} ({room[1]}). Free a little "
        "space there first: other files, or shards snap gc --dry-run lists (none is in a kept "
        "version), once no snap create is writing the snapshot; then run snap gc again"
    )


def removed_before(removed: Sequence[Any]) -> str:
    """What gc removed before it failed, for its error; "" if nothing."""
    if not removed:
        return ""
    first = ", ".join(g.path for g in removed[:3]) + (", ..." if len(removed) > 3 else "")
    return (
        f" (it removed {len(removed)} item{'s' * (len(removed) > 1)} first: {first}; "
        "snap gc --dry-run lists what is left)"
    )


def _whole_path(name: str, where: str | None) -> str:
    """The local path of ``name``, which a recursive removal of ``where`` names by its file
    name only (``00011.json``: removed relative to its directory)."""
    if os.path.isabs(name) or where is None:
        return name
    for directory, dirs, files in os.walk(where):
        if name in files or name in dirs:
            return os.path.join(directory, name)
    return os.path.join(where, name)


def _blocking_dir(root: str, where: str | None, place: str) -> str | None:
    """The uppermost local directory from the one holding ``where`` (the snapshot ``root``
    if none) down to the one holding ``place`` that this user may not write, if any."""
    top = os.path.dirname(where) if where else root
    chain, directory = [], place if os.path.isdir(place) else os.path.dirname(place)
    while directory not in chain:
        chain.append(directory)
        if directory == top or not directory.startswith(top):
            break
        directory = os.path.dirname(directory)
    return next((d for d in reversed(chain) if denies_write(d)), None)
