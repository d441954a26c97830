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
- **Bounded, LRU.** After a fill, the least recently used entries are deleted until the
  directory holds at most ``limit`` bytes. Each use refreshes an entry's mtime.
- **Never evicts a shard in use.** A reader holds a shared ``flock`` on the entry's file for
  as long as it reads it; eviction deletes only entries it can lock exclusively without
  waiting. A reader that opened an entry just as it was deleted sees the file unlinked and
  fetches it again.

Entries are named by a hash of the shard's URL, size and crc32c, so a recreated snapshot (new
shard names and checksums) never reads an old entry. ``flock`` locks work between processes
on one machine's local filesystem; the cache directory must not be on NFS.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import CorruptShardError, OptionError
from .checksum import crc32c_file

log = logging.getLogger(__name__)

# Writes the shard's bytes to the open file descriptor given; returns their crc32c (8 hex
# digits) if it computed it on the way, else None (the cache then reads the file back).
Fill = Callable[[int], "str | None"]
SUFFIX = ".arrow"
_EVICT_LOCK = ".evict.lock"
_STALE_TMP_S = 3600.0


class CachedShard:
    """An entry held open for reading: its path stays valid until :meth:`close`."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self._fd = path, fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # releases the shared lock

    def __del__(self) -> None:
        self.close()


class ShardCache:
    """See the module docstring. ``limit``: bytes, or None for no bound."""

    def __init__(self, directory: str | os.PathLike[str], limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise OptionError(f"cache_limit must be a positive number of bytes, got {limit}")
        self.dir = Path(directory).expanduser()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / ".locks").mkdir(exist_ok=True)
        except OSError as err:
            raise OptionError(f"cannot use cache_dir {str(self.dir)!r}: {err}") from err
        self.limit = limit
        self.hits = self.fills = self.fill_bytes = self.evicted = 0

    @staticmethod
    def key(url: str, size: int, crc32c: str) -> str:
        digest = hashlib.sha256(f"{url}\n{size}\n{crc32c}".encode()).hexdigest()[:32]
        return f"{crc32c}-{digest}"

    def open(self, url: str, size: int, crc32c: str, fill: Fill) -> CachedShard:
        """The entry for shard ``url``, filling it with ``fill(fd)`` if no process has yet.

        Raises:
            CorruptShardError: the downloaded bytes do not match ``size`` and ``crc32c``.
        """
        name = self.key(url, size, crc32c)
        path = self.dir / (name + SUFFIX)
        filled = False
        while True:
            held = self._try_open(path, size)
            if held is not None:
                self.hits += not filled
                return held
            with self._locked(self.dir / ".locks" / (name + ".lock"), fcntl.LOCK_EX):
                if path.exists():  # another process filled it while this one waited
                    continue
                self._fill(path, url, size, crc32c, fill)
                self.fills += 1
                self.fill_bytes += size
                filled = True
            self._evict(keep=path)

    def _try_open(self, path: Path, size: int) -> CachedShard | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an eviction pass holds it
            st = os.fstat(fd)
            if st.st_nlink == 0:  # evicted between open and lock: fetch again
                os.close(fd)
                return None
            if st.st_size != size:  # cannot happen through this class; heal it anyway
                log.warning("cache entry %s has %d bytes, expected %d: refetching",
                            path, st.st_size, size)  # fmt: skip
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                return None
            os.utime(fd)  # LRU: most recently used now
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return CachedShard(str(path), fd)

    def _fill(self, path: Path, url: str, size: int, crc32c: str, fill: Fill) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                streamed_crc = fill(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            got_size = tmp.stat().st_size
            if got_size != size:
                raise CorruptShardError(
                    f"shard {url} downloaded {got_size} bytes, the manifest says {size}; "
                    "the snapshot is damaged: recreate it with snap create --overwrite"
                )
            got_crc = streamed_crc or crc32c_file(str(tmp))
            if got_crc != crc32c:
                raise CorruptShardError(
                    f"shard {url} is damaged: crc32c {got_crc}, the manifest says {crc32c}; "
                    "recreate the snapshot with snap create --overwrite"
                )
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
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

    def _evict(self, keep: Path) -> None:
        if self.limit is None:
            return
        with self._locked(self.dir / _EVICT_LOCK, fcntl.LOCK_EX):
            self._remove_stale_temporaries()
            entries = self.entries()
            total = sum(size for _, size, _ in entries)
            for path, size, _ in entries:
                if total <= self.limit:
                    return
                if path != keep and self._delete_unused(path):
                    total -= size
                    self.evicted += 1
            if total > self.limit:
                log.warning("cache %s holds %d bytes over its %d-byte limit: every other entry "
                            "is in use", self.dir, total - self.limit, self.limit)  # fmt: skip

    @staticmethod
    def _delete_unused(path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a reader holds it
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return True
        finally:
            os.close(fd)

    def _remove_stale_temporaries(self) -> None:
        cutoff = time.time() - _STALE_TMP_S
        for p in self.dir.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()

    @staticmethod
    @contextlib.contextmanager
    def _locked(path: Path, mode: int) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)
