"""A window's decoding handed to a decode process (:mod:`.procs`): what the read thread
sends it (the window's shared arrays, the reader set once, chunks of record batches) and
what comes back (CPU seconds, bytes read, or the error it raised).

At most ``in_flight`` chunks are unanswered at once, so the process always has the next
while this side waits; each message also carries what the process is to unmap and which
reader sets to close (:meth:`.procs.Child.take_freed`). A process that dies loses nothing:
the chunks it had not finished are decoded by the read thread.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import shm
from .procs import Child, DecodeProcessError, Died

if TYPE_CHECKING:
    from .plan import Blocks, Segment


def describe(window: Any) -> tuple[dict[str, Any], list[shm.Handle]]:
    """What a decode process needs to map ``window``: each column's array and the slot
    table, by shared-memory handle, and the handles themselves."""
    arrays: dict[str, tuple[int, int, str, tuple[int, ...]]] = {}
    handles: list[shm.Handle] = []
    parts = dict(window.fixed)
    if window.slot_of is not None:
        parts["\0slots"] = window.slot_of
    for name, view in parts.items():
        h = shm.handle_of(view)
        if h is None:
            raise DecodeProcessError(f"window column {name!r} is not in shared memory")
        rows = h.nbytes // max(1, view.dtype.itemsize * int(np.prod(view.shape[1:])))
        arrays[name] = (h.id, h.nbytes, view.dtype.str, (rows, *view.shape[1:]))
        handles.append(h)
    return {"rows": window.rows, "arrays": arrays}, handles


def jobs_of(
    blocks: Blocks, index: np.ndarray, offsets: list[int], segments: list[Segment],
    checked: np.ndarray | None,
) -> np.ndarray:  # fmt: skip
    """A window's jobs for decode processes: rows of ``[offset, shard, batch, rows, start,
    stop, check]``, check 0 for a record batch some process of this loader has checked
    (``checked``: each would otherwise check again the ones it had not met itself)."""
    unchecked = np.ones(len(index), np.int64) if checked is None else ~checked[index]
    return np.stack([
        np.asarray(offsets, np.int64), blocks.shard[index].astype(np.int64),
        blocks.batch[index].astype(np.int64), blocks.rows[index].astype(np.int64),
        np.fromiter((s.start for s in segments), np.int64, len(segments)),
        np.fromiter((s.stop for s in segments), np.int64, len(segments)),
        unchecked.astype(np.int64),
    ], axis=1)  # fmt: skip


def decode_window(
    child: Child,
    key: int,
    spec: Callable[[], dict[str, Any]],
    window: Any,
    chunks: Callable[[], np.ndarray | None],
    stop: threading.Event,
    fallback: Callable[[np.ndarray], None],
    in_flight: int = 2,
) -> tuple[float, float, int]:
    """Have ``child`` decode chunks of ``window`` (rows of ``[offset, shard, batch, rows,
    start, stop, check]``, check 0 for a record batch already checked) until ``chunks()``
    gives None or ``stop`` is set, ``in_flight`` chunks at once → (time done, the
    process's CPU seconds, bytes it read). ``key`` names the reader set, ``spec()``
    describes it (sent once to each process). A decoding error (CorruptShardError, ...) is
    raised here as the process raised it.

    If the process dies (the OOM killer, a signal), nothing is lost: the chunks it did not
    finish and the rest of its share are decoded here by ``fallback(chunk)``, with a warning
    naming it, and the pool starts another for the next pass."""
    desc, handles = describe(window)
    cpu, nbytes, error = 0.0, 0, None
    sent: deque[np.ndarray] = deque()  # chunks the process has not answered yet
    with child.lock:
        try:
            while True:
                job = None if stop.is_set() or error is not None else chunks()
                if job is not None:
                    msg: dict[str, Any] = {"key": key, "window": desc, "jobs": job}
                    fds: list[int] = []
                    new = [h for h in handles if h.id not in child.arrays or child.stale]
                    child.stale = False
                    if key not in child.readers:
                        msg["spec"] = spec()
                        child.readers.add(key)
                    if new:
                        msg["fds"], fds = [h.id for h in new], [h.fd for h in new]
                    msg.update(child.take_freed())
                    sent.append(job)
                    child.send(msg, fds)
                    child.arrays.update(h.id for h in new)
                    if len(sent) < in_flight:
                        continue
                if not sent:
                    child.send_freed()  # dropped meanwhile: unmapped now, not next window
                    break
                reply, _ = child.recv()
                sent.popleft()
                child.readers = set(reply[-1])  # what it has open now
                if reply[0] == "ok":
                    cpu, nbytes = cpu + reply[1], nbytes + reply[2]
                else:  # it may not have mapped what came with the message: send it again
                    child.stale = True
                    error = error or _error(child, reply[1], reply[2])
        except Died as died:
            child.dead = True
            warnings.warn(
                f"snap's {child.name} {died.args[0]}; this pass decodes its "
                "share in threads, and the next pass starts another",
                RuntimeWarning,
                stacklevel=2,
            )
            while sent:
                fallback(sent.popleft())
            while error is None and not stop.is_set() and (job := chunks()) is not None:
                fallback(job)
    if error is not None:
        raise error
    return time.perf_counter(), cpu, nbytes


def _error(child: Child, error: Any, trace: str) -> BaseException:
    """The exception a decode process reported (its traceback as a note, for bugs)."""
    if not isinstance(error, BaseException):
        return DecodeProcessError(f"{child.name} failed: {error}\n{trace}")
    if not getattr(error, "exit_code", None) and hasattr(error, "add_note"):
        error.add_note(f"raised in snap's {child.name}:\n{trace}")
    return error
