"""``snap.open``: a committed snapshot, its manifest, and verified reads of its shards."""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .. import layout, storage
from .. import versions as versions_mod
from ..errors import ManifestError, OptionError
from ..keywords import DATASET_INSTEAD, checked_keywords, no_attribute, not_indexed
from ..layout import MANIFEST_NAME
from ..manifest import Manifest, ShardEntry
from ..units import integer, options_dict
from .convert import batch_to_numpy
from .not_found import directory_of, no_manifest
from .options import Auto, LoaderOptions, checked_columns, local_dir
from .shard import ShardReaders
from .trace import Tracer

if TYPE_CHECKING:  # imported when first made: `snap inspect`, `verify`, `head` need neither
    from .loader import Loader
    from .mix import Mixture


class Snapshot:
    """A committed snapshot. Create with :func:`open`."""

    def __init__(self, fs: Any, root: str, manifest: Manifest) -> None:
        self._fs, self._pid = fs, os.getpid()
        self.root: str = root  # the path in ``fs``
        self.manifest: Manifest = manifest
        self.url: str = storage.to_url(fs, root)

    @property
    def fs(self) -> Any:
        """The filesystem, made afresh in a forked child (torch DataLoader workers, a
        ``multiprocessing`` fork: :func:`storage.in_this_process`)."""
        self._fs, self._pid = storage.in_this_process(self._fs, self._pid)
        return self._fs

    @property
    def num_records(self) -> int:
        """Records in this version (all its shards)."""
        return self.manifest.num_records

    @property
    def schema(self) -> pa.Schema:
        """Its columns and their Arrow types (``s.schema.names``: the column names)."""
        return self.manifest.schema

    @property
    def shards(self) -> tuple[ShardEntry, ...]:
        """This version's shards, in the order written, as the manifest lists them."""
        return self.manifest.shards

    def __getattr__(self, name: str) -> Any:  # only for names it does not have
        if name.startswith("_"):  # (copy, pickle and hasattr() probe these)
            raise AttributeError(name, name=name, obj=self)
        raise no_attribute(self, name, DATASET_INSTEAD)

    def __getitem__(self, index: object) -> Any:  # s[0]; also what `for r in s` calls
        raise not_indexed()

    def __repr__(self) -> str:
        return (
            f"Snapshot({self.url!r}, records={self.num_records}, shards={len(self.shards)}, "
            f"columns={self.schema.names})"
        )

    def stats(self) -> dict[str, Any]:
        """Totals from the manifest: records, shards, record batches, bytes, ratio, codec."""
        m = self.manifest
        return {
            **m.totals(),
            "compression": m.compression,
            "ratio": round(m.uncompressed_bytes / m.bytes, 3) if m.bytes else None,
        }

    def versions(self) -> list[dict[str, Any]]:
        """The versions the snapshot keeps, oldest first: number, creation time, what changed
        against its parent (``history.changes``), records and bytes."""
        fs, root = self.fs, self.root
        path = storage.join(root, MANIFEST_NAME)  # (read twice: an HDFS commit deletes it,
        current = versions_mod.read(fs, path) or versions_mod.read(fs, path)  # then renames)
        if current is None and (kept := versions_mod.lost(fs, root)) is not None:
            raise versions_mod.lost_error(fs, root, kept)  # (lost in place: the copy to restore)
        if current is None:  # (not the version opened: as the storage holds it now)
            raise ManifestError(
                f"{storage.to_url(fs, root)} has no {MANIFEST_NAME} now: the snapshot was moved "
                f"or deleted since it was opened (version {self.version}); open it again "
                "where it is now"
            )
        out = []
        for m in [*_kept_copies(fs, root, current.version), current]:
            h = m.history
            out.append({
                "version": m.version, "parent": h.parent if h else None, "created": m.created,
                "records": m.num_records, "bytes": m.bytes, "shards": m.num_shards,
                "changes": dict(h.changes) if h else None, "current": m is current,
            })  # fmt: skip
        return out

    @property
    def version(self) -> int:
        """The version opened (1 for a snapshot made before versions)."""
        return self.manifest.version

    def shard_url(self, shard: ShardEntry) -> str:
        """The full URL (or local path) of ``shard``, one of :attr:`shards`."""
        return storage.to_url(self.fs, storage.join(self.root, shard.path))

    def read_shard(self, index: int, verify: bool = True) -> pa.Table:
        """Read shard ``index`` whole, checked against the manifest (size, crc32c, records).

        Raises:
            CorruptShardError: missing, wrong size, wrong checksum, or undecodable.
        """
        n, index = len(self.shards), integer(index)
        if isinstance(index, bool) or not isinstance(index, int) or not -n <= index < n:
            have = f"{n} (0 to {n - 1})" if n else "none"
            raise OptionError(f"no shard {index!r}: the snapshot has {have}")
        index %= n
        readers = ShardReaders(self.fs, self.root, self.shards, self.schema, verify=verify)
        sizes = self.shards[index].batch_sizes()
        batches = [readers.read_batch(index, j, rows) for j, rows in enumerate(sizes)]
        return pa.Table.from_batches(batches, schema=self.schema)

    @checked_keywords
    def loader(
        self,
        batch_size: int | None = None,
        *,
        global_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        epochs: int | None = 1,
        rank: int | Auto = 0,
        world_size: int | Auto = 1,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        shuffle_buffer: int | str = "auto",
        num_parallel_reads: int | Auto = "auto",
        prefetch: int | Auto = "auto",
        map: Callable[..., Any] | None = None,  # noqa: A002
        verify: bool = True,
        trace: Tracer | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        processes: int = 0,
    ) -> Loader:
        """A shuffling, prefetching loader of numpy batches; see :class:`Loader`.

        Args:
            batch_size: records per batch (per rank; 256 if neither size is given).
            global_batch_size: records per step over all ranks, instead of ``batch_size``:
                the global order (:mod:`.elastic`), each rank yielding its slice of every
                global batch, the same for any ``world_size`` that divides it.
            shuffle, seed: shuffle after the snapshot, deterministic in (seed, epoch).
            epochs: epochs per ``for`` loop over the loader (None: forever).
            rank, world_size: this process's share ("auto": torch.distributed if it is
                initialised, else RANK/WORLD_SIZE, SLURM_PROCID/SLURM_STEP_NUM_TASKS or
                OMPI_COMM_WORLD_RANK/SIZE; README, Distributed).
            drop_last: drop the last partial batch of each epoch (per rank).
            columns: the columns to read (None: all).
            shuffle_buffer: records in the shuffle window, or its size ("64MiB": as many
                records as fit); "auto": 256 MiB worth (32 MiB with shuffle=False, where
                a window only reads ahead).
            num_parallel_reads, prefetch: threads decoding, batches ready ("auto": tuned).
            map: ``fn(batch)`` or ``fn(batch, rng)`` applied in threads to each batch.
            verify: check each record batch's crc32c as it is first read (a shard fetched
                whole, or of format 1, whole before its first use); False skips only the
                checksums (sizes and structure are still checked).
            trace: a :class:`~snapshot_cli.readers.trace.Tracer` recording each stage, as
                ``snap bench --trace`` does.
            cache_dir, cache_limit: remote snapshots: keep fetched shards in this local
                directory, shared by every process on the machine, at most ``cache_limit``
                bytes such as ``"50GiB"`` (see :mod:`snapshot_cli.readers.cache`).
            processes: decode in this many processes instead of threads (Linux, fixed-width
                columns): for a training step that runs Python most of the time, which the
                read threads would wait on for the GIL (see :mod:`.procs`).

        Raises:
            OptionError: a value that cannot work, naming the option.
        """
        options = LoaderOptions(
            shuffle=shuffle, seed=seed, epochs=epochs, rank=rank, world_size=world_size,
            drop_last=drop_last, columns=columns,
            shuffle_buffer=shuffle_buffer, num_parallel_reads=num_parallel_reads,
            prefetch=prefetch, map=map, verify=verify,
            cache_dir=local_dir(cache_dir, "cache_dir"),
            cache_limit=cache_limit, global_batch_size=global_batch_size, processes=processes,
        )  # fmt: skip
        from .loader import Loader

        return Loader(self, batch_size, options, trace)

    @checked_keywords
    def sample(self, records: int | None = None, fraction: float | None = None) -> Mixture:
        """This snapshot with ``records`` (or ``fraction`` of its records) per epoch: a random
        subset, another every epoch, or for more than it has, each record repeated; nothing
        is rewritten. Its ``.loader(...)`` reads in the global order (see :mod:`.mix`)."""
        if (records is None) == (fraction is None):
            raise OptionError("sample needs records=N or fraction=F (one of them)")
        if fraction is not None:
            if (
                isinstance(fraction, bool)
                or not isinstance(fraction, numbers.Real)  # (np.float32 too, as in weights=)
                or not (math.isfinite(fraction) and fraction > 0)
            ):
                raise OptionError(f"fraction must be a number > 0, got {fraction!r}")
            records = max(1, round(self.num_records * float(fraction)))
        records = integer(records)
        if isinstance(records, bool) or not isinstance(records, int) or records < 1:
            raise OptionError(f"records must be an integer >= 1, got {records!r}")
        from .mix import Mixture

        return Mixture([self], None, records)

    @checked_keywords
    def head(self, n: int = 5, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The first ``n`` records in the order written, one ``{column: value}`` each, of
        ``columns`` (None: all). Reads only the record batches it needs (their shards are
        checksummed first)."""
        n = integer(n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise OptionError(f"n must be an integer >= 0 (records to show), got {n!r}")
        names = checked_columns(columns, list(self.schema.names))
        out: list[dict[str, Any]] = []
        readers = ShardReaders(self.fs, self.root, self.shards, self.schema)
        for i, shard in enumerate(self.shards):
            for b, rows in enumerate(shard.batch_sizes()):
                if len(out) >= n:
                    return out
                cols = batch_to_numpy(readers.read_batch(i, b, rows), names)
                take = min(rows, n - len(out))
                out.extend({name: cols[name][r] for name in names} for r in range(take))
        return out

    def iter_batches(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Every record batch, in the order written, as ``{column: numpy array}`` of
        ``columns`` (None: all)."""
        names = checked_columns(columns, list(self.schema.names))
        for i in range(len(self.shards)):
            for batch in self.read_shard(i).to_batches():
                yield batch_to_numpy(batch, names)


def _kept_copies(fs: Any, root: str, current: int) -> list[Manifest]:
    """The copies in ``_versions/`` of the versions before ``current``, oldest first; a copy
    that holds another version's manifest than its name says is no copy of that version
    (``open(version=k)`` refuses it): a warning names it, and it is not listed."""
    out = []
    for k in versions_mod.kept(fs, root):
        path = layout.version_path(root, k)
        m = versions_mod.read(fs, path) if k < current else None
        if m is not None and m.version != k:
            warnings.warn(
                f"{storage.to_url(fs, path)} holds the manifest of version {m.version}, not "
                f"{k}: a bad copy, not listed (snap.open(version={k}) refuses it); delete it, "
                f"or put version {k}'s manifest there",
                stacklevel=3,
            )
        elif m is not None:
            out.append(m)
    return out


def _not_a_directory(path: str) -> bool:
    """A local path that is there but no directory: a file, a FIFO or a device; in a
    ``shards/`` directory a link to nothing too (a shard's, said as such by its readers)."""
    if not os.path.lexists(path) or os.path.isdir(path):
        return False
    return os.path.exists(path) or os.path.basename(os.path.dirname(path)) == layout.SHARDS_DIR


@checked_keywords
def open(
    url: str | os.PathLike[str] | Snapshot,
    storage_options: dict[str, Any] | None = None,
    version: int | None = None,
) -> Snapshot:
    """Open the committed snapshot at ``url`` (validates its manifest): its current version,
    or ``version`` (one it keeps: see :meth:`Snapshot.versions`). An open ``Snapshot`` is
    itself (its current version: the one it opened, as it was opened). ``storage_options``:
    fsspec options of ``url``'s filesystem (credentials, project...), for a path or URL.

    Raises:
        ManifestError: no manifest (not a snapshot, or not finished), an invalid one, or a
            version it does not keep.
        OptionError: ``storage_options`` given with an open Snapshot.
    """
    if isinstance(url, Snapshot):
        if storage_options is not None:  # (they were ignored: its filesystem is made)
            raise OptionError(f"{url.url} is open already, on its own filesystem: "
                              "storage_options apply to a path or URL being opened")  # fmt: skip
        if version is None or version == url.version:
            return url
        fs, root = url.fs, url.root
    elif isinstance(url, (str, os.PathLike)):
        fs, root = storage.resolve(os.fspath(url), options_dict(storage_options, "storage_options"))
    else:  # (SnapshotDataset(snap.mix(...)): "expected str, bytes or os.PathLike object")
        name = type(url).__name__
        mixed = name == "Mixture"
        hint = "; a mixture is read by its own loader: mixture.loader(...), .to_torch() for PyTorch"
        raise OptionError(
            f"a snapshot's path or URL, or an open Snapshot, is needed here, not "
            f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}{hint if mixed else ''}"
        )
    if storage.is_local(fs) and _not_a_directory(root):
        root = directory_of(fs, root)
    path = storage.join(root, MANIFEST_NAME)
    try:
        data = storage.read_own(fs, root, path)  # (locally: a regular file inside the snapshot)
    except FileNotFoundError as err:
        if not storage.is_local(fs) and storage.isfile(fs, root):  # (one more call, if missing)
            return open(storage.to_url(fs, directory_of(fs, root)), storage_options, version)
        raise no_manifest(fs, root) from err
    current = Manifest.from_json(data, where=storage.to_url(fs, path))
    if version is not None:
        current = versions_mod.open_version(fs, root, current, version)
    return Snapshot(fs, root, current)
