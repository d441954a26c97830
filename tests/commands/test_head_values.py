"""snap head shows a float NaN or infinity as a number, not as text.

It showed a float64 NaN as ``'nan'`` (quoted, as the text "nan" is) and ``--json`` gave the
string "nan": a reader could not tell a float column's NaN from a text column's "nan". The
terminal shows ``nan``, ``inf`` and ``-inf`` unquoted; ``--json`` (which has no NaN) gives
``{"type": "float", "value": "nan"}``, as it gives long text and bytes ``{"type": ...}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import report
from tests.commands.conftest import run

NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def shown(stdout: str) -> list[dict[str, str]]:
    """``record N:`` blocks of snap head → [{column: shown value}]."""
    out: list[dict[str, str]] = []
    for line in stdout.splitlines():
        if re.fullmatch(r"record \d+:", line):
            out.append({})
        elif line.startswith("  ") and out:
            key, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            out[-1][key] = value
    return out


def as_float(value: Any) -> float:
    """What --json gave for a float, back as one."""
    if isinstance(value, dict):
        assert value.keys() == {"type", "value"} and value["type"] == "float", value
        return float(value["value"])
    assert isinstance(value, (int, float)), value
    return float(value)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_a_float_scalar_that_is_not_finite_is_a_number_in_text_and_json(
    tmp_path: Path, dtype: type
) -> None:
    values = [*NON_FINITE, 0.5]

    def preprocess() -> Iterator[dict[str, Any]]:
        for v in values:
            yield {"x": dtype(v), "word": "nan", "i": len(values)}

    out = str(tmp_path / "s")
    snap.create(preprocess, out, workers=0)
    code, stdout, stderr = run("head", out, "-n", "4")
    assert code == 0, stderr
    records = shown(stdout)
    assert [r["x"] for r in records] == ["nan", "inf", "-inf", "0.5"]
    assert {r["word"] for r in records} == {"'nan'"}  # text stays quoted: told apart
    code, stdout, stderr = run("head", out, "-n", "4", "--json")
    assert code == 0, stderr
    doc = strict_json(stdout)
    got = [as_float(r["x"]) for r in doc["records"]]
    assert all(same(g, float(dtype(v))) for g, v in zip(got, values, strict=True))
    assert {r["word"] for r in doc["records"]} == {"nan"}  # the text, a JSON string


def test_an_array_and_a_struct_show_their_nan_as_numbers(tmp_path: Path) -> None:
    """An array's first values, a struct's field and a list's values (an Arrow table's)."""
    inner = pa.array([[1.5, float("nan")], [float("-inf")]], pa.list_(pa.float64()))

    def structs() -> Any:
        yield pa.table(
            {
                "st": pa.array(  # (a type given: the oldest pyarrow orders inferred fields)
                    [{"x": float("nan"), "w": "nan"}] * 2,
                    pa.struct([("x", pa.float64()), ("w", pa.string())]),
                ),
                "lists": pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), inner),
            }
        )

    out, other = str(tmp_path / "s"), str(tmp_path / "t")
    snap.create(structs, other, workers=0)
    code, stdout, stderr = run("head", other, "-n", "1")
    assert code == 0, stderr
    record = shown(stdout)[0]
    assert record["st"] == "{'x': nan, 'w': 'nan'}"
    assert record["lists"].endswith("[1.5, nan]]")
    doc = strict_json(run("head", other, "-n", "1", "--json")[1])
    st = doc["records"][0]["st"]
    assert math.isnan(as_float(st["x"])) and st["w"] == "nan"
    first = doc["records"][0]["lists"]["first"][0]["first"]
    assert first[0] == 1.5 and math.isnan(as_float(first[1]))

    def arrays() -> Any:
        yield {"a": np.array([1.0, np.nan, np.inf, -np.inf]), "i": 0}

    snap.create(arrays, out, workers=0)
    code, stdout, stderr = run("head", out)
    assert code == 0, stderr
    assert shown(stdout)[0]["a"].endswith("(3 non-finite)  [1, nan, inf, -inf]")
    summary = strict_json(run("head", out, "--json")[1])["records"][0]["a"]
    assert summary["min"] == summary["max"] == summary["mean"] == 1.0
    assert summary["non_finite"] == 3
    got = [as_float(v) for v in summary["first"]]
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2:] == [math.inf, -math.inf]


def test_summarise_value_gives_each_non_finite_float_an_object() -> None:
    for v in NON_FINITE:
        out = report.summarise_value(np.float32(v))
        assert out == {"type": "float", "value": str(v)}
        assert report.format_summary(out) == str(v)
        json.dumps(out, allow_nan=False)
    assert report.summarise_value("nan") == "nan"
    assert report.format_summary("nan") == "'nan'"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.text(max_size=12), min_size=1, max_size=4))
def test_text_is_shown_as_python_quotes_it(tmp_path: Path, texts: list[str]) -> None:
    """A NUL and the four characters ``\\x00`` both showed as ``'a\\\\x00b'`` (escaped, then
    quoted: the backslash doubled), as did an ESC and its text (a values probe). Each text is
    shown as its ``repr``, which tells them apart and sends no control to the terminal."""
    out = tmp_path / f"s{abs(hash(tuple(texts)))}"
    snap.create(lambda i: [{"t": texts[i]}], str(out), inputs=range(len(texts)),
                workers=0)  # fmt: skip
    code, stdout, stderr = run("head", str(out), "-n", str(len(texts)))
    assert code == 0, stderr
    assert [r["t"] for r in shown(stdout)] == [repr(t) for t in texts]
    assert not any(c in stdout for c in "\x00\x1b\x85\r")


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo", "UTC", "+05:30"])
def test_a_time_with_a_zone_is_shown_as_the_utc_time_it_replays_as(
    tmp_path: Path, unit: str, zone: str
) -> None:
    """A zoned column replays in UTC (numpy has no zone) and head showed that UTC time bare:
    ``2024-03-10T06:30:00`` of a New York column read as New York's 06:30 (a probe). Marked
    ``Z`` (a naive column's time is not), on the terminal and in --json, the same instant."""
    instants = np.array(["2024-03-10T06:30:00", "2024-11-03T05:59:59"], f"datetime64[{unit}]")

    def frame() -> Iterator[pa.Table]:
        zoned = pa.array(instants.astype(np.int64), pa.timestamp(unit, tz=zone))
        yield pa.table({"t": zoned, "naive": pa.array(instants)})

    out = str(tmp_path / "s")
    snap.create(frame, out, workers=0)
    code, stdout, _ = run("head", out)
    assert code == 0
    rows = shown(stdout)
    doc = json.loads(run("head", out, "--json")[1])["records"]
    for row, json_row, instant in zip(rows, doc, instants, strict=True):
        assert row["t"] == json_row["t"] == f"{instant}Z"
        assert row["naive"] == json_row["naive"] == str(instant)
        assert np.datetime64(row["t"].removesuffix("Z")) == instant
