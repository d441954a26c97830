"""Decoding one segment of a window (records ``[start, stop)`` of one record batch) into its
slots: the step a decode process (:mod:`.decoder`) repeats, and a read thread (:mod:`.run`)
takes in groups (:func:`decode_segments`: one compiled call for a group where it can be); a
gathered window placed whole from where a first epoch found its record batches
(:func:`gather_known`); and the runs of such steps (:func:`chunked`) a decode process is
given at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from . import direct
from .blocks import BlockFile

if TYPE_CHECKING:
    from .direct import SlotJob
    from .gather import GatherWindow
    from .plan import Segment
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
    in_slots: bool = True,
) -> str:
    """Records ``[start, stop)`` of record batch ``batch`` (``rows`` records) of ``shard``
    into window records ``offset...``; returns how ("into window", "into slots", "values" or
    "arrow": the trace's names). ``verify=False`` skips the checksum of a record batch
    another process has checked (None: the readers' own setting); ``in_slots=False``: the
    compiled call was tried already (:func:`decode_segments`).

    Without Arrow's IPC reader where it can (:mod:`.direct`): in a shuffled window, the
    segment checked, decoded and put in its slots by one compiled call; a whole record batch
    kept in order goes straight into the window's rows (and, without the compiled call, an
    uncompressed one of large records straight to its records' slots by ``preadv``);
    otherwise its values are decoded to buffers still in the CPU's cache, and from there the
    segment's records go to their slots (a window's first and last record batches are often
    used in part).
    """
    if readers.direct:
        segment = (offset, shard, batch, rows, start, stop)
        if in_slots and _in_slots(readers, window, [segment], verify)[0]:
            return "into slots"
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
    rb = readers.read_batch(shard, batch, rows, verify, columns)
    window.fill(offset, rb.select(columns), start, stop)
    return "arrow"


REPEATED = 2  # segments of one record batch in a group that are decoded together


def decode_segments(
    readers: ShardReaders | MultiReaders,
    window: Window,
    columns: list[str],
    segments: list[tuple[int, int, int, int, int, int]],
) -> list[str]:
    """Several segments (``(offset, shard, batch, rows, start, stop)`` each, as
    :func:`decode_segment` takes them) of one window: in a shuffled window, every one that
    can be is checked, decoded and put in its slots in one compiled call for all of them
    (:func:`.direct.decode_many`: a read thread then waits once for the GIL, not once per
    record batch); the others one by one. Returns how, per segment."""
    hows = _repeated(readers, window, columns, segments)
    rest = [k for k, how in enumerate(hows) if not how]
    if not readers.direct:
        for k in rest:
            hows[k] = decode_segment(readers, window, columns, *segments[k])
        return hows
    done = _in_slots(readers, window, [segments[k] for k in rest], None)
    for k, placed in zip(rest, done, strict=True):
        seg = segments[k]
        how = "into slots" if placed else None
        hows[k] = how or decode_segment(readers, window, columns, *seg, in_slots=False)
    return hows


def _repeated(
    readers: ShardReaders | MultiReaders,
    window: Window,
    columns: list[str],
    segments: list[tuple[int, int, int, int, int, int]],
) -> list[str]:
    """The segments whose record batch others of ``segments`` use too (a mixture repeating
    a small snapshot: thousands of one record batch in a window; a sample upsampling one),
    each
    such record batch read and decoded once for all of them (per segment, a compressed one
    was decompressed every time: 25x slower, measured). Returns "repeated" for those, ""
    for the others (nothing done)."""
    hows = [""] * len(segments)
    uses: dict[tuple[int, int], list[int]] = {}
    for k, seg in enumerate(segments):
        uses.setdefault((seg[1], seg[2]), []).append(k)
    for (shard, batch), ks in uses.items():
        if len(ks) < REPEATED:
            continue
        rb = readers.read_batch(shard, batch, segments[ks[0]][3], None, columns).select(columns)
        window.fill_many(rb, [(segments[k][0], segments[k][4], segments[k][5]) for k in ks])
        for k in ks:
            hows[k] = "repeated"
    return hows


def _in_slots(
    readers: ShardReaders | MultiReaders,
    window: Window,
    segments: list[tuple[int, int, int, int, int, int]],
    verify: bool | None,
) -> list[bool]:
    """Each segment straight to its slots where it can be (:func:`.direct.decode_many`, one
    call for all); per segment, whether it was (nothing was done for the others)."""
    slotted = window.slot_columns() if readers.direct else None
    if slotted is None or not direct.AVAILABLE:
        return [False] * len(segments)
    dests, slot_of = slotted
    jobs: list[tuple[int, int, SlotJob]] = []  # (segment, shard, job)
    for k, (offset, shard, batch, rows, start, stop) in enumerate(segments):
        slots = slot_of[offset : offset + stop - start]
        span = (start, stop, rows)
        job = readers.slot_job(shard, batch, dests, slots, span, verify)
        if job is not None:
            jobs.append((k, shard, job))
    done = [False] * len(segments)
    if jobs:
        results = direct.decode_many([job.args for _, _, job in jobs])
        for (k, shard, job), result in zip(jobs, results, strict=True):
            done[k] = readers.slot_done(shard, job, result)
    return done


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


def open_bound(readers: ShardReaders | MultiReaders) -> int:
    """How many shards the readers keep open at once, where that bounds them (fewer than
    there are: else every shard stays open, whatever a read group reaches into)."""
    parts = readers.parts if hasattr(readers, "parts") else [readers]
    return min(p.max_open if p.max_open < len(p.shards) else 1 << 40 for p in parts)


def groups(
    pairs: list[tuple[int, Segment]], shard_of: np.ndarray, size: int, most_shards: int
) -> Iterator[list[tuple[int, Segment]]]:
    """Consecutive runs of ``pairs`` (``(offset, segment)``, in block order) for a read
    thread to decode at once: ``size`` segments, fewer where they reach into more than
    ``most_shards`` shards. Each segment's shard stays open until its group is decoded, so
    a group of 625 segments of one-record shards held 625 files open (two descriptors each,
    before Python 3.13), past an open-files limit of 1,024 that the readers' own bound of
    128 open shards kept within (a probe of 5,000 shards)."""
    most_shards, size = max(1, most_shards), max(1, size)
    if most_shards >= size:  # (no group of ``size`` reaches into more: every shard stays open)
        for start in range(0, len(pairs), size):
            yield pairs[start : start + size]
        return
    shards = shard_of[np.fromiter((seg.block for _, seg in pairs), np.int64, len(pairs))]
    nth = np.cumsum(np.concatenate([[1], shards[1:] != shards[:-1]]))  # each one's shard, 1..
    start = 0
    while start < len(pairs):  # (up to the first segment of the (most_shards + 1)-th shard)
        stop = int(np.searchsorted(nth, nth[start] + most_shards, side="left"))
        stop = min(start + size, stop)
        yield pairs[start:stop]
        start = stop
