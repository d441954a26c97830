"""What a loader reads: one snapshot or a mixture, as one table of blocks and one reader.

:func:`resolve` turns a :class:`~.snapshot.Snapshot` or a :class:`~.mix.Mixture` into a
:class:`ReadSet`: the sources, the schema and columns read, every source's blocks numbered
as one table (:meth:`~.plan.Blocks.concat`), and readers that answer for any of them
(:class:`MultiReaders` routes a global shard number to its snapshot's
:class:`~.shard.ShardReaders`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .. import storage, stored_types
from ..console import named
from ..errors import OptionError, outside_snap
from .cache import ShardCache
from .direct import Placement, SlotJob
from .mix import Mixture
from .plan import Blocks
from .shard import ShardReaders

if TYPE_CHECKING:
    from .options import LoaderOptions
    from .snapshot import Snapshot


class MultiReaders:
    """Several snapshots' :class:`ShardReaders` behind the one interface the loader uses:
    shard ``i`` of the mixture is shard ``i - first[s]`` of source ``s``."""

    def __init__(self, parts: list[ShardReaders]) -> None:
        self.parts = parts
        self.first = np.cumsum([0] + [len(p.shards) for p in parts[:-1]]).tolist()

    def route(self, shard: int) -> tuple[ShardReaders, int]:
        s = int(np.searchsorted(self.first, shard, side="right")) - 1
        return self.parts[s], shard - int(self.first[s])

    @property
    def direct(self) -> bool:
        return any(p.direct for p in self.parts)

    @property
    def ranged(self) -> bool:
        return any(p.ranged for p in self.parts)

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.parts)

    def read_batch(
        self, shard: int, batch: int, rows: int, verify: bool | None = None,
        columns: list[str] | None = None,
    ) -> pa.RecordBatch:  # fmt: skip
        part, i = self.route(shard)
        return part.read_batch(i, batch, rows, verify, columns)

    def read_into(
        self,
        shard: int,
        batch: int,
        rows: int,
        targets: dict[str, Any],
        verify: bool | None = None,
    ) -> bool:
        part, i = self.route(shard)
        return part.read_into(i, batch, rows, targets, verify)

    def read_values(
        self, shard: int, batch: int, rows: int, verify: bool | None = None
    ) -> dict[str, np.ndarray] | None:
        part, i = self.route(shard)
        return part.read_values(i, batch, rows, verify)

    def slot_job(
        self,
        shard: int,
        batch: int,
        dests: dict[str, tuple[np.ndarray, int]],
        slots: np.ndarray,
        span: tuple[int, int, int],
        verify: bool | None = None,
    ) -> SlotJob | None:
        part, i = self.route(shard)
        return part.slot_job(i, batch, dests, slots, span, verify)

    def slot_done(self, shard: int, job: SlotJob, result: int | str) -> bool:
        part, i = self.route(shard)
        return part.slot_done(i, job, result)

    def release(self) -> None:
        for p in self.parts:
            p.release()

    def close(self) -> None:
        for p in self.parts:
            p.close()


@dataclass
class ReadSet:
    """The sources of a loader and how to read them."""

    sources: list[Snapshot]
    names: list[str]
    schema: pa.Schema  # the first source's: the columns read have the same types in all
    columns: list[str]
    blocks: Blocks  # every source's blocks, one table
    source_blocks: list[Blocks]  # each source's own
    readers: ShardReaders | MultiReaders
    counts: tuple[int, ...] | None  # records per epoch from each source (a mixture)
    cache: ShardCache | None

    @property
    def fingerprints(self) -> list[str]:
        return [s.manifest.fingerprint for s in self.sources]

    def bytes_per_row(self) -> int:
        """Bytes per record the windows are sized by: the fixed-width columns' bytes, or
        the sources' average record if that is more, less the fixed-width columns not read
        (``columns=["label"]`` of 12 KiB images sized windows by the images: 10 windows an
        epoch of 170 KiB each, each a shuffle of 21,000 records, instead of one)."""
        from .window import row_bytes

        records = raw = 0
        wanted = set(self.columns)  # (a list's `in`: 0.8 s of a loader of 6,400 columns)
        for s in self.sources:
            left_out = [c for c in s.schema.names if c not in wanted]
            n = s.manifest.num_records
            records += n
            raw += max(0, s.manifest.uncompressed_bytes - n * row_bytes(s.schema, left_out))
        return max(1, row_bytes(self.schema, self.columns), raw // max(1, records))

    def densest_row_bytes(self) -> int:
        """Bytes per record of the columns read, in the shard whose records are largest:
        what groups windows into units (:func:`.units.grouped`), which an average sized by
        a snapshot's few large records among many small ones held all of them at once
        (forty of 5 MiB, written first, in a "4-record" window's unit of 645: 450 MiB)."""
        from .window import row_bytes

        wanted = set(self.columns)
        most = row_bytes(self.schema, self.columns)
        for s in self.sources:
            left_out = row_bytes(s.schema, [c for c in s.schema.names if c not in wanted])
            for shard in s.manifest.shards:
                if shard.records:
                    raw = shard.uncompressed_bytes - shard.records * left_out
                    most = max(most, raw // shard.records)
        return max(1, most, self.bytes_per_row())

    def record_bytes(self) -> int:
        """Bytes of a whole record (all its columns, uncompressed): what a read touches of
        it, whichever columns it keeps (a first read checks all of each record batch)."""
        records = int(self.blocks.rows.sum())
        raw = sum(s.manifest.uncompressed_bytes for s in self.sources)
        return max(self.bytes_per_row(), raw // max(1, records))

    def first_rows(
        self, most_bytes: int, most_rows: int, most_shards: int, most_blocks: int
    ) -> int:
        """Records of an epoch's first window: ``most_bytes`` of whole records, at most
        ``most_rows``, those of ``most_shards`` shards and of ``most_blocks`` record batches
        of average size (a function of the snapshot: the ramp is part of the order)."""
        rows = int(self.blocks.rows.sum())
        per_shard = max(1, rows // max(1, len(np.unique(self.blocks.shard))))
        per_block = max(1, rows // max(1, len(self.blocks.rows)))
        return min(
            most_rows,
            most_shards * per_shard,
            most_blocks * per_block,
            max(1, most_bytes // self.record_bytes()),
        )


def _cache(options: LoaderOptions, snapshots: list[Snapshot]) -> ShardCache | None:
    """The cache of the remote snapshots' shards, if ``cache_dir`` is given. Where every
    snapshot is on local disk (read in place) it is checked all the same, so that a sweep's
    setting fails alike on both, then left unused with a warning: it was made and never
    used, without a word (now it is not made)."""
    if not options.cache_dir:
        return None
    remote = any(not storage.is_local(s.fs) for s in snapshots)
    cache = ShardCache(options.cache_dir, options.cache_bytes, make=remote)
    if remote:
        return cache
    given = named(f"--cache-dir {options.cache_dir}", f"cache_dir={options.cache_dir!r}")
    warnings.warn(
        f"{given} is not used: {snapshots[0].url} is on this machine's disk and is read in "
        "place (a cache keeps the shards fetched from remote storage, gs://, s3://, "
        "hdfs://...); leave it out",
        UserWarning,
        stacklevel=outside_snap(),
    )
    return None


def resolve(source: Snapshot | Mixture, options: LoaderOptions) -> ReadSet:
    """The :class:`ReadSet` of a snapshot or mixture (columns checked: OptionError)."""
    if isinstance(source, Mixture):
        schema, columns = source.columns(options.columns)
        snapshots, names, counts = source.sources, source.names, tuple(source.counts)
    else:
        schema = source.schema
        columns = options.column_names(list(schema.names))
        snapshots, names, counts = [source], [source.url], None
    transposed = [c for c in columns if stored_types.is_transposed(schema.field(c).type)]
    if transposed:
        raise OptionError(
            f"column {transposed[0]!r} holds tensors stored transposed (a yielded Arrow tensor "
            "with a permutation, which earlier versions of snap kept as it came): the loader "
            "would give their axes in the stored order; make the snapshot again (snap create "
            "--overwrite) or leave the column out with columns=[...]"
        )
    cache = _cache(options, snapshots)
    parts = []
    for s in snapshots:
        readers = ShardReaders(
            s.fs, s.root, s.manifest.shards, s.schema, verify=options.verify, cache=cache
        )
        readers.placement = Placement.of(s.schema, columns)
        readers.shuffled = bool(options.shuffle)
        parts.append(readers)
    own = [Blocks.from_manifest(s.manifest) for s in snapshots]
    return ReadSet(
        sources=list(snapshots),
        names=names,
        schema=schema,
        columns=columns,
        blocks=Blocks.concat(own, [len(s.manifest.shards) for s in snapshots]),
        source_blocks=own,
        readers=parts[0] if len(parts) == 1 else MultiReaders(parts),
        counts=counts,
        cache=cache,
    )
