"""A local directory of remote shards, shared by every process on the machine.

A hyperparameter sweep runs several trials at once on one machine, each replaying the same
snapshot for many epochs. With ``cache_dir=`` every shard is downloaded once into that
directory and read from local disk by every epoch of every trial.

- **Filled once.** A per-entry lock file (``flock``) makes one process download a shard while
  the others wait for it, then find it there.
- **Filled atomically and checked.** The download goes to a temporary file that is checked
  against the manifest's size and crc32c and only then renamed into place: a reader never
  sees a partial or damaged entry, and a crash leaves only a temporary file (removed by the
  next eviction pass).
- **Bounded, and kept for the loader that reads it.** A shard is cached only if it fits in
  ``limit`` bytes beside the entries and every process's fills under way (their temporary
  files, made at the shard's size), the least recently used entries not in use deleted to
  make room, never one this loader has used (since :attr:`ShardCache.started`): one that
  does not fit is read without it. Plain LRU below the snapshot's size evicted what the
  next epoch read first (no hits; a probe: 57 downloads of 50 shards in the first epoch,
  229 in four).
- **A full disk makes room.** A fill that runs out of space (ENOSPC, EDQUOT) deletes, least
  recently used first, the entries no reader holds that this loader has not used (all of
  them emptied a cache on a too small disk each time it filled), and every temporary file
  whose filler is gone, says so once, and tries again; a shard still without room is read
  without the cache. Every other failure of the cache's own directory (read-only, not
  permitted, I/O error) is a ``StorageError`` naming it and what to do.
- **Never evicts a shard in use.** A reader holds a shared ``flock`` on the entry's file for
  as long as it reads it; eviction deletes only entries it can lock exclusively without
  waiting. A reader that opened an entry just as it was deleted sees the file unlinked and
  fetches it again.
- **Shared between users.** Entries and lock files are made as ordinary files are (0666 less
  the umask) and locked read-only (``flock`` needs no write access): the users of a group
  share a group-writable setgid directory under umask 002. An entry this user may read but
  not touch (umask 022) is read without refreshing its mtime; one it may not delete (a
  sticky directory) is left to its owner (with no room left, a shard is read uncached).

Entries are named by a hash of the shard's URL, size and crc32c, so a recreated snapshot (new
shard names and checksums) never reads an old entry. ``flock`` locks work between processes
on one machine's local filesystem; the cache directory must not be on NFS.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import DAMAGED, CorruptShardError, OptionError, StorageError
from ..progress import human_bytes
from . import cache_faults as faults
from .cache_evict import SUFFIX, delete_unused, filling, remove_stale_temporaries, reserve
from .cache_faults import CACHED_OPEN as CACHED_OPEN
from .cache_faults import FULL, Failed, Full, NoRoom, explain, local, say_once
from .checksum import crc32c_file

log = logging.getLogger(__name__)

# Writes the shard's bytes into the entry, at their offsets;
Sink = Callable[[int, bytes], None]
# downloads the shard calling the sink given; returns the bytes' crc32c (8 hex digits) if it
# computed it on the way, else None (the cache then reads the file back).
Fill = Callable[[Sink], "str | None"]
_EVICT_LOCK = ".evict.lock"


class NotAdmitted(Exception):
    """The shard does not fit in the cache's limit beside the entries its loader uses (and
    ``left`` entries this user may not delete)."""

    def __init__(self, left: int) -> None:
        super().__init__(left)
        self.left = left


class CachedShard:
    """An entry held open for reading: its path stays valid until :meth:`close`."""

    _close = staticmethod(os.close)  # (at interpreter exit, module globals may be None)

    def __init__(self, path: str, fd: int, released: Callable[[], None] | None = None) -> None:
        self.path, self._fd, self._released = path, fd, released

    def close(self, trim: bool = True) -> None:  # (trim: its cache evicts if over its limit)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            self._close(fd)  # releases the shared lock
            if trim and self._released is not None:
                self._released()

    def __del__(self) -> None:  # (no eviction from a collector's call, maybe at exit)
        with contextlib.suppress(OSError):  # (the descriptor is released whatever close says)
            self.close(trim=False)


class ShardCache:
    """See the module docstring. ``limit``: bytes, or None for no bound."""

    def __init__(self, directory: str | os.PathLike[str], limit: int | None = None,
                 make: bool = True, option: str | None = None,
                 started: float | None = None) -> None:  # fmt: skip
        """``make``: False to check only that it could be made (an unused cache). ``option``:
        how the caller named the directory, said in its faults (else as this thread's caller
        would: :func:`.cache_faults.option_name`). ``started``: when its loader started
        (``time.time()``; a decode process gets its loader's), now if None."""
        if limit is not None and limit < 1:
            raise OptionError(f"cache_limit must be a positive number of bytes, got {limit}")
        self.dir = Path(directory).expanduser()
        self.option = option or faults.option_name()
        self._limit_name = faults.limit_name(self.option)
        faults.prepare(self.dir, make, self.option)
        self.limit = limit
        self.hits = self.fills = self.fill_bytes = self.evicted = self.uncached = 0
        self.started = time.time() - 0.05 if started is None else started  # (used since: its
        # own; a tick early: a file's mtime is the kernel's coarse clock, behind time.time)
        self._over = False  # the last eviction pass left it over its limit (entries in use)

    @staticmethod
    def key(url: str, size: int, crc32c: str) -> str:
        digest = hashlib.sha256(f"{url}\n{size}\n{crc32c}".encode()).hexdigest()[:32]
        return f"{crc32c}-{digest}"

    def open(self, url: str, size: int, crc32c: str, fill: Fill) -> CachedShard:
        """The entry for shard ``url``, filling it with ``fill(sink)`` if no process has yet.

        Raises:
            CorruptShardError: the downloaded bytes do not match ``size`` and ``crc32c``.
            NoRoom: the directory's disk has no room for it, with every entry not in use
                removed.
            StorageError: any other failure of the directory, named as its. The download's
                own errors (``fill``'s) propagate unchanged.
        """
        name = self.key(url, size, crc32c)
        path = self.dir / (name + SUFFIX)
        try:
            try:
                return self._open(name, path, url, size, crc32c, fill)
            except Full as full:
                first = full.err
            left = 0  # entries this user may not delete
            try:
                left = self._make_room(first, url, size)
                return self._open(name, path, url, size, crc32c, fill)
            except Full as full:
                err = self._error(full.err, f"caching {url} ({human_bytes(size)})", left)
                raise NoRoom(str(err)) from full.err
        except Failed as failed:
            raise self._error(failed.err, f"caching {url}: {failed.doing}") from failed.err

    def open_if_room(self, url: str, size: int, crc32c: str, fill: Fill) -> CachedShard | None:
        """:meth:`open`, or None if the directory has no room for the shard, even with every
        entry not in use removed (said once a process): the caller reads it without the
        cache. Each open shard of a loader holds its entry (up to ``CACHED_OPEN`` of them)."""
        try:
            return self.open(url, size, crc32c, fill)
        except NotAdmitted as refused:
            self.uncached += 1
            limit = human_bytes(self.limit or 0)
            faults.say_not_admitted(self.option, self.dir, self._limit_name, limit, refused.left)
            return None
        except NoRoom as err:
            self.uncached += 1
            if say_once(self.dir, "no room"):
                log.warning("%s. Reading the shards that do not fit without the cache "
                            "(downloaded again each epoch): a loader keeps up to %d cached "
                            "shards open (in use) at once", err, CACHED_OPEN)  # fmt: skip
            return None

    def _open(
        self, name: str, path: Path, url: str, size: int, crc32c: str, fill: Fill
    ) -> CachedShard:
        filled = False
        while True:
            held = self._try_open(path, size)
            if held is not None:
                self.hits += not filled
                return held
            with self._locked(self.dir / ".locks" / (name + ".lock"), fcntl.LOCK_EX):
                with local(f"looking for {path.name}"):
                    there = path.exists()
                if there:  # another process filled it while this one waited
                    continue
                self._fill(path, url, size, crc32c, fill)
                self.fills += 1
                self.fill_bytes += size
                filled = True
            with local("evicting entries"):
                self._evict(keep=path)

    def _admit(self, tmp: Path, size: int) -> int:
        """The descriptor of the fill's temporary file ``tmp``, made at ``size`` bytes if they
        fit in the limit once the least recently used entries not in use that this loader has
        not used are deleted; else ``NotAdmitted``. Made and counted under the eviction lock,
        the temporary files are every process's reservations (a count per process let the
        trials of a sweep, filling at once, pass the limit together)."""
        if self.limit is None:
            with local(f"creating {tmp.name}"):
                return reserve(tmp, size)
        with local("evicting entries"), self._locked(self.dir / _EVICT_LOCK, fcntl.LOCK_EX):
            remove_stale_temporaries(self.dir, abandoned=True)  # (a crashed fill's)
            total = filling(self.dir)  # (first: a fill renamed meanwhile counts twice, not
            entries = self.entries()  # never)
            total += sum(e[1] for e in entries)
            left = 0  # (entries this user may not delete: another's, in a sticky directory)
            for path, entry_size, used in entries:
                if total + size <= self.limit or used >= self.started:
                    break  # (least recently used first: the rest are this loader's too)
                deleted = delete_unused(path)
                left += deleted is None
                if deleted:
                    total -= entry_size
                    self.evicted += 1
            if total + size > self.limit:
                raise NotAdmitted(left)
            with local(f"creating {tmp.name}"):
                return reserve(tmp, size)

    def _room_for(self, size: int) -> None:
        """``Full`` if the filesystem has less than ``size`` bytes free: rather than
        downloading until the disk refuses."""
        with local("checking its free space"):
            if not self._has_room(size):
                raise Full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    def _error(self, err: OSError, doing: str, left: int = 0) -> StorageError:
        cause, hint = explain(err, str(self.dir), self.option)
        if err.errno in FULL:
            doing += ", with every entry not in use removed but this loader's own"
            if left:
                doing += f" but {faults.n_entries(left)} this user may not delete ({faults.LEFT})"
        return StorageError(f"{self.option} {self.dir}: {cause} while {doing}; {hint}")

    def _try_open(self, path: Path, size: int) -> CachedShard | None:
        with local(f"opening {path.name} for reading"):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        return self._hold(path, fd, size)

    def _hold(self, path: Path, fd: int, size: int) -> CachedShard | None:
        try:
            with local(f"locking {path.name}"):
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an eviction pass holds it
                st = os.fstat(fd)
            if st.st_nlink == 0:  # evicted between open and lock: fetch again
                os.close(fd)
                return None
            if st.st_size != size:  # cannot happen through this class; heal it anyway
                log.warning("cache entry %s has %d bytes, expected %d: refetching",
                            path, st.st_size, size)  # fmt: skip
                os.close(fd)
                with contextlib.suppress(FileNotFoundError), local(f"deleting {path.name}"):
                    path.unlink()
                return None
            faults.touch(path, fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return CachedShard(str(path), fd, self._trim)

    def _fill(self, path: Path, url: str, size: int, crc32c: str, fill: Fill) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        fd = self._admit(tmp, size)
        failed: list[OSError] = []  # the sink's own: the local disk's, not the download's
        end = [0]  # the bytes downloaded reach (the file is made at its size, for the limit)

        def put(offset: int, data: bytes) -> None:
            view = memoryview(data)
            end[0] = max(end[0], offset + len(view))
            try:
                while view:
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
            except OSError as err:
                failed.append(err)
                raise

        try:
            try:
                try:
                    self._room_for(size)
                    streamed_crc = fill(put)
                except OSError as err:
                    if any(err is e for e in failed):  # else the download's: named by it
                        with local(f"writing {tmp.name}"):
                            raise
                    raise
                with local(f"writing {tmp.name}"):
                    os.fsync(fd)
            finally:
                os.close(fd)
            got_size = end[0]
            if got_size != size:
                raise CorruptShardError(
                    f"shard {url} downloaded {got_size} bytes, the manifest says {size}; {DAMAGED}"
                )
            with local(f"reading {tmp.name}"):
                got_crc = streamed_crc or crc32c_file(str(tmp))
            if got_crc != crc32c:
                raise CorruptShardError(
                    f"shard {url} is damaged: crc32c {got_crc}, the manifest says {crc32c}; "
                    f"{DAMAGED}"
                )
            with local(f"renaming {tmp.name}"):
                os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):  # (a read-only filesystem: nothing was made)
                tmp.unlink()

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, size, mtime) of every complete entry, least recently used first."""
        out = []
        for p in self.dir.glob("*" + SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                st = p.stat()
                out.append((p, st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: e[2])

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def _trim(self) -> None:
        """An entry was released: evict down to the limit where the last pass could not."""
        if self._over:  # (a failing disk is said by the next fill)
            with contextlib.suppress(Full, Failed), local("evicting entries"):
                self._evict(keep=None)

    def _evict(self, keep: Path | None) -> None:
        if self.limit is None:
            return
        with self._locked(self.dir / _EVICT_LOCK, fcntl.LOCK_EX):
            remove_stale_temporaries(self.dir)
            entries = self.entries()
            total = sum(size for _, size, _ in entries)
            left, self._over = 0, False
            for path, size, used in entries:
                if total <= self.limit:
                    return
                if used >= self.started:  # (over by other processes' fills at once)
                    continue
                deleted = path != keep and delete_unused(path)
                left += deleted is None
                if deleted:
                    total -= size
                    self.evicted += 1
            self._over = total > self.limit
            if total <= self.limit:
                return
            over, limit = human_bytes(total - self.limit), human_bytes(self.limit)
            faults.say_over(self.option, self.dir, self._limit_name, limit, left, over)

    def _has_room(self, size: int) -> bool:
        return (st := os.statvfs(self.dir)).f_bavail * st.f_frsize >= size

    def _make_room(self, err: OSError, url: str, size: int) -> int:
        """Delete every entry not in use and every abandoned temporary file (the disk is
        full: ``err``), saying so once a process; the entries this user may not delete."""
        removed = freed = left = 0
        with local("making room"), self._locked(self.dir / _EVICT_LOCK, fcntl.LOCK_EX):
            freed += remove_stale_temporaries(self.dir, abandoned=True)
            for path, entry_size, used in self.entries():
                if used >= self.started or self._has_room(size):
                    break  # (least recently used first: the rest are this loader's too)
                deleted = delete_unused(path)
                left += deleted is None
                if deleted:
                    removed, freed = removed + 1, freed + entry_size
                    self.evicted += 1
        if removed and say_once(self.dir, "full"):  # (else open_if_room's warning)
            log.warning("%s %s is full (%s): removed %s not in use (%s) to make room for "
                        "%s (%s); give %s a size below the space free there to keep the "
                        "cache from filling the disk", self.option, self.dir,
                        errno.errorcode.get(err.errno or 0, err), faults.n_entries(removed),
                        human_bytes(freed), url, human_bytes(size), self._limit_name)  # fmt: skip
        return left

    @contextlib.contextmanager
    def _locked(self, path: Path, mode: int) -> Iterator[None]:
        """Hold ``flock(mode)`` on the lock file ``path``, made if missing (0666 less the
        umask) and opened read-only: ``flock`` needs no write access, so a lock file another
        user made (umask 022) locks for this one too."""
        with local(f"opening lock file {path.relative_to(self.dir)}"):
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            with local(f"locking {path.relative_to(self.dir)}"):
                fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)
