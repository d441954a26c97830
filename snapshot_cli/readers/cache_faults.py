"""The shard cache's own directory failing (:mod:`.cache`): told apart from the download's,
and said as the directory's, with what to do.

A full disk (ENOSPC, EDQUOT) is :class:`Full`, which the cache answers by making room and
trying again, then :class:`NoRoom`, which the loader answers by reading the shard without the
cache; any other errno is :class:`Failed`, which the cache names as its directory's error. A
part of the directory that is no directory (a file, a symbolic link to nothing, a loop of
links) is named as such (:func:`blocked`), not its parent.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ..console import named
from ..errors import OptionError, SnapError, StorageError
from ..local_files import (
    held_by_attribute,
    inside,
    owner_of,
    parent_advice,
    unreadable_part,
    unwritable_dir,
    user_name,
    who_of,
)

log = logging.getLogger(__name__)

CACHED_OPEN = 16  # open shards (pinned cache entries) of a loader reading through a cache

FULL = (errno.ENOSPC, errno.EDQUOT)
# What to do, by errno: {option} is the cache directory's option as its caller gave it
# (:func:`option_name`), {pick} the way out that is always there
_HINTS = {
    errno.ENOSPC: "free space there, give {limit} a size below the space free (e.g. "
    "'20GiB'), or {pick}",
    errno.EROFS: "the filesystem is read-only: {pick}",
    errno.EACCES: "this process may not write there (another user's cache?): {pick}",
    errno.EIO: "the disk reported an I/O error: check it, or {pick}",
}
_HINTS[errno.EDQUOT] = _HINTS[errno.ENOSPC].replace("free space", "free some of the quota")
_HINTS[errno.EPERM] = _HINTS[errno.EACCES]
_HINTS[errno.ENOLCK] = ("its filesystem does not take flock locks (NFS, some FUSE mounts): choose "
                        "a {option} on a local disk")  # fmt: skip
_HINTS[errno.EOPNOTSUPP] = _HINTS[errno.ENOLCK]
HINTED = frozenset(_HINTS)  # the errnos with advice of their own


def option_name() -> str:
    """The cache directory's option as the caller gave it: ``--cache-dir`` in a command,
    ``cache_dir`` in Python. Asked where the cache is made (:class:`.cache.ShardCache`): its
    faults are said in the loader's threads and processes, which cannot tell."""
    return named("--cache-dir", "cache_dir")


def limit_name(option: str) -> str:
    """The cache's limit as named beside ``option`` (--cache-limit, or cache_limit)."""
    return "--cache-limit" if option.startswith("--") else "cache_limit"


def pick(option: str) -> str:
    """The way out of any fault of the cache directory: another one, or none."""
    return f"choose another {option} (or none)"


def hint(code: int, option: str) -> str:
    """What to do about errno ``code`` in the cache directory given as ``option``."""
    todo = _HINTS.get(code, "fix that, or {pick}")
    return todo.format(option=option, limit=limit_name(option), pick=pick(option))


class NoRoom(StorageError):
    """The cache directory cannot hold a shard, even with every entry not in use removed (the
    loader then reads that shard without the cache: :meth:`.cache.ShardCache.open_if_room`)."""


class Full(Exception):
    """The cache's filesystem ran out of space (or quota): make room, then try again."""

    def __init__(self, err: OSError) -> None:
        super().__init__(err)
        self.err = err


class Failed(Exception):
    """Any other failure of the cache's directory, while ``doing`` what."""

    def __init__(self, err: OSError, doing: str) -> None:
        super().__init__(err, doing)
        self.err, self.doing = err, doing


def explain(err: OSError, cache_dir: str, option: str) -> tuple[str, str]:
    """What went wrong in the cache directory (``"Read-only file system (EROFS)"``), and what
    to do about it: for a denied permission, what this user may not do where (read another
    user's entry, write another user's directory), whose it is, and what lets users share.
    ``option``: the directory's option as given (:func:`option_name`)."""
    code = errno.errorcode.get(err.errno or 0, "")
    cause = f"{err.strerror or err}{f' ({code})' if code else ''}"
    denied = None
    if err.errno in (errno.EACCES, errno.EPERM) and isinstance(err.filename, str):
        with contextlib.suppress(OSError):
            denied = _denied(err.filename, cache_dir, option)
    return cause, denied or hint(err.errno or 0, option)


# What mkdir says where a part of cache_dir is there but is no directory: a file, a link to
# nothing (EEXIST, or ENOENT below it), a loop of links (ELOOP)
NOT_A_DIRECTORY = (errno.EEXIST, errno.ENOTDIR, errno.ELOOP, errno.ENOENT)


def blocked(path: Path, pick: str) -> tuple[str, str] | None:
    """Why the directory ``path`` (the cache's, or --trace's) cannot be made or used: the
    first of it and its parents that is there is a file, a symbolic link to nothing or a loop
    of them (which ``exists()`` calls not there: its parent was blamed), and what to do (else
    ``pick``); None if it is a directory (the cause is another)."""
    for part in (path, *path.parents):
        try:
            mode = os.lstat(part).st_mode
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # (a part above...)
                continue
            return None  # (cannot tell: the error itself is said)
        if not stat.S_ISLNK(mode):
            return None if stat.S_ISDIR(mode) else (f"{part} is a file, not a directory", pick)
        try:
            target = os.readlink(part)
            followed = os.stat(part).st_mode
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR):
                return None  # (EACCES, EIO...: said as the error it is)
            if err.errno == errno.ELOOP:
                return (
                    f"{part} is a loop of symbolic links (to {target}, which leads back to itself)",
                    f"point it at a directory (ln -sfn DIR {part}), or {pick}",
                )
            missing = os.path.normpath(os.path.join(part.parent, target))  # (from the link's)
            if os.path.lexists(missing):  # (a link to a link...)
                target = missing = os.path.realpath(part)  # (...to what is missing)
            return (f"{part} is a broken symbolic link (to {target}, which does not exist)",
                    f"create {missing} (or mount the disk it is on), point the link at a "
                    f"directory that exists (ln -sfn DIR {part}), or {pick}")  # fmt: skip
        if not stat.S_ISDIR(followed):
            return f"{part} is a symbolic link to {target}, a file, not a directory", pick
        return None
    return None


SHARED = ("a cache directory shared between users needs a group they share, umask 002 and a "
          "directory they all may write (chmod 2775)")  # fmt: skip


def _denied(path: str, cache_dir: str, option: str) -> str | None:
    """The part of the cache this user may not read or write, as what to do, or None. A
    ``chmod -R`` only of ``cache_dir`` or a directory in it: a directory above it is let
    through (``chmod g+x``), and the one it would be made in is not opened to anyone (it
    said "ask root to run chmod -R g+w /srv/pipe")."""
    me, other = user_name(os.geteuid()), pick(option)
    if (found := unreadable_part(path)) is not None:
        where, verb = found
        owner, mode = owner_of(where)
        below = where if os.path.isdir(where) else os.path.dirname(where)
        grant = f"chmod -R g+rX {below}" if inside(below, cache_dir) else f"chmod g+x {where}"
        return (
            f"this user ({me}) may not {verb} {where} ({owner}'s, mode {mode}): {SHARED}; ask "
            f"{owner} to run {grant}, or {other}"
        )
    if (directory := unwritable_dir(path)) is not None and os.path.isdir(directory):
        if (held := held_by_attribute(directory)) is not None:  # (chattr +i: no chmod helps)
            return f"{held}, or {other}"
        if not inside(directory, cache_dir):  # (where cache_dir would be made)
            who = who_of(directory)
            return parent_advice(directory, cache_dir, who, f"a {option} (or none)")
        owner, mode = owner_of(directory)
        return (
            f"this user ({me}) may not write {directory} ({owner}'s, mode {mode}): {SHARED}; "
            f"ask {owner} to run chmod -R g+w {cache_dir}, or {other}"
        )
    return None


_said: set[tuple[Path, str]] = set()


def say_once(directory: Path, what: str) -> bool:
    """Whether ``what`` is yet to be said of ``directory`` in this process (then it is)."""
    said = (directory, what) in _said
    _said.add((directory, what))
    return not said


@contextlib.contextmanager
def local(doing: str) -> Iterator[None]:
    """The cache directory's own failures while ``doing`` what: a full disk is
    :class:`Full`, any other errno :class:`Failed` (a SnapError passes as it is)."""
    try:
        yield
    except SnapError:
        raise
    except OSError as err:
        if err.errno in FULL:
            raise Full(err) from err
        raise Failed(err, doing) from err


def touch(path: Path, fd: int) -> None:
    """Refresh the entry's mtime (LRU: most recently used now). Only its owner, or a user who
    may write it, may: another user's entry made with umask 022 is read untouched (its place
    in the LRU order is then its owner's last use), said once at debug level."""
    try:
        os.utime(fd)
    except PermissionError:
        if say_once(path.parent, "untouched"):
            log.debug("cache_dir %s: entries of other users that this user may not write "
                      "(%s) are read without refreshing their LRU time", path.parent,
                      path.name)  # fmt: skip
    except OSError as err:
        raise Failed(err, f"refreshing the LRU time of {path.name}") from err


# Why an entry was left where it was: whose it is, and what lets every user delete them.
LEFT = ("other users' entries, in a directory with the sticky bit or one this user may not "
        "write; a cache directory shared between users needs one they all may write, without the "
        "sticky bit: chmod 2775, a group they share, umask 002")  # fmt: skip


def n_entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def prepare(directory: Path, make: bool, option: str) -> None:
    """Make the cache ``directory`` (and its lock directory), or with ``make`` False check
    that it could be made (:func:`could_make`); an OptionError naming it (as ``option``, the
    way it was given) and the cause (a part of it no directory named, not its parent) if
    not."""
    try:
        if make:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / ".locks").mkdir(exist_ok=True)
        else:
            could_make(directory)
    except OSError as err:
        failed = Path(err.filename) if isinstance(err.filename, str) else directory
        why = blocked(failed, pick(option)) if err.errno in NOT_A_DIRECTORY else None
        cause, todo = why or explain(err, str(directory), option)
        raise OptionError(f"cannot use {option} {str(directory)!r}: {cause}; {todo}") from err


def could_make(directory: Path) -> None:
    """Raise the OSError that making and writing ``directory`` would raise, making nothing
    (the cache of a loader that reads local snapshots only, unused: it was made all the
    same): its nearest existing part must be a directory this user may write."""
    existing = directory
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(existing))


def say_left(
    option: str, directory: Path, limit_name: str, limit: str, left: int, state: str
) -> None:
    """Say once a process that ``left`` entries this user may not delete keep the cache at
    ``directory`` ``state`` ("holds 2.0 MiB over", "has no room for this loader's shards
    in") its limit (``limit``, said)."""
    if say_once(directory, "not permitted"):
        log.warning("%s %s %s its %s of %s: %s this user may not delete: %s", option, directory,
                    state, limit_name, limit, n_entries(left), LEFT)  # fmt: skip


def say_not_admitted(option: str, directory: Path, limit_name: str, limit: str, left: int) -> None:
    """Say once a process why shards are read without the cache at ``directory``: its limit
    has no room for them beside ``left`` entries this user may not delete, or beside the
    entries its loader uses."""
    if left:
        say_left(
            option, directory, limit_name, limit, left, "has no room for this loader's shards in"
        )
    elif say_once(directory, "at its limit"):
        log.warning("%s %s has no room in its %s of %s for more of the shards this loader reads: "
                    "those are read without it, fetched again each epoch, rather than put in "
                    "place of the entries it uses (each epoch would fetch every shard again); a "
                    "%s above the snapshot's size keeps them all", option, directory, limit_name,
                    limit, limit_name)  # fmt: skip


def say_over(
    option: str, directory: Path, limit_name: str, limit: str, left: int, over: str
) -> None:
    """Say once a process that the cache at ``directory`` holds ``over`` over its limit: for
    ``left`` entries this user may not delete, or as every other entry is in use."""
    if left:
        say_left(option, directory, limit_name, limit, left, f"holds {over} over")
    elif say_once(directory, "over its limit"):
        log.warning("%s %s holds %s over its %s of %s: every other entry is in use (a loader "
                    "keeps up to %d shards open, each holding its entry), so entries go as soon "
                    "as they are released and are fetched again when read next; give %s room "
                    "for more than that", option, directory, over, limit_name, limit,
                    CACHED_OPEN, limit_name)  # fmt: skip
