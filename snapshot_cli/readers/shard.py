"""Random access to the record batches of a snapshot's shards, verified before use.

Shards on this machine's disk (a local snapshot's, or the :class:`~.cache.ShardCache` entries
of a remote one) are memory-mapped and each record batch used where it is (:mod:`.blocks`),
checked against its own crc32c (format 2): decoded from the map, or gathered from it
(:mod:`.gather`); the pages leave RSS every RELEASE_BYTES read and once a window is done.
Other remote shards are fetched whole by parallel range requests (:mod:`.fetch`) into memory
(``max_bytes`` at most) and checked whole; over ``max_bytes`` without a cache, a record batch
per range request (:mod:`.ranged`: only that batches decode with the manifest's counts).
Damaged data raises :class:`CorruptShardError`; a read the storage fails (EIO, ESTALE,
EACCES) ``StorageError``.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .. import faults, ipc_blocks, ipc_layout, storage, versions
from .. import schema as schema_mod
from ..errors import DAMAGED, CorruptShardError, SnapError
from ..manifest import ShardEntry
from . import disagree, limits
from .blocks import BlockFile
from .cache import CACHED_OPEN, CachedShard, ShardCache
from .checksum import crc32c_file
from .direct import Placement, SlotJob
from .fetch import Fetcher, shared_fetcher
from .ranged import Expected, RangedReaders

# Local shards this process verified: (path, size, mtime_ns, crc32c). A new loader (the next
# epoch, a sweep's next trial) does not checksum them again; a rewritten file has a new mtime.
_verified_local: set[tuple[str, int, int, str]] = set()

Check = bool | None  # a read's verify: None is as the readers were made
Read = Callable[[BlockFile, Placement], Any]  # what ShardReaders._direct does with a shard
RELEASE_BYTES = 16 << 20  # mapped bytes read between releases (RSS holds ~2x: large folios)
MEMORY_BUDGET = 1 << 30  # bytes of whole remote shards held in memory by one reader set


class ShardReaders:
    """Opens shards on demand; thread-safe; keeps at most ``max_open`` / ``max_bytes`` open."""

    def __init__(
        self,
        fs: Any,
        root: str,
        shards: tuple[ShardEntry, ...],
        schema: pa.Schema,
        verify: bool = True,
        max_open: int | None = None,
        max_bytes: int | None = None,
        cache: ShardCache | None = None,
        fetcher: Fetcher | None = None,
    ) -> None:
        self._fs, self._pid = fs, os.getpid()
        self.root, self.shards, self.schema, self.verify = root, shards, schema, verify
        self.local = storage.is_local(fs)
        self._real_root = os.path.realpath(root) if self.local else root
        if max_open is None:  # local: every shard of a window stays open (see limits.py)
            max_open = min(len(shards), limits.shards_kept_open()) if self.local else 128
        self.max_open = max_open = max(1, max_open)
        self.max_bytes = max_bytes = MEMORY_BUDGET if max_bytes is None else max_bytes
        self.cache = None if self.local else cache
        if self.cache is not None:  # each open shard pins its cache entry: keep few open
            self.max_open = min(max_open, CACHED_OPEN)
        elif not self.local:  # fetched whole (no file held): max_bytes alone bounds them
            self.max_open = max(max_open, len(shards))
        self._fetcher = fetcher
        # Remote, uncached, past the budget: read each record batch by range (not whole
        total = sum(e.bytes for e in shards)  # shards again for every window needing them)
        self.ranged = not self.local and self.cache is None and total > max_bytes
        self._ranged = RangedReaders(self.max_open)
        self._self_contained = ipc_blocks.self_contained(schema)
        self._open: OrderedDict[int, _Open] = OrderedDict()
        self._held_bytes, self._verified = 0, set[int]()
        self._lock = threading.Lock()
        self._opening: dict[int, threading.Lock] = {}
        # _read: bytes read (fetched, or record batches of shards no longer open); _touched:
        self._read, self._touched = 0, 0  # mapped bytes read since a release
        # How the loader's columns are decoded straight into its windows (set by the loader,
        # which knows them); None: through Arrow's decoder.
        self.placement: Placement | None = None
        self.shuffled = False  # (set by a loader that shuffles: the advice on open files)

    def read_failure(
        self, where: str, err: Exception, doing: str = "decoded", path: str | None = None
    ) -> SnapError:
        """:func:`..faults.read_failure`: where the loader shuffles, and a local ``path``."""
        return faults.read_failure(where, err, doing, self.shuffled, path if self.local else None)

    @property
    def fs(self) -> Any:
        """The filesystem, made afresh in a forked child: an async client's event loop and
        connections (gcsfs, s3fs) belong to the parent and hang if used after fork."""
        self._fs, self._pid = storage.in_this_process(self._fs, self._pid)
        return self._fs

    @property
    def bytes_read(self) -> int:
        """Bytes read from storage: remote shards as fetched (whole or by range), local
        and cached ones as their record batches are read (each time one is)."""
        with self._lock:
            held = [o.reader for o in self._open.values()]
        return self._read + self._ranged.tails.fetched + sum(_read_by(r) for r in held)

    @property
    def direct(self) -> bool:
        """Whether record batches may be decoded straight into windows (:attr:`placement`)."""
        return self.placement is not None

    @property
    def fetcher(self) -> Fetcher:
        return self._fetcher or shared_fetcher()

    def url(self, i: int) -> str:
        return storage.to_url(self.fs, storage.join(self.root, self.shards[i].path))

    def _cached(self, i: int) -> CachedShard | None:
        assert self.cache is not None
        entry = self.shards[i]
        path = storage.join(self.root, entry.path)
        fill = functools.partial(self.fetcher.fetch_to_sink, self.fs, path, entry.bytes)
        try:
            held = self.cache.open_if_room(self.url(i), entry.bytes, entry.crc32c, fill)
        except FileNotFoundError as err:  # (the download's: the shard is not in the store)
            raise versions.missing_shard(self, entry.path, self.url(i)) from err
        if held is not None:
            self._verified.add(i)  # checked against size and crc32c when the entry was filled
        return held

    def _source(self, i: int, try_cache: bool = True) -> tuple[Any, int, CachedShard | None]:
        """The shard's bytes as an Arrow source, checked against the manifest."""
        entry, url = self.shards[i], self.url(i)
        path = storage.join(self.root, entry.path)
        try:  # the path is used again after the open (stat, crc): it may go meanwhile
            source, size, held = self._open_source(i, path, try_cache)
            if size != entry.bytes:
                raise CorruptShardError(
                    f"shard {url} has {size} bytes, the manifest says {entry.bytes}; {DAMAGED}"
                )
            key = (path, size, os.stat(path).st_mtime_ns, entry.crc32c) if self.local else None
            # (remote: no key, its bytes checked by fetch_checked or when cached)
            if self.verify and key and key not in _verified_local and i not in self._verified:
                crc = crc32c_file(path)
                if crc != entry.crc32c:
                    raise CorruptShardError(
                        f"shard {url} is damaged: crc32c {crc}, the manifest says "
                        f"{entry.crc32c}; {DAMAGED}"
                    )
                _verified_local.add(key)
        except FileNotFoundError as err:
            raise versions.missing_shard(self, entry.path, url) from err
        except SnapError:
            raise
        except OSError as err:  # EACCES, EIO...: the storage's, not the shard's
            raise self.read_failure(f"shard {url}", err, path=path) from err
        self._verified.add(i)
        return source, size, held

    def _block_file(self, i: int, cached: CachedShard | None = None) -> BlockFile:
        """A local shard, or the ``cached`` entry of a remote one, whose record batches are
        checked one by one as they are read (and decoded straight into windows)."""
        entry, url, opened = self.shards[i], self.url(i), None
        path = storage.join(self.root, entry.path)
        try:
            if cached is None:
                self._check_local(url, path)
            local = path if cached is None else cached.path
            judged = disagree.judged(self, i)
            opened = BlockFile(local, entry, self.schema, url, cached is not None, judged)
            return opened
        except FileNotFoundError as err:
            raise versions.missing_shard(self, entry.path, url) from err
        except SnapError:
            raise
        except OSError as err:  # EACCES, EIO...: the storage's, not the shard's
            raise self.read_failure(f"shard {url}", err, path=path) from err
        finally:
            if opened is None and cached is not None:
                cached.close()  # (its lock: the entry may go)

    def _check_local(self, url: str, path: str) -> None:
        if problem := storage.local_file_problem(self.root, path, self._real_root):
            raise CorruptShardError(f"shard {url} {problem}; it is not read")

    def _open_source(self, i: int, path: str, cache: bool) -> tuple[Any, int, CachedShard | None]:
        if self.local:
            self._check_local(self.url(i), path)
            source = pa.OSFile(os.fsencode(path), "r")
            return source, source.size(), None
        if cache and self.cache is not None and (held := self._cached(i)) is not None:
            source = pa.OSFile(os.fsencode(held.path), "r")
            return source, source.size(), held
        data = self.fetcher.fetch_checked(self.fs, path, self.shards[i], self.verify)
        return pa.py_buffer(data), len(data), None

    def _ranged_reader(self, i: int) -> pa.ipc.RecordBatchFileReader:
        """This thread's reader of shard ``i`` over range requests (see :mod:`.ranged`)."""
        entry, path = self.shards[i], storage.join(self.root, self.shards[i].path)
        try:
            check, want = functools.partial(self._check_layout, i), entry if self.verify else None
            return self._ranged.reader(self.fs, path, entry.bytes, check, Expected(want))
        except FileNotFoundError as err:
            raise versions.missing_shard(self, entry.path, self.url(i)) from err
        except (pa.ArrowException, OSError) as err:
            if isinstance(err, SnapError):  # damaged, or the storage's answer already
                raise
            raise self.read_failure(f"shard {self.url(i)}", err, "opened") from err

    def reader(self, i: int) -> pa.ipc.RecordBatchFileReader | BlockFile:
        """Shard ``i``, open: a :class:`BlockFile` for a local shard with a checksum per record
        batch, else Arrow's file reader (the whole shard checked once, when opened)."""
        if self.ranged:
            return self._ranged_reader(i)
        with self._lock:
            if i in self._open:
                self._open.move_to_end(i)
                return self._open[i].reader
            gate = self._opening.setdefault(i, threading.Lock())
        with gate:  # one thread opens (and verifies) a shard; the others wait for it
            with self._lock:
                if i in self._open:
                    return self._open[i].reader
            reader: pa.ipc.RecordBatchFileReader | BlockFile
            blocks = self.shards[i].batch_crc32c and self._self_contained
            cached = self._cached(i) if blocks and self.cache is not None else None
            if blocks and (self.local or cached is not None):  # a file on this machine's disk
                reader, size = self._block_file(i, cached), self.shards[i].bytes
            else:
                source, size, cached = self._source(i, try_cache=not blocks)
                try:
                    reader = pa.ipc.open_file(source, options=ipc_layout.NO_THREADS)
                    self._check_layout(i, reader)
                except (pa.ArrowException, OSError) as err:
                    if cached is not None:
                        cached.close()
                    if isinstance(err, SnapError):
                        raise
                    raise self.read_failure(f"shard {self.url(i)}", err, "opened") from err
            with self._lock:
                held = 0 if self.local or cached is not None else size
                self._open[i] = _Open(reader, held, cached)
                self._held_bytes += held
                self._read += 0 if isinstance(reader, BlockFile) else size
                while len(self._open) > self.max_open or (
                    self._held_bytes > self.max_bytes and len(self._open) > 1
                ):
                    _, evicted = self._open.popitem(last=False)
                    self._held_bytes -= evicted.held
                    self._read += _read_by(evicted.reader)
                    evicted.release()
                self._opening.pop(i, None)
            return reader

    def _check_layout(self, i: int, reader: pa.ipc.RecordBatchFileReader) -> None:
        """The file's schema is the manifest's, exactly (values are never cast), and it holds
        the record batches the manifest lists: else CorruptShardError, before any is read."""
        counts = reader.num_record_batches, self.shards[i].record_batches
        urls, wrong = disagree.judged(self, i)
        if error := disagree.layout_error(reader.schema, self.schema, counts, urls, wrong):
            raise error

    def _check(self, verify: bool | None) -> bool:
        """Whether to check a record batch's crc32c: ``verify`` (None: the readers') and theirs."""
        return self.verify if verify is None else verify and self.verify

    def read_batch(
        self, shard: int, batch: int, rows: int, verify: bool | None = None,
        columns: list[str] | None = None,
    ) -> pa.RecordBatch:  # fmt: skip
        """Record batch ``batch`` of shard ``shard``, validated in full (buffer sizes, offsets,
        UTF-8: what keeps a crafted file from reading outside its buffers; it costs little,
        ``benchmarks/validation.py``), with ``rows`` records in snap's encodings; ``columns``:
        only those (a local shard's others are not decoded)."""
        reader = self.reader(shard)
        some = tuple(columns) if columns and len(columns) < len(self.schema) else ()
        try:
            if isinstance(reader, BlockFile):
                rb = reader.read(batch, self._check(verify), some)
            else:
                rb = reader.get_batch(batch).select(list(some)) if some else reader.get_batch(batch)
            rb.validate(full=True)
        except SnapError:  # damaged, or the storage's answer already (a remote range read)
            raise
        except (pa.ArrowException, OSError, IndexError) as err:
            raise self.read_failure(f"shard {self.url(shard)} record batch {batch}", err) from err
        if rb.num_rows != rows:
            raise CorruptShardError(
                f"shard {self.url(shard)} record batch {batch} has {rb.num_rows} records, "
                f"the manifest says {rows}"
            )
        problem = schema_mod.encoding_problem(rb)
        if problem is not None:
            raise CorruptShardError(f"shard {self.url(shard)} record batch {batch}: {problem}")
        return rb

    def read_into(
        self, shard: int, batch: int, rows: int, targets: dict[str, Any], verify: Check = None
    ) -> bool:
        """Record batch ``batch`` of ``shard``, its values decoded straight into ``targets``
        (:mod:`.direct`, by :attr:`placement`), checked like :meth:`read_batch`; False where
        that cannot be done here (then use :meth:`read_batch`)."""
        check = self._check(verify)
        done = self._direct(shard, batch, lambda f, p: f.read_into(batch, check, rows, p, targets))
        return bool(done)

    def read_values(
        self, shard: int, batch: int, rows: int, verify: bool | None = None
    ) -> dict[str, np.ndarray] | None:
        """Record batch ``batch`` of ``shard``: its values (:func:`.direct.values`), checked
        like :meth:`read_batch`; None where that cannot be done here."""
        check = self._check(verify)
        return self._direct(shard, batch, lambda f, place: f.read_values(batch, check, rows, place))

    def slot_job(
        self,
        shard: int,
        batch: int,
        dests: dict[str, tuple[np.ndarray, int]],
        slots: np.ndarray,
        span: tuple[int, int, int],
        verify: bool | None = None,
    ) -> SlotJob | None:
        """:meth:`BlockFile.slot_job` of record batch ``batch`` of ``shard``, errors named."""
        check = self._check(verify)
        return self._direct(
            shard, batch, lambda f, p: f.slot_job(batch, check, p, dests, slots, span)
        )

    def slot_done(self, shard: int, job: SlotJob, result: int | str) -> bool:
        """:meth:`BlockFile.slot_done` of the job's own reader, its errors named."""
        done = self._direct(shard, job.batch, lambda f, p: f.slot_done(job, result, p), job.reader)
        return bool(done)

    def route(self, shard: int) -> tuple[ShardReaders, int]:
        return self, shard  # (a mixture's MultiReaders answers with one snapshot's readers)

    def release(self) -> None:
        """The open shards' mapped pages leave RSS (:meth:`BlockFile.release`): when a
        window's reads are done, and every RELEASE_BYTES read meanwhile."""
        self._touched = 0
        with self._lock:
            opened = [o.reader for o in self._open.values() if isinstance(o.reader, BlockFile)]
        for reader in opened:
            reader.release()

    def _direct(self, shard: int, batch: int, read: Read, known: Any = None) -> Any:
        """``read(shard's BlockFile, or ``known``, placement)``, errors named; else None."""
        reader = known or (self.placement and self.reader(shard))
        if not isinstance(reader, BlockFile) or self.placement is None:
            return None
        try:
            out = read(reader, self.placement)
            self._touched, reader.touched = self._touched + reader.touched, 0
            if self._touched > RELEASE_BYTES:  # mapped pages read since the last release
                self.release()
            return out
        except SnapError:
            raise
        except (pa.ArrowException, OSError) as err:
            raise self.read_failure(f"shard {self.url(shard)} record batch {batch}", err) from err

    def close(self) -> None:
        with self._lock:
            opened = list(self._open.values())
            self._open.clear()
            self._held_bytes = 0
            self._read += sum(_read_by(o.reader) for o in opened)
        for entry in opened:
            entry.release()


def _read_by(reader: Any) -> int:
    return reader.bytes_read if isinstance(reader, BlockFile) else 0


@dataclass
class _Open:
    """An open shard: its reader, the bytes it holds in memory, its cache entry if any."""

    reader: pa.ipc.RecordBatchFileReader | BlockFile
    held: int
    cached: CachedShard | None = None

    def release(self) -> None:
        # Drops the entry's shared lock: eviction may delete the file from now on (a thread
        # still decoding from it is unaffected: a deleted file stays readable where open).
        if self.cached is not None:
            self.cached.close()
            self.cached = None
