"""``snap bench``: replay a snapshot with the loader and report how fast it goes here.

Each epoch is timed on its own: the first one also verifies every shard's checksum (once
per process) and allocates the shuffle window, so later epochs are what a training run pays
per epoch. ``step_ms`` makes the consumer spend that long on each batch (a stand-in for the
training step), so the input-bound share says whether the loader keeps up with a model of
that speed; with 0 the consumer only counts, and the loader is measured flat out.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from fsspec.core import split_protocol

from .. import compiled, faults, signals, storage
from ..errors import OptionError, StorageError
from ..os_paths import cwd_gone
from ..protocols import LOCAL_PROTOCOLS
from .cache_faults import blocked
from .snapshot import Snapshot
from .stats import records_in
from .trace import Tracer, file_written, not_a_file


def bench(
    snapshot: Snapshot,
    batch_size: int = 256,
    epochs: int = 2,
    step_ms: float = 0.0,
    trace: str | None = None,
    **loader_options: Any,
) -> dict[str, Any]:
    """Replay ``epochs`` epochs; return the ``snap bench --json`` document.

    Raises:
        OptionError: ``trace`` cannot be written (said before the replay, not after it).
    """
    trace = checked_trace(trace)
    tracer = Tracer() if trace else None
    per_epoch = []
    records = nbytes = batches = 0
    setup = time.perf_counter()
    first_batch: float | None = None
    with snapshot.loader(batch_size, epochs=1, trace=tracer, **loader_options) as loader:
        # One time base: the replay, its epochs, the first batch and the input-bound share
        # all start at the first iter() (the loader's set-up is reported on its own).
        started = time.perf_counter()
        setup = started - setup
        for epoch in range(epochs):
            t0 = time.perf_counter()
            e_records = e_bytes = 0
            for batch in loader:
                signals.raise_received()  # (a Ctrl-C a garbage collector's callback took)
                if first_batch is None:
                    first_batch = time.perf_counter() - started
                e_records += records_in(batch)
                e_bytes += value_bytes(batch)
                batches += 1
                if step_ms:
                    t_step = time.perf_counter()
                    # An accelerator step: the host thread waits with the GIL released, as
                    # it does in a real framework's step (a Python busy loop would not).
                    time.sleep(step_ms / 1000)
                    if tracer is not None:
                        tracer.add("train step (simulated)", t_step, time.perf_counter())
            seconds = max(1e-9, time.perf_counter() - t0)
            per_epoch.append(
                {
                    "epoch": epoch,
                    "seconds": round(seconds, 4),
                    "records_per_s": round(e_records / seconds, 1),
                    "mb_per_s": round(e_bytes / seconds / 1e6, 2),
                }
            )
            records += e_records
            nbytes += e_bytes
        stats = loader.stats()
    seconds = max(1e-9, time.perf_counter() - started)
    doc: dict[str, Any] = {
        "path": snapshot.url,
        "batch_size": batch_size,
        "epochs": epochs,
        "step_ms": step_ms,
        "options": {k: v for k, v in loader_options.items() if k != "map"},
        "records": records,
        "batches": batches,
        "bytes": nbytes,
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds, 1),
        "mb_per_s": round(nbytes / seconds / 1e6, 2),
        "first_batch_seconds": None if first_batch is None else round(first_batch, 4),
        "setup_seconds": round(setup, 4),
        "input_bound_pct": stats["input_bound_pct"],
        "consumer_wait_s": stats["consumer_wait_s"],
        "stage_seconds": stats["stage_seconds"],
        "settings": stats["settings"],
        "per_epoch": per_epoch,
        "trace": trace,
        "bytes_read": stats["bytes_read"],
        "cache": stats.get("cache"),
        "compiled": compiled_parts(),
    }
    if tracer is not None and trace:
        try:
            tracer.write(trace)
        except OSError as err:
            raise trace_fault(trace, err) from err
        doc["trace_events"] = len(tracer.events)
    return doc


def trace_fault(trace: str, err: OSError) -> StorageError:
    """The ``--trace`` file could not be written (after the replay): which file, why, and
    what to do; no part of it is left (:meth:`.Tracer.write`)."""
    code = errno.errorcode.get(err.errno or 0, "")
    cause = f"{err.strerror or err}{f' ({code})' if code else ''}"
    if err.errno == errno.EFBIG:
        hint = faults.too_big_hint(trace)
    elif err.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "space" if err.errno == errno.ENOSPC else "some of the quota"
        hint = f"free {what} there, or give --trace a file on another disk"
    else:
        hint = "give --trace another file"
    return StorageError(f"--trace {trace}: the trace could not be written: {cause}; {hint}")


def checked_trace(trace: str | None) -> str | None:
    """``trace`` with ``~`` expanded, once its directory is known to be writable.

    Raises:
        OptionError: it cannot be written (said before the replay, not after it).
    """
    if trace is None:
        return None
    if not trace.strip():  # ('' ran the replay and wrote no trace, exit 0)
        raise OptionError(f"--trace {trace!r} names no file; give one, such as trace.json")
    if "://" in trace or trace.lower().startswith(("file:", "local:")):  # (as OUTPUT takes)
        # Refused by its scheme first: resolving gs:// needs gcsfs, which may not be installed.
        scheme = split_protocol(trace)[0]
        if scheme is not None and scheme.lower() not in LOCAL_PROTOCOLS:
            raise OptionError(f"--trace {trace!r}: a trace is a local file; give a path here")
        trace = storage.resolve(trace)[1]
    trace = os.path.expanduser(trace)  # (as every other path: a quoted '~/t.json')
    if (gone := cwd_gone(trace)) is not None:
        raise OptionError(f"--trace {trace!r}: {gone}")
    if not_a_file(trace):  # (a device or a pipe: written in place, where it is)
        return trace
    folder = os.path.dirname(file_written(trace))
    if os.path.isdir(trace):
        raise OptionError(f"--trace {trace!r} is a directory; give a file name in it")
    if os.path.exists(trace) and not os.access(trace, os.W_OK):
        raise OptionError(f"--trace {trace!r} is not writable; give another file")
    if not os.path.isdir(folder):  # (a file, a link to nothing, or missing)
        cause, hint = blocked(Path(folder), "give --trace a file in a directory that exists") or (
            f"its directory {folder} does not exist",
            "create it, or give --trace another file",
        )
        raise OptionError(f"--trace {trace!r}: {cause}; {hint}")
    if not os.access(folder, os.W_OK):
        raise OptionError(f"--trace {trace!r}: its directory {folder} is not writable")
    return trace


def is_stdout(trace: str) -> bool:
    """Whether ``trace`` is this process's stdout: ``/dev/stdout``, ``/proc/self/fd/1``, or
    the file stdout was sent to (``> out.json``)."""
    try:
        here, out = os.stat(os.path.expanduser(trace)), os.fstat(1)
    except (OSError, ValueError):  # (not there yet, a name no path can be, stdout closed)
        return False
    return (here.st_dev, here.st_ino) == (out.st_dev, out.st_ino)


def value_bytes(batch: dict[str, Any]) -> int:
    """Bytes of a batch's values: a text or ragged column's (object arrays) counted by its
    values, not numpy's 8 bytes a reference; text by its UTF-8 bytes."""
    return sum(_column_bytes(v) for v in batch.values())


def _column_bytes(v: Any) -> int:
    if isinstance(v, str):
        return len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
    if isinstance(v, bytes):
        return len(v)
    if not isinstance(v, np.ndarray):
        return 0  # (None: a null)
    if v.dtype != object:
        return v.nbytes
    try:  # text of ASCII, the common case, without a call a value
        if all(map(str.isascii, v)):
            return sum(map(len, v))
    except TypeError:  # not all text: bytes, arrays (ragged), lists of text, nulls
        pass
    return sum(map(_column_bytes, v))


def compiled_parts() -> dict[str, bool]:
    """Which of the compiled parts this install has (README, Development), and what
    ``_decode`` found on this machine: without one, the loader takes a pure-Python path (the
    same batches, slower), and a run slower than README's tables may be why."""
    found: dict[str, bool] = {}
    for name in ("gather", "shuffle", "ragged", "decode"):
        module = compiled.load(name)  # (as the loader has it: one older than the code is off)
        found[name] = module is not None
        if name == "decode":
            for flag, key in (("LZ4", "lz4"), ("ZSTD", "zstd"), ("HW_CRC", "crc32c_instruction")):
                found[key] = bool(getattr(module, flag, False))
    return found
