"""A version's files on stable storage before its manifest names them (local disks only).

A shard written locally is in the page cache when its writer closes it: the kernel writes it
to disk within about 30 s. A machine that loses power or is preempted meanwhile loses it,
though the manifest committed after it says the snapshot is complete (readers would then
find the shard damaged or missing, mid-training). And a write that the disk fails after
``close`` (EIO, a thin volume out of space) is only reported by ``fsync``. So before the
commit every new shard is synced (in threads: a disk takes several requests at once), then
their directories (the names), and after it the manifest's directory. Object stores and
HDFS have a file once its upload is finished; other fsspec filesystems are left as they are.

Waiting for a whole snapshot to be written at the commit made a create of 1.26 GB (a trivial
pipeline, 2 workers) 6.7 s -> 8.8 s here; so each shard's writing is started as soon as
its writer closes it (:func:`start_writeback`, Linux's ``sync_file_range``, which does not
wait), and the commit waits for what is left: 8.1 s, and 11.9 -> 13.4 s with a pipeline that
computes (medians of 3). The kernel would have spent that writing in the next ~30 s anyway,
beside whatever runs next. A wait of more than :data:`SAY_AFTER_S` is said (the progress
line already says every task is done).

A file replaced whole (:func:`replace_file`: a task's result, a lease's heartbeat) is a
synced temporary file renamed over it. A file that must be created exclusively (a lease, a
manifest's first version) is written whole and hard-linked into place (:func:`create_file`);
:func:`create_without_link` is for filesystems without hard links (FAT and exFAT drives, SMB
shares, many FUSE mounts). Once the link is made, the temporary file that failed to go is a
warning naming it, not a failed create (``snap gc`` removes it). The calls a signal may
interrupt are tried again as :mod:`snapshot_cli.interrupted` says.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import sys
import time
from collections.abc import Iterable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fsspec import AbstractFileSystem

from . import interrupted, layout
from .errors import StorageError
from .faults import errors_named
from .progress import counted, human_bytes
from .protocols import is_local

THREADS = 8
SAY_AFTER_S = 3.0  # a sync still going then is said (the commit waits for it)
log = logging.getLogger("snapshot_cli")


def _sizes(files: list[str]) -> int:
    total = 0
    for path in files:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total


def sync(fs: AbstractFileSystem, paths: Iterable[str]) -> None:
    """Sync the files ``paths`` and then their directories; an OS error (EIO, ENOSPC,
    EDQUOT: the data did not reach the disk) is raised as a StorageError naming the file."""
    if not is_local(fs):
        return
    files = sorted(set(paths))
    if files:
        with ThreadPoolExecutor(min(THREADS, len(files))) as pool:
            started = {pool.submit(_sync_one, fs, path, os.O_RDONLY): path for path in files}
            left = futures.wait(started, timeout=SAY_AFTER_S).not_done
            if left:  # (a fast create on a slow disk: the progress line said all tasks done)
                log.info("writing the last %s (%s) to disk before the commit",
                         counted(len(left), "file"),
                         human_bytes(_sizes([started[f] for f in left])))  # fmt: skip
            for future in started:
                future.result()  # (the first fault, in path order)
    for directory in sorted({os.path.dirname(p) for p in files}):
        sync_directory(fs, directory)


def sync_directory(fs: AbstractFileSystem, directory: str) -> None:
    """Sync a local directory's entries (a file created, renamed or linked in it)."""
    if is_local(fs):
        _sync_one(fs, directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}  # fsync(2): no syncing here
_SYNC_FILE_RANGE_WRITE = 2


def _sync_one(fs: AbstractFileSystem, path: str, flags: int) -> None:
    with errors_named(fs, path, "syncing to disk"):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        except OSError as err:
            if err.errno not in _UNSUPPORTED:
                raise
            # a filesystem that cannot sync this (a directory on some FUSE mounts): as before
        finally:
            interrupted.close(fd)


def start_writeback(fs: AbstractFileSystem, path: str) -> None:
    """Start writing a finished local file to disk, without waiting for it (Linux's
    ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; elsewhere nothing): the commit's :func:`sync`
    then finds little left. Advice only: a failure to start is the commit's sync's to report;
    one to close (FUSE's flush writes back there) is said naming the file."""
    call = _sync_file_range()
    if call is None or not is_local(fs):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # (the commit's sync opens it again and says what is wrong)
    with errors_named(fs, path, "writing"):
        try:
            call(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
        finally:
            interrupted.close(fd)


@functools.cache
def _sync_file_range() -> Any:
    """Linux's ``sync_file_range`` from the C library, or None (elsewhere, or not found)."""
    import ctypes  # (here: snap's commands start without it)

    return _libc("sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])


def _libc(name: str, argtypes: list[Any]) -> Any:
    """The C library's function ``name`` (returning an int, errno kept), or None where this
    is not Linux or the library has no such function."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # no C library to load, or no such call in it
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


# What link(2) says where a filesystem has no hard links: vfat, exfat and NTFS-3G's FUSE
# EPERM, SMB EOPNOTSUPP, some FUSE filesystems ENOSYS (a writable directory says EACCES).
NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


_AT_FDCWD, _RENAME_NOREPLACE = -100, 1
# What renameat2 says where a filesystem or kernel cannot rename without replacing (FUSE
# without rename2, kernels before 3.15, filesystems without the flag)
_NO_NOREPLACE = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP})


def replace_file(path: str, data: bytes) -> None:
    """``storage.write_atomic`` of a local file: a synced temporary file beside it renamed
    over it; the temporary is removed if that fails."""
    interrupted.makedirs(os.path.dirname(path))
    tmp = layout.temporary_path(path)
    try:
        interrupted.write_synced(tmp, data)
        interrupted.replace(tmp, path)
    except BaseException:
        # (the failure is the answer, not the tidying; os's own call: a Ctrl-C raised at a
        # call of snap's here would leave the temporary)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def create_file(path: str, data: bytes) -> bool:
    """``storage.create_exclusive`` of a local file: a finished temporary file hard-linked
    into place (atomic, refused where ``path`` exists: False), else
    :func:`create_without_link`. The temporary is removed; once ``path`` is made, a failure
    to remove it is a warning naming it (``snap gc`` removes it), not a failed create; one
    never made (its open failed) is not looked for (:func:`_may_be_there`)."""
    tmp, made, there = layout.temporary_path(path), False, True
    try:
        try:
            interrupted.write_synced(tmp, data)  # its bytes on disk before its name (power loss)
        except BaseException:  # (a failed open made none: its unlink may say EROFS, EACCES)
            there = _may_be_there(tmp)
            raise
        try:
            interrupted.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as err:
            if err.errno not in NO_HARD_LINKS:  # (the name asked for, not the temporary's)
                raise OSError(err.errno, err.strerror, path) from err
            made = create_without_link(tmp, path, data)
            return made
        made = True
        return True
    finally:
        # (not left behind on a full disk; os's own calls, no function of snap's between the
        # link and them: a Ctrl-C that Python raises at such a call left the temporary). A
        # removal that fails is said beside the answer, never instead of it: the link's own
        # error (EIO, ENOSPC) is what to fix, and snap gc removes the temporary.
        left: OSError | None = None
        for _ in range(interrupted.TRIES if there else 0):  # (inline: no call of snap's)
            try:
                os.unlink(tmp)
                left = None
                break
            except FileNotFoundError:
                left = None
                break
            except OSError as err:  # (EINTR: tried again)
                left = err
                if not isinstance(err, InterruptedError):
                    break
        if left is not None:
            code = errno.errorcode.get(left.errno or 0, "")
            log.warning("%s, but its temporary file %s could not be removed (%s%s): run snap "
                        "gc on the snapshot to remove it", f"made {path}" if made else
                        f"{path} was not made", tmp, left.strerror or left,
                        f", {code}" if code else "")  # fmt: skip


# What lstat(2) says of a name that is not there, or cannot be (a failed create made none)
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES})


def _may_be_there(path: str) -> bool:
    """Whether the file ``path`` (a temporary whose writing failed) may exist: its create
    failed, or it was made and then a write failed. A look that fails otherwise (EIO) cannot
    tell: it may."""
    try:
        interrupted.again(functools.partial(os.lstat, path))
    except OSError as err:
        return err.errno not in _NOT_THERE
    return True


def create_without_link(tmp: str, path: str, data: bytes) -> bool:
    """``storage.create_exclusive`` of a local file where hard links are refused: the
    finished temporary ``tmp`` renamed to ``path`` unless ``path`` exists (Linux's
    ``renameat2(RENAME_NOREPLACE)``: atomic and exclusive, on the kernel's FAT, exFAT and
    CIFS among others), else :func:`create_in_place`. False if ``path`` exists."""
    rename = _renameat2()
    if rename is not None:
        import ctypes

        old, new = os.fsencode(tmp), os.fsencode(path)
        for attempt in range(interrupted.TRIES):
            if rename(_AT_FDCWD, old, _AT_FDCWD, new, _RENAME_NOREPLACE) == 0:
                return True
            code = ctypes.get_errno()
            if code == errno.EINTR and attempt + 1 < interrupted.TRIES:
                continue
            gone = code == errno.ENOENT and attempt and not os.path.lexists(tmp)
            if gone and os.path.lexists(path):  # (the interrupted try's rename)
                return True
            if code == errno.EEXIST:
                return False
            if code not in _NO_NOREPLACE:
                raise OSError(code, os.strerror(code), path)  # (the name asked for, not tmp's)
            break
    return create_in_place(path, data)


@functools.cache
def _renameat2() -> Any:
    """Linux's ``renameat2`` from the C library (glibc 2.28, musl 1.2.5), or None."""
    import ctypes

    return _libc(
        "renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    )


def create_in_place(path: str, data: bytes) -> bool:
    """``storage.create_exclusive`` of a local file where neither a hard link nor a rename
    that does not replace is possible: made with ``O_EXCL`` (False if another's is there),
    then its bytes, synced; a failed write removes it.

    An ``O_EXCL`` open that a signal interrupted (EINTR) may have made the file before it
    failed (NFS, FUSE): tried again, by Python (PEP 475) or here, it says EEXIST for a file
    no one else made. That file is empty, and so, for a moment, is another writer's between
    its open and its write: an empty one is looked at again for :data:`EMPTY_LOOKS` times
    over about a second; bytes in it make it another's (False), while one that stays empty
    cannot be told from ours or from a writer's killed there. Claiming it could give two
    writers the name; calling it taken left a create waiting on, or refused by, a file no
    one writes. Neither: a StorageError names it and says what to do."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = interrupted.again(lambda: os.open(path, flags, 0o666))
    except FileExistsError:
        if _stays_empty(path):
            raise StorageError(
                f"{path} exists but is empty: a create of it was interrupted (a signal, on a "
                "filesystem without hard links) or killed before writing it; if no snap "
                f"create is writing there, remove it (rm {path}) and run the same command again"
            ) from None
        return False
    try:
        try:
            interrupted.write_all(fd, data)
        finally:
            with contextlib.suppress(InterruptedError):  # (released: see interrupted.close)
                os.close(fd)
    except BaseException:  # a full disk: leave no half-written file under the name
        for _ in range(interrupted.TRIES):  # (inline, os's own call: see create_file)
            try:
                os.unlink(path)
            except InterruptedError:
                continue
            except OSError:
                pass
            break
        raise
    return True


EMPTY_LOOKS, EMPTY_WAIT_S = 20, 0.05


def _stays_empty(path: str) -> bool:
    """Whether the file ``path`` is empty and stays so while a writer that just made it
    would have written it (see :func:`create_in_place`); gone meanwhile is not empty."""
    for look in range(EMPTY_LOOKS):
        try:
            if interrupted.again(lambda: os.stat(path)).st_size:
                return False
        except FileNotFoundError:
            return False
        if look + 1 < EMPTY_LOOKS:
            time.sleep(EMPTY_WAIT_S)
    return True
