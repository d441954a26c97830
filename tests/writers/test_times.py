"""Dates and times, one per record, in every form a pipeline yields them: a pandas DataFrame's
datetime column was refused ("has dtype datetime64[us] ... store it as integers") while the
same column of a pyarrow Table or a polars DataFrame was stored as an Arrow timestamp. Each
form now stores the same values and replays them as numpy ``datetime64``/``timedelta64``;
missing times (NaT), units Arrow lacks (days) and zones numpy cannot hold are refused,
naming the column."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap

EPOCH = datetime.datetime(1970, 1, 1)


def items(when: list[datetime.datetime], took: list[datetime.timedelta]) -> dict[str, Any]:
    """Each form of the same column of times, as a pipeline may yield it."""
    w = np.array(when, dtype="datetime64[us]")
    t = np.array(took, dtype="timedelta64[us]")
    return {
        "numpy records": [{"when": a, "took": b} for a, b in zip(w, t, strict=True)],
        "python records": [{"when": a, "took": b} for a, b in zip(when, took, strict=True)],
        "pandas records": [
            {"when": pd.Timestamp(a).as_unit("us"), "took": pd.Timedelta(b).as_unit("us")}
            for a, b in zip(when, took, strict=True)
        ],
        "batch": [snap.Batch(when=w, took=t)],
        "batch of lists": [snap.Batch(when=list(when), took=list(took))],
        "pandas": [pd.DataFrame({"when": w, "took": t})],
        "arrow": [pa.table({"when": pa.array(w), "took": pa.array(t)})],
        "polars": [pl.DataFrame({"when": w, "took": t})],
    }


def replay(tmp_path: Path, yielded: list[Any], workers: int = 0) -> dict[str, np.ndarray]:
    def preprocess() -> Any:
        yield from yielded

    out = tmp_path / "s"
    snap.create(preprocess, out, workers=workers, overwrite=True)
    (batch,) = snap.open(out).loader(len(yielded) * 10, shuffle=False, drop_last=False)
    return batch


times = st.datetimes(
    min_value=datetime.datetime(1900, 1, 1), max_value=datetime.datetime(2200, 1, 1)
)
durations = st.timedeltas(
    min_value=-datetime.timedelta(days=9999), max_value=datetime.timedelta(days=9999)
)


@settings(max_examples=15, deadline=None)
@given(rows=st.lists(st.tuples(times, durations), min_size=1, max_size=5))
def test_every_form_of_a_time_column_replays_the_same_times(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[datetime.datetime, Any]]
) -> None:
    when, took = [r[0] for r in rows], [r[1] for r in rows]
    for form, yielded in items(when, took).items():
        batch = replay(tmp_path_factory.mktemp("t"), yielded)
        assert batch["when"].dtype == np.dtype("datetime64[us]"), form
        assert batch["took"].dtype == np.dtype("timedelta64[us]"), form
        assert batch["when"].tolist() == when, form
        assert batch["took"].tolist() == took, form


def test_tasks_yielding_times_in_different_forms_agree_on_the_schema(tmp_path: Path) -> None:
    when = [EPOCH + datetime.timedelta(hours=h) for h in range(4)]
    took = [datetime.timedelta(seconds=s) for s in range(4)]
    forms = list(items(when, took).values())

    def preprocess(form: int) -> Any:
        yield from forms[form]

    out = tmp_path / "s"
    snap.create(preprocess, out, inputs=range(len(forms)), workers=0, inputs_per_task=1)
    s = snap.open(out)
    assert str(s.schema.field("when").type) == "timestamp[us]"
    assert sorted(r["when"] for r in s.head(100)) == sorted(np.array(when * len(forms), "M8[us]"))


def test_a_dataframe_column_with_a_zone_keeps_it_and_a_record_with_one_is_refused(
    tmp_path: Path,
) -> None:
    zoned = pd.Series(pd.to_datetime(["2020-01-01 12:00"]).tz_localize("Europe/Paris"))
    batch = replay(tmp_path, [pd.DataFrame({"when": zoned})])
    unit = zoned.dtype.unit  # (pandas 2 makes "ns", 3 "us")
    assert snap.open(tmp_path / "s").schema.field("when").type == pa.timestamp(unit, "Europe/Paris")
    assert batch["when"].astype("M8[us]").tolist() == [datetime.datetime(2020, 1, 1, 11)]  # UTC
    for value in (zoned[0], zoned[0].to_pydatetime()):
        with pytest.raises(snap.RecordError, match=r"column 'when' has a time with a time zone"):
            replay(tmp_path, [{"when": value}])


@pytest.mark.parametrize(
    "times",
    [
        ["2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00+09:00"],
        ["2024-06-01T08:00:00-04:00", "2024-01-01T00:00:00+01:00", "2024-01-01T00:00:00Z"],
    ],
)
def test_a_dataframe_column_of_times_in_several_zones_is_told_to_give_it_one(
    tmp_path: Path, times: list[str]
) -> None:
    """pandas keeps times of two zones as objects; each was refused as a record's time and
    told to "yield a DataFrame or Arrow table, whose column keeps it": it was one (a probe).
    The advice given makes it storable, its instants kept."""
    frame = pd.DataFrame({"t": [pd.Timestamp(t) for t in times]})
    assert frame["t"].dtype == object  # (what pandas makes of it)
    with pytest.raises(snap.RecordError) as raised:
        replay(tmp_path, [frame])
    said = str(raised.value)
    assert "column 't' of a yielded DataFrame holds times with a time zone as objects" in said
    assert "df['t'] = pd.to_datetime(df['t'], utc=True)" in said
    frame["t"] = pd.to_datetime(frame["t"], utc=True)
    batch = replay(tmp_path, [frame])
    expected = [pd.Timestamp(t).tz_convert(None).to_datetime64() for t in times]  # (UTC)
    assert batch["t"].astype("M8[us]").tolist() == np.array(expected, "M8[us]").tolist()


NAT = np.datetime64("NaT", "us")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: {"when": NAT}, r"column 'when' holds 1 missing time \(NaT\)"),
        (lambda: {"when": np.timedelta64("NaT", "s")}, r"column 'when' holds 1 missing time"),
        (lambda: {"when": pd.NaT}, r"column 'when' is NaT; snap columns have no missing"),
        (lambda: snap.Batch(when=np.array([NAT, NAT])), r"column 'when' holds 2 missing times"),
        (
            lambda: pd.DataFrame({"when": [EPOCH, pd.NaT]}),
            r"column 'when' of a yielded DataFrame holds 1 missing value",
        ),
        (
            lambda: {"when": np.datetime64("2020-01-02")},
            r"column 'when' has dtype datetime64\[D\]; snap stores times in seconds.*"
            r"astype\('datetime64\[s\]'\)",
        ),
        (  # a multiple of a unit: Arrow took the 1 of 10 ms for 1 ms
            lambda: {"when": np.datetime64(1, "10ms")},
            r"column 'when' has dtype datetime64\[10ms\]; .*astype\('datetime64\[ms\]'\)",
        ),
        (
            lambda: snap.Batch(when=np.array([1, 2], "m8[10ms]")),
            r"column 'when' has dtype timedelta64\[10ms\]; .*astype\('timedelta64\[ms\]'\)",
        ),
        (
            lambda: snap.Batch(when=np.zeros((2, 3), "M8[s]")),
            r"column 'when' has a 2-D array of datetime64\[s\]: a column of times holds one",
        ),
        (
            lambda: {"when": datetime.date(2020, 1, 2)},
            r"column 'when' has a value of type date; .*np.datetime64\(v, 's'\)",
        ),
    ],
    ids=[
        "nat",
        "nat-delta",
        "pandas-nat",
        "batch-nat",
        "frame-nat",
        "days",
        "10ms",
        "batch-10ms",
        "2-d",
        "date",
    ],
)
def test_times_snap_cannot_store_are_refused_naming_the_column(
    tmp_path: Path, make: Callable[[], Any], message: str
) -> None:
    with pytest.raises(snap.RecordError, match=message):
        replay(tmp_path, [make()])
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_times_from_worker_processes_and_in_head(tmp_path: Path) -> None:
    when = [EPOCH + datetime.timedelta(days=d, microseconds=7) for d in range(3)]
    frame = pd.DataFrame({"when": when})  # datetime64[us] from pandas 3, [ns] from pandas 2
    batch = replay(tmp_path, [frame], workers=2)
    assert batch["when"].dtype == frame["when"].dtype
    assert batch["when"].astype("M8[us]").tolist() == when
    assert [r["when"] for r in snap.open(tmp_path / "s").head(3)] == list(np.array(when, "M8[us]"))


UNITS = ["s", "ms", "us", "ns"]


@pytest.mark.parametrize("kind", ["datetime64", "timedelta64"])
@pytest.mark.parametrize(("first", "second"), [(a, b) for a in UNITS for b in UNITS if a != b])
def test_times_of_two_units_are_told_the_one_to_give(kind: str, first: str, second: str) -> None:
    """pandas 3 parses "2020-01-01" to microseconds and a time with nanoseconds to ns: the
    records of one column differed in unit, and the error gave no way out."""
    from snapshot_cli.writers.records import RecordBuffer

    finer = max(first, second, key=UNITS.index)
    make = getattr(np, kind)  # np.datetime64 or np.timedelta64
    buffer = RecordBuffer()
    buffer.add({"t": make(1, first)})
    with pytest.raises(snap.SchemaMismatchError) as err:
        buffer.add({"t": make(1, second)})
    hint = f"give every record's time one unit: np.{kind}(value, '{finer}')"
    assert hint in str(err.value) and f".as_unit('{finer}')" in str(err.value)
    fixed = RecordBuffer()  # the hint followed: one column, each value kept
    for unit in (first, second):
        fixed.add({"t": make(make(1, unit), finer)})
    (batch,) = fixed.take()
    assert batch.column("t").type.unit == finer and len(batch) == 2


ZONES = [
    ("UTC", "Europe/Paris"),
    ("America/New_York", "Asia/Tokyo"),
    ("UTC", None),
    (None, "Asia/Tokyo"),
]


@pytest.mark.parametrize(("first", "second"), ZONES)
def test_times_of_two_zones_are_told_how_to_give_one(
    tmp_path: Path, first: str | None, second: str | None
) -> None:
    """DataFrames of times in UTC from one input and in Europe/Paris from another (or naive)
    were refused with no way out; the message says how to give the column one zone, and
    the pipeline that follows it is stored, each instant kept."""
    zones = {0: first, 1: second}

    def frame(i: int) -> pd.DataFrame:
        t = pd.date_range("2020-03-01", periods=3, freq="h")
        return pd.DataFrame({"t": t if zones[i] is None else t.tz_localize(zones[i])})

    with pytest.raises(snap.SchemaMismatchError) as err:
        snap.create(frame, tmp_path / "s", inputs=[0, 1], workers=0)
    said = str(err.value)
    assert "column 't' changed type" in said and "Traceback" not in said
    if None in (first, second):
        zone = first or second
        assert f"value.tz_localize({zone!r})" in said and "value.tz_convert(None)" in said

        def fixed(i: int) -> pd.DataFrame:  # the naive ones given the others' zone
            df = frame(i)
            df["t"] = df["t"].dt.tz_localize(zone) if zones[i] is None else df["t"]
            return df
    else:
        assert "df['t'].dt.tz_convert('UTC')" in said

        def fixed(i: int) -> pd.DataFrame:
            df = frame(i)
            df["t"] = df["t"].dt.tz_convert("UTC")
            return df

    snap.create(fixed, tmp_path / "s", inputs=[0, 1], workers=0)
    (batch,) = snap.open(tmp_path / "s").loader(6, shuffle=False, drop_last=False)
    expected = pd.concat([fixed(0)["t"], fixed(1)["t"]]).dt.tz_convert(None)
    assert batch["t"].tolist() == expected.to_numpy().astype(batch["t"].dtype).tolist()


def test_a_dataframe_column_that_changed_dtype_is_told_its_astype(tmp_path: Path) -> None:
    """A DataFrame's int column in one task and float in another (pandas makes it float where
    it holds a NaN) was told float(value), advice for a record's own value."""

    def frame(i: int) -> pd.DataFrame:
        return pd.DataFrame({"n": np.arange(3, dtype=np.int64 if i == 0 else np.float64)})

    with pytest.raises(snap.SchemaMismatchError) as err:
        snap.create(frame, tmp_path / "s", inputs=[0, 1], workers=0)
    assert "df['n'] = df['n'].astype(np.float64)" in str(err.value)

    def fixed(i: int) -> pd.DataFrame:
        df = frame(i)
        df["n"] = df["n"].astype(np.float64)
        return df

    snap.create(fixed, tmp_path / "s", inputs=[0, 1], workers=0)
    (batch,) = snap.open(tmp_path / "s").loader(6, shuffle=False, drop_last=False)
    assert batch["n"].dtype == np.float64 and batch["n"].tolist() == [0, 1, 2] * 2
