"""``snap.open``: a committed snapshot, its manifest, and verified reads of its shards."""

from __future__ import annotations

import difflib
import math
import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .. import layout, storage
from .. import versions as versions_mod
from ..errors import ManifestError, OptionError
from ..keywords import DATASET_INSTEAD, checked_keywords, no_attribute, not_indexed
from ..layout import MANIFEST_NAME, RUNS_DIR, SHARDS_DIR, VERSIONS_DIR
from ..manifest import Manifest, ShardEntry
from ..units import integer, options_dict
from .convert import batch_to_numpy
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
        return self.manifest.num_records

    @property
    def schema(self) -> pa.Schema:
        return self.manifest.schema

    @property
    def shards(self) -> tuple[ShardEntry, ...]:
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
        current = versions_mod.read(fs, storage.join(root, MANIFEST_NAME)) or self.manifest
        out = []
        for m in versions_mod.history(fs, root, current):
            h = m.history
            out.append({
                "version": m.version, "parent": h.parent if h else None, "created": m.created,
                "records": m.num_records, "bytes": m.bytes, "shards": m.num_shards,
                "changes": dict(h.changes) if h else None, "current": m is current,
            })  # fmt: skip
        return out

    @property
    def version(self) -> int:
        return self.manifest.version

    def shard_url(self, shard: ShardEntry) -> str:
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
                records as fit); "auto": 256 MiB worth.
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
                or not isinstance(fraction, (int, float))
                or not (math.isfinite(fraction) and fraction > 0)
            ):
                raise OptionError(f"fraction must be a number > 0, got {fraction!r}")
            records = max(1, round(self.num_records * fraction))
        records = integer(records)
        if isinstance(records, bool) or not isinstance(records, int) or records < 1:
            raise OptionError(f"records must be an integer >= 1, got {records!r}")
        from .mix import Mixture

        return Mixture([self], None, records)

    @checked_keywords
    def head(self, n: int = 5, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The first ``n`` records in the order written, one ``{column: value}`` each.

        Reads only the record batches it needs (their shards are checksummed first).
        """
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
        """Every record batch, in the order written, as ``{column: numpy array}``."""
        names = checked_columns(columns, list(self.schema.names))
        for i in range(len(self.shards)):
            for batch in self.read_shard(i).to_batches():
                yield batch_to_numpy(batch, names)


@checked_keywords
def open(
    url: str | os.PathLike[str] | Snapshot,
    storage_options: dict[str, Any] | None = None,
    version: int | None = None,
) -> Snapshot:
    """Open the committed snapshot at ``url`` (validates its manifest): its current version,
    or ``version`` (one it keeps: see :meth:`Snapshot.versions`). An open ``Snapshot`` is
    itself (its current version: the one it opened, as it was opened).

    Raises:
        ManifestError: no manifest (not a snapshot, or not finished), an invalid one, or a
            version it does not keep.
    """
    if isinstance(url, Snapshot):
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
    if storage.is_local(fs) and os.path.isfile(root):
        root = _directory_of(fs, root)
    path = storage.join(root, MANIFEST_NAME)
    try:
        if storage.is_local(fs) and (problem := storage.local_file_problem(root, path)):
            raise ManifestError(f"{storage.to_url(fs, path)} {problem}; it is not read")
        data = storage.read_bytes(fs, path)
    except FileNotFoundError as err:
        if not storage.is_local(fs) and storage.isfile(fs, root):  # (one more call, if missing)
            return open(storage.to_url(fs, _directory_of(fs, root)), storage_options, version)
        raise _no_manifest(fs, root) from err
    current = Manifest.from_json(data, where=storage.to_url(fs, path))
    if version is not None:
        current = versions_mod.open_version(fs, root, current, version)
    return Snapshot(fs, root, current)


def _no_manifest(fs: Any, root: str) -> ManifestError:
    """Why ``root`` has no manifest.json: a shard given, a lost one, a create's, no snapshot."""
    if (given := _shard_given(fs, root)) is not None:  # a shard that is missing
        return given
    if (kept := versions_mod.lost(fs, root)) is not None:  # (deleted, or left out of a copy)
        return versions_mod.lost_error(fs, root, kept)
    url, runs = storage.to_url(fs, root), storage.list_names(fs, storage.join(root, RUNS_DIR))
    if any(layout.lease_epoch(n) is not None or layout.is_own_run(n) for n in runs):
        return ManifestError(  # (an empty _runs/: a create that failed at once)
            f"{url} is an unfinished snapshot (no manifest.json yet): a snap create is writing "
            "it, or was interrupted; snap inspect says which (and who is writing); once a "
            "create commits it, it can be read"
        )
    there = "is not a snapshot (no manifest.json)" if storage.exists(fs, root) else ""
    return ManifestError(
        f"{url} {there or 'does not exist: check the path'}{storage.missing_bucket_hint(fs, root)}"
        f"{_inside_snapshot(fs, root)}{_near_snapshots(fs, root)}{_snapshots_inside(fs, root)}"
    )


def _inside_snapshot(fs: Any, root: str) -> str:
    """ "; it is the shards/ directory of the snapshot X: give X" for a snapshot's own
    directory given as one (any filesystem; looked for only for those names)."""
    parent, name = posixpath.split(root.rstrip("/"))
    if name not in (SHARDS_DIR, RUNS_DIR, VERSIONS_DIR) or not parent:
        return ""
    try:
        if not fs.isfile(posixpath.join(parent, MANIFEST_NAME)):
            return ""
    except OSError:
        return ""
    return f"; it is the {name}/ directory of the snapshot {storage.to_url(fs, parent)}: give that"


def _near_snapshots(fs: Any, root: str) -> str:
    """ "; did you mean ...?" naming the snapshots beside local ``root`` whose names are like
    its own (``snap inspect runs/snapshots`` for ``runs/snapshot``); "" elsewhere."""
    if not storage.is_local(fs):
        return ""
    parent, name = posixpath.split(root.rstrip("/"))
    try:
        names = [e.name for e in os.scandir(parent or "/") if e.is_dir()]
    except OSError:
        return ""
    near = [
        n
        for n in difflib.get_close_matches(name, names, n=3, cutoff=0.75)
        if n != name and os.path.isfile(posixpath.join(parent, n, MANIFEST_NAME))
    ]
    shown = " or ".join(storage.to_url(fs, posixpath.join(parent, n)) for n in near[:2])
    return f"; did you mean {shown}?" if near else ""


def _snapshots_inside(fs: Any, root: str) -> str:
    """ "; it holds the snapshots a, b: give one" for a local directory of snapshots given as
    one (``snap inspect demo-output``); "" elsewhere."""
    if not storage.is_local(fs):
        return ""
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return ""
    inside = [n for n in names if os.path.isfile(posixpath.join(root, n, MANIFEST_NAME))]
    if not inside:
        return ""
    shown = ", ".join(inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
    one = storage.to_url(fs, posixpath.join(root, inside[0]))
    return f"; it holds the snapshot{'s' if len(inside) > 1 else ''} {shown}: give one ({one})"


def _directory_of(fs: Any, file: str) -> str:
    """The snapshot a file given as one stands for: its directory, if the file is its
    manifest; else a ManifestError (a shard named: which snapshot it belongs to)."""
    parent = posixpath.dirname(file)
    if posixpath.basename(file) == MANIFEST_NAME:
        return parent
    given = _shard_given(fs, file)
    if given is not None:
        raise given
    url, above = storage.to_url(fs, file), posixpath.dirname(parent)
    if posixpath.basename(parent) == SHARDS_DIR and storage.exists(
        fs, storage.join(above, RUNS_DIR)
    ):
        raise ManifestError(  # (it said "is a file, not a snapshot")
            f"{url} is in the shards of {storage.to_url(fs, above)}, which no snap create has "
            "committed yet (one is running, or was stopped: run it again to finish it, or "
            f"snap gc {storage.to_url(fs, above)} removes what it left)"
        )
    raise ManifestError(f"{url} is a file, not a snapshot (a directory with a manifest.json)")


def _shard_given(fs: Any, path: str) -> ShardGiven | None:
    """The error for ``path`` in the shards directory of a committed snapshot, else None."""
    parent = posixpath.dirname(path)
    above = posixpath.dirname(parent)
    if posixpath.basename(parent) != SHARDS_DIR or not storage.exists(
        fs, storage.join(above, MANIFEST_NAME)
    ):
        return None
    shard = posixpath.join(SHARDS_DIR, posixpath.basename(path))
    return ShardGiven(storage.to_url(fs, path), storage.to_url(fs, above), shard)


class ShardGiven(ManifestError):
    """A shard file was given where a snapshot was expected (``snap inspect``, ``head`` and
    ``verify`` take one: :mod:`.target`)."""

    def __init__(self, url: str, snapshot: str, shard: str) -> None:
        super().__init__(
            f"{url} is a shard of the snapshot {snapshot}: give the snapshot's directory "
            f"(snap inspect, snap head and snap verify take the shard itself)"
        )
        self.url, self.snapshot, self.shard = url, snapshot, shard

    def __reduce__(self) -> tuple[Any, ...]:
        return ShardGiven, (self.url, self.snapshot, self.shard)
