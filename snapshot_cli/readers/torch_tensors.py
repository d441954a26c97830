"""A numpy batch as torch tensors (pure but for importing torch): numeric columns shared
without a copy, ragged ones as lists of tensors, and what torch has no dtype for (text,
bytes, structs, datetimes of a yielded Arrow table) as Python values, which a DataLoader's
workers also hand on as they are; and the type of SnapshotDataset's batches, which torch's
collate refuses (:func:`refuse_collate`)."""

from __future__ import annotations

import datetime
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError, RecordError, outside_snap
from .map_arrays import as_array, framework_array

if TYPE_CHECKING:
    from .loader import Batch


def import_torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "the PyTorch adapter needs torch: pip install torch "
            "(or a torch build for your accelerator)"
        ) from err
    return torch


class DatasetBatch(dict[str, Any]):
    """A whole batch as :class:`SnapshotDataset` yields it (a dict of tensors and lists).

    Its own type so that torch's default collate refuses it: ``DataLoader(dataset)`` batches
    items (``batch_size=1`` by default) and would have stacked whole batches into one more
    dimension, ``(1, 64, 3, 32, 32)``, or failed on the last, shorter one."""


def refuse_collate(batch: Any, *, collate_fn_map: Any = None) -> Any:
    raise OptionError(
        "a DataLoader with a batch_size batches SnapshotDataset's items, which are whole "
        "batches already: make it with DataLoader(dataset, batch_size=None) and set the "
        "batch size on the dataset (SnapshotDataset(url, batch_size=...))"
    )


NUMERIC = "biufc"  # numpy kinds torch has tensors of


def to_tensors(batch: Batch) -> dict[str, Any]:
    """numpy batch → tensors without copying numeric columns (see the module docstring)."""
    torch = import_torch()
    out: dict[str, Any] = {}

    def tensor(a: np.ndarray) -> Any:
        # read-only arrays (Arrow's zero-copy views of ragged values) are copied: a tensor
        # is always writable, and writing into Arrow's buffers would be undefined; so are a
        # map's flipped views and byte-swapped arrays, which torch.from_numpy refuses
        a = framework_array(a)
        return torch.from_numpy(a if a.flags.writeable else a.copy())

    for name, value in batch.items():
        if isinstance(value, torch.Tensor):  # a map's own tensor: as it is
            out[name] = value
            continue
        value = as_array(name, value)
        if value.dtype.kind in NUMERIC:
            out[name] = tensor(value)
        elif value.dtype.kind in "mM":  # times: no torch dtype, and a DataLoader would fail
            out[name] = python_times(name, value)  # on the array: Python's
        elif len(value) and isinstance(value[0], np.ndarray) and value[0].dtype.kind in NUMERIC:
            out[name] = ragged(torch, value)
        else:  # text, bytes, lists of text or times, nested lists, structs: Python values
            items = value.tolist()
            if items and isinstance(items[0], np.ndarray):  # (a list a record)
                items = [python_value(name, v) for v in items]
            out[name] = items
    return out


def ragged(torch: Any, value: np.ndarray) -> list[Any]:
    """A ragged column's records as tensors that are views of one tensor: the values copied
    once into it (writable, whatever the loader's arrays were), each record its own part.
    A tensor made per record cost ~1 us each, and a DataLoader's workers handed each over in
    a shared-memory segment of its own (~200 us a record: 45-100x slower than no workers);
    views of one storage go over as one. A record kept alone keeps the batch's values (its
    storage): README says to ``clone()`` it."""
    records = list(value)
    dtypes = {r.dtype for r in records}
    if len(dtypes) > 1 and len({d.newbyteorder("=") for d in dtypes}) > 1:  # (a map's mix)
        return [torch.from_numpy(framework_array(r).copy()) for r in records]
    flat = torch.from_numpy(framework_array(np.concatenate(records, axis=None)))
    parts = torch.split(flat, [r.size for r in records])
    if all(r.ndim == 1 for r in records):
        return list(parts)
    return [p.view(r.shape) for p, r in zip(parts, records, strict=True)]


def python_value(name: str, value: Any) -> Any:
    """A record's array (of a list column) as Python values, at any depth: times as
    ``datetime``s or ``timedelta``s (:func:`python_times`: numpy's ``tolist()`` gave those
    in nanoseconds as ints, ``[1600000000000000000]``), nested lists as lists (it left the
    inner ones numpy arrays)."""
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype.kind in "mM":
        held = np.empty(value.size, dtype=object)  # (shaped as the record's array)
        held[:] = python_times(name, value.ravel())
        return held.reshape(value.shape).tolist()
    if value.dtype == object:
        return [python_value(name, v) for v in value]
    return value.tolist()


_EPOCH = datetime.datetime(1970, 1, 1)
_FLOORED: set[str] = set()  # columns whose floor to the microsecond was said (python_times)


def python_times(name: str, value: np.ndarray) -> list[Any]:
    """A column of numpy times → Python ``datetime``s or ``timedelta``s, to the microsecond
    (finer ticks floored, as numpy's cast does short of its range's ends, where it overflows:
    it made 1677's earliest nanoseconds 2262's). A time Python has no value for (a year past
    9999 or before 1) is refused naming the column, not given as numpy's int for it."""
    unit, count = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):  # no fixed length in microseconds (numpy's cast took dates)
        if value.dtype.kind == "m":
            raise RecordError(
                f"column {name!r} holds durations in {'years' if unit == 'Y' else 'months'}, "
                "which have no length in Python's timedelta: map them to days or to a number"
            )
        value = value.astype("M8[D]")  # (exact: a month's or a year's first day)
        unit, count = "D", 1
    if np.isnat(value).any():  # (NaT: a null another writer left; no Python time for it)
        raise RecordError(
            f"column {name!r} holds a missing time (NaT, a null of another writer) in "
            f"{int(np.isnat(value).sum())} records, and to_torch() gives times as Python's, "
            "which have none: read it with the loader (numpy), or map it (a default time)"
        )
    us_per_tick = float(np.array(count, f"m8[{unit}]") / np.timedelta64(1, "us"))
    ticks = value.view(np.int64).tolist()
    if us_per_tick >= 1:
        micros = [t * round(us_per_tick) for t in ticks]  # (Python ints: exact)
    else:
        per_us = round(1 / us_per_tick)
        micros = [t // per_us for t in ticks]
        if name not in _FLOORED and any(t % per_us for t in ticks):
            _FLOORED.add(name)  # (once a column: a batch each would be a flood)
            warnings.warn(
                f"column {name!r} holds times finer than a microsecond ({unit}), which Python's "
                "datetime and timedelta have not: to_torch() gives them floored to the "
                "microsecond (1 ns and 999 ns both 0). For the exact ticks read it with the "
                "loader (numpy's datetime64), or map it to int64 (value.view(np.int64))",
                UserWarning,
                stacklevel=outside_snap(),
            )
    delta = datetime.timedelta
    try:
        if value.dtype.kind == "m":
            return [delta(microseconds=m) for m in micros]
        return [_EPOCH + delta(microseconds=m) for m in micros]
    except OverflowError:
        kind, holds = (
            ("timedelta", "999,999,999 days either way")
            if value.dtype.kind == "m"
            else ("datetime", "years 1 to 9999")
        )
        raise RecordError(
            f"column {name!r} holds a time no Python {kind} holds (its values run from "
            f"{value.min()} to {value.max()}; Python's hold {holds}), and to_torch() gives "
            "times as Python's: read it with the loader (numpy), or map it to int64 ticks "
            "(t.view(np.int64))"
        ) from None
