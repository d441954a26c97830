"""to_torch() gives a time column as Python datetimes or timedeltas, to the microsecond: each
the numpy time floored, whatever its unit and wherever in numpy's range it is (numpy's own
cast to microseconds overflowed at the ends: 1677's first nanoseconds became 2262), or an
error naming the column for a time Python has none for (years past 9999 or before 1)."""

from __future__ import annotations

import datetime
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import torch_tensors
from snapshot_cli.readers.torch_tensors import python_times

UNITS = ["ns", "us", "ms", "s"]
US_PER_TICK = {
    "ns": Fraction(1, 1000),
    "us": Fraction(1),
    "ms": Fraction(1000),
    "s": Fraction(10**6),
}
ticks = st.integers(-(2**63) + 1, 2**63 - 1)  # (-2**63 is NaT)


def floored_said(name: str, column: np.ndarray, unit: str) -> list[Any]:
    """``python_times`` of ``column``, checking it warns (once a column) exactly where a
    tick finer than a microsecond is floored (1 ns and 999 ns were both 0 without a word)."""
    torch_tensors._FLOORED.discard(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = python_times(name, column)  # (a RecordError: refused, nothing given to check)
    per_tick = US_PER_TICK[unit]
    lost = per_tick < 1 and any(int(t) % int(1 / per_tick) for t in column.view(np.int64))
    said = [str(w.message) for w in caught]
    assert len(said) == int(lost), (said, lost)
    assert all(m.startswith(f"column {name!r} holds times finer than a microsecond") for m in said)
    return got


def year(value: np.datetime64) -> int:
    return int(value.astype("M8[Y]").astype(np.int64)) + 1970


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(UNITS), st.lists(ticks, min_size=1, max_size=4))
def test_datetimes_are_floored_to_the_microsecond_or_refused(unit: str, values: list[int]) -> None:
    column = np.array(values, np.int64).view(f"M8[{unit}]")
    try:
        got = floored_said("when", column, unit)
    except snap.RecordError as err:
        assert "'when'" in str(err) and "int64 ticks" in str(err)
        assert any(not 1 <= year(v) <= 9999 for v in column)
        return
    assert all(1 <= year(v) <= 9999 for v in column)
    for tick, back in zip(values, got, strict=True):
        assert isinstance(back, datetime.datetime)
        micro = int(np.datetime64(back, "us").astype(np.int64))
        assert micro <= tick * US_PER_TICK[unit] < micro + 1  # (exact: Python's numbers)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(UNITS), st.lists(ticks, min_size=1, max_size=4))
def test_timedeltas_are_floored_to_the_microsecond_or_refused(unit: str, values: list[int]) -> None:
    column = np.array(values, np.int64).view(f"m8[{unit}]")
    try:
        got = floored_said("took", column, unit)
    except snap.RecordError as err:
        assert "'took'" in str(err)
        # (in Python's numbers: numpy 2.5 raises OverflowError casting such ticks to days)
        days = [abs(t) * US_PER_TICK[unit] / (86_400 * 10**6) for t in values]
        assert max(days) >= datetime.timedelta.max.days
        return
    for tick, back in zip(values, got, strict=True):
        micro = back // datetime.timedelta(microseconds=1)
        assert micro <= tick * US_PER_TICK[unit] < micro + 1


def test_the_ends_of_pandas_range_reach_torch_as_their_dates(tmp_path: Path) -> None:
    def preprocess() -> object:
        for when in (pd.Timestamp.min, pd.Timestamp.max, pd.Timestamp("2020-01-01")):
            yield {"when": when.as_unit("ns")}

    snap.create(preprocess, str(tmp_path / "out"), workers=0)
    loader = snap.open(str(tmp_path / "out")).loader(3, shuffle=False)
    torch_tensors._FLOORED.discard("when")
    with pytest.warns(UserWarning, match="'when' holds times finer than a microsecond"):
        (batch,) = list(loader.to_torch())  # (pandas' ends are ...145224807 ns: floored)
    assert [w.year for w in batch["when"]] == [1677, 2262, 2020]
    assert batch["when"][0] == datetime.datetime(1677, 9, 21, 0, 12, 43, 145224)


def test_a_year_python_has_not_is_refused_naming_the_column(tmp_path: Path) -> None:
    def preprocess() -> object:
        yield {"far": np.datetime64("10000-01-01T00:00:00", "s")}

    snap.create(preprocess, str(tmp_path / "out"), workers=0)
    loader = snap.open(str(tmp_path / "out")).loader(1)
    with pytest.raises(snap.RecordError, match=r"column 'far' .* 10000-01-01"):
        next(iter(loader.to_torch()))


def test_months_and_years_are_their_first_days_and_their_durations_refused() -> None:
    """Times in months or years (a map may return them) failed with numpy's "incompatible
    nonlinear base time units" once times were converted by their ticks' length."""
    months = np.array(["1999-12", "2024-02"], "M8[M]")
    assert python_times("m", months) == [
        datetime.datetime(1999, 12, 1),
        datetime.datetime(2024, 2, 1),
    ]
    assert python_times("y", np.array(["2020"], "M8[Y]")) == [datetime.datetime(2020, 1, 1)]
    with pytest.raises(snap.RecordError, match=r"column 'd' holds durations in months"):
        python_times("d", np.array([3], "m8[M]"))


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("kind", ["timestamp", "duration"])
@pytest.mark.parametrize("fixed", [False, True])
def test_a_list_of_times_a_record_reaches_torch_as_pythons(
    tmp_path: Path, unit: str, kind: str, fixed: bool
) -> None:
    """A ``list<timestamp[ns]>`` column (polars' ``List(Datetime("ns"))``) reached torch as
    ints, ``[[1600000000000000000]]``: numpy's tolist() of nanoseconds; other units were
    Python's, as a time a record is."""
    import pyarrow as pa

    arrow = pa.timestamp(unit) if kind == "timestamp" else pa.duration(unit)
    ticks = [[1_600_000_000 * 10 ** {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit], 7]] * 2
    list_type = pa.list_(arrow, 2) if fixed else pa.list_(arrow)
    table = pa.table({"t": pa.array(ticks, list_type)})
    snap.create(lambda: [table], str(tmp_path / "s"), workers=0)
    torch_tensors._FLOORED.discard("t")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (batch,) = list(snap.open(str(tmp_path / "s")).loader(2, shuffle=False).to_torch())
        expected = [
            python_times(
                "t", np.array(r, np.int64).view(f"{'M' if kind == 'timestamp' else 'm'}8[{unit}]")
            )
            for r in ticks
        ]
    floored = [w for w in caught if "finer than a microsecond" in str(w.message)]
    assert len(floored) == (unit == "ns")  # (7 ns floored: said once)
    assert batch["t"] == expected
    assert all(
        isinstance(v, (datetime.datetime, datetime.timedelta)) for r in batch["t"] for v in r
    )


def test_nested_lists_reach_torch_as_lists_at_every_depth(tmp_path: Path) -> None:
    import pyarrow as pa

    table = pa.table({"n": pa.array([[[1], [2, 3]], [[]]], pa.list_(pa.list_(pa.int8())))})
    snap.create(lambda: [table], str(tmp_path / "s"), workers=0)
    (batch,) = list(snap.open(str(tmp_path / "s")).loader(2, shuffle=False).to_torch())
    assert batch["n"] == [[[1], [2, 3]], [[]]]  # (the inner ones were numpy arrays)
