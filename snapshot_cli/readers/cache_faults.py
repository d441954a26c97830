"""The shard cache's own directory failing (:mod:`.cache`): told apart from the download's,
and said as the directory's, with what to do.

A full disk (ENOSPC, EDQUOT) is :class:`Full`, which the cache answers by making room and
trying again, then :class:`NoRoom`, which the loader answers by reading the shard without the
cache; any other errno is :class:`Failed`, which the cache names as its directory's error.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from ..errors import SnapError, StorageError

FULL = (errno.ENOSPC, errno.EDQUOT)
HINTS = {
    errno.ENOSPC: "free space there, give cache_limit a size below the space free (e.g. "
    "'20GiB'), or choose another cache_dir (or none)",
    errno.EROFS: "the filesystem is read-only: choose another cache_dir (or none)",
    errno.EACCES: "this process may not write there (another user's cache?): choose another "
    "cache_dir (or none)",
    errno.EIO: "the disk reported an I/O error: check it, or choose another cache_dir (or none)",
}
HINTS[errno.EDQUOT] = HINTS[errno.ENOSPC].replace("free space", "free some of the quota")
HINTS[errno.EPERM] = HINTS[errno.EACCES]
HINTS[errno.ENOLCK] = ("its filesystem does not take flock locks (NFS, some FUSE mounts): choose "
                       "a cache_dir on a local disk")  # fmt: skip
HINTS[errno.EOPNOTSUPP] = HINTS[errno.ENOLCK]


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


def explain(err: OSError) -> tuple[str, str]:
    """What went wrong in the cache directory (``"Read-only file system (EROFS)"``), and what
    to do about it."""
    code = errno.errorcode.get(err.errno or 0, "")
    cause = f"{err.strerror or err}{f' ({code})' if code else ''}"
    return cause, HINTS.get(err.errno or 0, "fix that, or choose another cache_dir (or none)")


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
