"""Decoding one segment of a window (records ``[start, stop)`` of one record batch) into its
slots: the step a read thread (:mod:`.run`) or a decode process (:mod:`.decoder`) repeats; a
gathered window placed whole from where a first epoch found its record batches
(:func:`gather_known`); and the runs of such steps (:func:`chunked`) a decode process is
given at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .blocks import BlockFile

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
    into window records ``offset...``; returns how ("into window", "into slots", "values" or
    "arrow": the trace's names). ``verify=False`` skips the checksum of a record batch
    another process has checked (None: the readers' own setting).

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
        slotted = window.slot_columns()
        if slotted is not None and readers.read_slots(
            shard, batch, slotted[0], slotted[1][offset : offset + stop - start],
            (start, stop, rows), verify,
        ):  # fmt: skip
            return "into slots"
        decoded: dict[str, Any] | None = readers.read_values(shard, batch, rows, verify)
        if decoded is not None:
            if not whole:
                decoded = {name: v[start:stop] for name, v in decoded.items()}
            window.scatter(offset, decoded)
            return "values"
    rb = readers.read_batch(shard, batch, rows, verify)
    window.fill(offset, rb.select(columns), start, stop)
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
    and noted before (a later epoch: :meth:`.blocks.BlockFile.placed`): no read per record batch,
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
        try:
            number, _ = window.source(f, f.map)
        except (OSError, ValueError):  # no memory map here (ENOMEM, a special file)
            return False
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
