"""Decoding one segment of a window (records ``[start, stop)`` of one record batch) into its
slots: the step a read thread (:mod:`.run`) or a decode process (:mod:`.decoder`) repeats;
the same step for a gathered window (:func:`gather_segment`: the records left where they
are); and the runs of such steps (:func:`chunked`) a decode process is given at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .blocks import BlockFile
from .convert import column_to_numpy

if TYPE_CHECKING:
    from .gather import GatherWindow
    from .shard import ShardReaders
    from .sources import MultiReaders
    from .window import Window


def decode_segment(
    readers: ShardReaders | MultiReaders,
    window: Window,
    columns: list[str],
    offset: int,
    shard: int,
    batch: int,
    rows: int,
    start: int,
    stop: int,
    verify: bool | None = None,
) -> str:
    """Records ``[start, stop)`` of record batch ``batch`` (``rows`` records) of ``shard``
    into window records ``offset...``; returns how ("into window", "values" or "arrow": the
    trace's names). ``verify=False`` skips the checksum of a record batch another process
    has checked (None: the readers' own setting).

    Without Arrow's IPC reader where it can (:mod:`.direct`): a whole record batch kept in
    order goes straight into the window's rows (and an uncompressed one of large records
    straight to its records' slots in a shuffled window); otherwise its values are decoded
    to buffers still in the CPU's cache, and from there the segment's records go to their
    slots (a window's first and last record batches are often used in part).
    """
    if readers.direct:
        whole = start == 0 and stop == rows
        targets = window.targets(offset, rows) if whole else None
        if targets is not None and readers.read_into(shard, batch, rows, targets, verify):
            window.settle(offset, targets)
            return "into window"
        decoded: dict[str, Any] | None = readers.read_values(shard, batch, rows, verify)
        if decoded is not None:
            if not whole:
                decoded = {name: v[start:stop] for name, v in decoded.items()}
            window.scatter(offset, decoded)
            return "values"
    rb = readers.read_batch(shard, batch, rows, verify)
    window.fill(offset, rb.select(columns), start, stop)
    return "arrow"


def gather_segment(
    readers: ShardReaders | MultiReaders,
    window: GatherWindow,
    segment: int,
    offset: int,
    shard: int,
    batch: int,
    rows: int,
    start: int,
    stop: int,
) -> str:
    """Records ``[start, stop)`` of record batch ``batch`` (``rows`` records) of ``shard``
    as segment ``segment`` of a gathered window (window records ``offset...``), checked;
    returns how ("mapped", "values" or "arrow": the trace's names).

    An uncompressed record batch of a local shard stays in the page cache (the shard file
    mapped, its crc32c computed there); a compressed one is decoded to buffers of its own
    (:mod:`.direct`), else by Arrow's decoder; the window keeps those until it is closed.
    """
    n = stop - start
    if readers.direct:
        found = readers.read_mapped(shard, batch, rows, window.source)
        if found is not None:
            number, where = found
            widths = window.widths
            at = {c: (number, base + start * widths[c]) for c, base in where.items()}
            window.add(segment, offset, n, at)
            return "mapped"
        values = readers.read_values(shard, batch, rows)
        if values is not None:
            window.add_values(segment, offset, {c: v[start:stop] for c, v in values.items()})
            return "values"
    rb = readers.read_batch(shard, batch, rows)
    window.add_values(
        segment, offset, {c: column_to_numpy(rb.column(c).slice(start, n)) for c in window.columns}
    )
    return "arrow"


def gather_known(
    readers: ShardReaders | MultiReaders,
    window: GatherWindow,
    shards: np.ndarray,
    batches: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
) -> bool:
    """Every segment of a gathered window at once (record batch ``batches[k]`` of shard
    ``shards[k]``, records ``starts[k]...`` for ``lengths[k]``), where each was read, checked
    and placed before by :func:`gather_segment` (a later epoch): no read per record batch,
    a few numpy calls per shard. False (nothing done) where any was not."""
    if readers.ranged:
        return False
    for shard in np.unique(shards).tolist():
        mine = np.flatnonzero(shards == shard)
        part, i = readers.route(shard)  # a mixture's snapshot, and the shard's number there
        placement = part.placement
        f = part.reader(i) if placement is not None else None
        if not isinstance(f, BlockFile) or placement is None:
            return False
        bases = f.placed(batches[mine], placement)
        if bases is None:
            return False
        number, _ = window.source(f, f.map)
        for c, base in bases.items():
            window.seg_source[c][mine] = number
            window.seg_base[c][mine] = base + starts[mine] * window.widths[c]
    window.add_all(lengths)
    return True


def chunked(jobs: np.ndarray, bytes_per_row: int, target: int) -> Iterator[np.ndarray]:
    """Decode jobs (rows of ``[offset, shard, batch, rows, start, stop, ...]``) in consecutive
    runs of about ``target`` bytes of records each: what a decode process takes at once."""
    rows = jobs[:, 5] - jobs[:, 4]
    ends = np.cumsum(rows) * max(1, bytes_per_row)
    start = 0
    while start < len(jobs):
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + target, side="left")) + 1
        stop = min(len(jobs), max(start + 1, stop))
        yield jobs[start:stop]
        start = stop
