"""Values at the edges of what a column holds (a dtype probe's findings): a Python
``timedelta`` past what microseconds in an int64 hold (``timedelta.max``, a "never"
sentinel) was stored wrapped, as another, often negative, duration; ``snap head --json``
gave ``"mean": Infinity`` (no JSON) for large finite floats; the advice for a column of
int64 and uint64 ids was a float (which rounds 64-bit ids together), and for picoseconds a
cast to seconds (which loses all below one)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import RecordError, SchemaMismatchError
from snapshot_cli.writers.records import RecordBuffer
from tests.commands.conftest import run

LIMIT_US = 2**63 - 1  # the longest duration in microseconds an int64 holds


@pytest.mark.parametrize(
    "value",
    [dt.timedelta.max, dt.timedelta.min, dt.timedelta(microseconds=LIMIT_US + 1),
     -dt.timedelta(microseconds=LIMIT_US + 1)],
)  # fmt: skip
@pytest.mark.parametrize("form", ["record", "batch list", "batch object array"])
def test_a_duration_longer_than_microseconds_hold_is_refused(
    tmp_path: Path, value: dt.timedelta, form: str
) -> None:
    def pipeline() -> Any:
        if form == "record":
            yield {"ttl": dt.timedelta(days=1)}
            yield {"ttl": value}
        else:
            column = [dt.timedelta(days=1), value]
            yield snap.Batch(ttl=column if form == "batch list" else np.array(column, object))

    with pytest.raises(RecordError, match=r"column 'ttl' has the timedelta .*total_seconds"):
        snap.create(pipeline, str(tmp_path / "s"), workers=0)


def test_the_longest_durations_that_fit_come_back_exact(tmp_path: Path) -> None:
    edges = [dt.timedelta(microseconds=LIMIT_US), -dt.timedelta(microseconds=LIMIT_US)]
    edges += [dt.timedelta(days=200_000, seconds=5, microseconds=7), dt.timedelta(0)]
    out = str(tmp_path / "s")
    snap.create(lambda: ({"ttl": v} for v in edges), out, workers=0)
    got = next(iter(snap.open(out).loader(len(edges), shuffle=False)))["ttl"]
    assert got.dtype == np.dtype("m8[us]")
    assert [int(v.astype(np.int64)) for v in got] == [v // dt.timedelta(microseconds=1)
                                                      for v in edges]  # fmt: skip


@pytest.mark.parametrize("values", [[1.7e308, 1.7e308], [-1.7e308, -1.6e308, 3.0]])
def test_head_json_of_large_finite_floats_is_json_with_their_mean(
    tmp_path: Path, values: list[float]
) -> None:
    out = str(tmp_path / "s")
    snap.create(lambda: iter([{"v": np.array(values)}]), out, workers=0)
    code, stdout, stderr = run("head", out, "--json")
    assert code == 0 and "Warning" not in stderr, stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON: {stdout}")

    summary = json.loads(stdout, parse_constant=refuse)["records"][0]["v"]
    assert summary["mean"] == pytest.approx(float(np.mean(np.array(values) / 1e300)) * 1e300)
    assert summary["non_finite"] == 0


@pytest.mark.parametrize(("first", "later"), [(1, np.uint64(2**64 - 1)),
                                              (np.uint64(2**64 - 1), -5)])  # fmt: skip
def test_int64_and_uint64_ids_are_told_a_dtype_that_keeps_them(first: Any, later: Any) -> None:
    buffer = RecordBuffer()
    buffer.add({"id": first})
    with pytest.raises(SchemaMismatchError) as caught:
        buffer.add({"id": later})
    text = str(caught.value)
    assert "np.uint64(value)" in text and "int64 if some are negative" in text
    assert "float(value)" not in text and "np.float64" not in text


@pytest.mark.parametrize(("unit", "advised"), [("ps", "ns"), ("fs", "ns"), ("as", "ns"),
                                               ("D", "s"), ("h", "s"), ("W", "s")])  # fmt: skip
def test_a_unit_snap_does_not_store_is_told_the_nearest(unit: str, advised: str) -> None:
    buffer = RecordBuffer()
    with pytest.raises(RecordError, match=rf"astype\('datetime64\[{advised}\]'\)"):
        buffer.add({"t": np.datetime64(1500, unit)})
