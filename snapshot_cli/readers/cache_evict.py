"""What a :class:`~.cache.ShardCache`'s eviction may delete: an entry no reader holds, a
temporary file of a fill that no process is making any more; and what the fills under way
take."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

SUFFIX = ".arrow"  # an entry's (its name: ShardCache.key)
STALE_TMP_S = 3600.0  # a temporary file this old is a crashed fill's


def delete_unused(path: Path) -> bool | None:
    """Delete the entry at ``path`` unless a reader holds it (False); None if this user
    may not (another user's, in a sticky directory or one this user may not write)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except PermissionError:  # another user's, unreadable to this one
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    except BlockingIOError:
        return False  # a reader holds it
    except PermissionError:
        return None
    finally:
        os.close(fd)
    return True


def remove_stale_temporaries(directory: Path, abandoned: bool = False) -> int:
    """Delete temporary files over an hour old (a crashed fill's) and, if ``abandoned``,
    every one whose entry no process is filling; the bytes freed."""
    cutoff = time.time() - STALE_TMP_S
    freed = 0
    for p in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError, PermissionError):  # (another user's)
            st = p.stat()
            if st.st_mtime < cutoff or (abandoned and not being_filled(directory, p)):
                p.unlink()
                freed += st.st_size
    return freed


def reserve(tmp: Path, size: int) -> int:
    """Create the temporary file ``tmp`` at ``size`` bytes (a hole: no disk taken yet), as
    :func:`filling` counts it; its descriptor, open for writing."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # (less the umask)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return fd


def filling(directory: Path) -> int:
    """The bytes the temporary files in ``directory`` are made at: the fills under way,
    each made at its shard's size when admitted (a crashed fill's until it is removed)."""
    total = 0
    for p in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):  # (renamed or removed meanwhile)
            total += p.stat().st_size
    return total


def being_filled(directory: Path, tmp: Path) -> bool:
    """Whether a process holds the fill lock of temporary file ``tmp``'s entry."""
    entry = tmp.name[1:].split(SUFFIX + ".", 1)[0]  # .<entry>.arrow.<uuid>.tmp
    try:
        fd = os.open(directory / ".locks" / (entry + ".lock"), os.O_RDONLY)
    except FileNotFoundError:
        return False
    except PermissionError:  # another user's, made with umask 077: may be filling it
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (releases the lock if this took it)
    return False
