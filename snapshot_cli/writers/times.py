"""Dates and times a pipeline yields → numpy ``datetime64``/``timedelta64`` of a unit Arrow
stores (pure: values and messages only).

A column of times is stored as an Arrow ``timestamp`` or ``duration`` and replayed as numpy
``datetime64``/``timedelta64`` of the same unit, as a yielded Arrow table's or polars
frame's is. One time per record: a pandas DataFrame's datetime or timedelta column, a
``Batch`` column of a 1-D ``datetime64``/``timedelta64`` array, or a record's
``np.datetime64``, ``datetime.datetime``, ``datetime.timedelta``, pandas ``Timestamp`` or
``Timedelta``. A zone-less value is stored as it is; a record's value with a time zone is
refused (numpy has none: the zone would be lost without a word), while a DataFrame's or Arrow
table's column keeps its zone in the column's type.
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np

from ..arrays import TIME_UNITS as UNITS  # the units of Arrow's timestamps and durations
from ..errors import RecordError


def is_time_dtype(dtype: Any) -> bool:
    return isinstance(dtype, np.dtype) and dtype.kind in "mM"


def as_numpy_time(value: Any, column: str) -> Any:
    """A Python or pandas date-time value → numpy's; anything else as it is."""
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return value
    kind = type(value).__name__
    if kind == "NaTType":  # pandas' missing time, a datetime too: refused as missing
        return value
    if kind in ("Timestamp", "Timedelta") and type(value).__module__.startswith("pandas"):
        if getattr(value, "tzinfo", None) is not None:
            raise _zoned(column, value)
        return value.to_datetime64() if kind == "Timestamp" else value.to_timedelta64()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            raise _zoned(column, value)
        return np.datetime64(value, "us")
    if isinstance(value, datetime.timedelta):  # (numpy wraps one past int64 us silently)
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if not -(2**63) < us < 2**63:  # (-2**63 is NaT)
            raise RecordError(
                f"column {column!r} has the timedelta {value}, longer than the 292,000 years "
                "a duration in microseconds holds (timedelta.max, a 'never' sentinel?); store "
                "it as a number of seconds (value.total_seconds()), or a flag column for 'never'"
            )
        return np.timedelta64(us, "us")
    return value


def check_time(dtype: np.dtype, column: str, missing: int) -> None:
    """A column of ``dtype`` times, ``missing`` of them NaT, can be stored: or raise."""
    unit, count = np.datetime_data(dtype)
    if unit not in UNITS or count != 1:  # (Arrow would take 1 of "10ms" for 1 ms)
        name = "datetime64" if dtype.kind == "M" else "timedelta64"
        raise RecordError(
            f"column {column!r} has dtype {dtype}; snap stores times in seconds, "
            "milliseconds, microseconds or nanoseconds: "
            f"value.astype('{name}[{_nearest(unit)}]')"
        )
    if missing:
        raise RecordError(
            f"column {column!r} holds {missing:,} missing time{'s' if missing > 1 else ''} "
            "(NaT); snap columns have no missing values: fill them or leave those records out"
        )


def _nearest(unit: str) -> str:
    """The unit snap stores nearest ``unit``: ns for ps, fs and as (a cast to seconds lost
    everything below one; ns hold the years 1678-2261), s for coarser ones."""
    return unit if unit in UNITS else "ns" if unit in ("ps", "fs", "as") else "s"


def check_time_array(values: np.ndarray, column: str) -> None:
    """A ``Batch``'s column of times: one per record, of an Arrow unit, none missing."""
    if values.ndim != 1:
        raise RecordError(
            f"column {column!r} has a {values.ndim}-D array of {values.dtype}: a column of "
            "times holds one per record; store several as integers (value.astype('int64'))"
        )
    check_time(values.dtype, column, int(np.isnat(values).sum()))


def _zoned(column: str, value: Any) -> RecordError:
    return RecordError(
        f"column {column!r} has a time with a time zone ({value!r}), which numpy's times have "
        "not: store it in UTC without the zone (v.astimezone(datetime.timezone.utc)"
        ".replace(tzinfo=None)), or yield a DataFrame or Arrow table, whose column keeps it"
    )
