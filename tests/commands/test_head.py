"""snap head: the first records in written order, as text and as strict JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import report
from tests.commands.conftest import NUM_RECORDS, image, run, run_json, text, written_order
from tests.conftest import snap_subprocess


def no_nan(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def records_of(stdout: str) -> list[dict[str, str]]:
    """``record N:`` blocks of snap head → [{column: shown value}]."""
    out: list[dict[str, str]] = []
    for line in stdout.splitlines():
        if re.fullmatch(r"record \d+:", line):
            assert line == f"record {len(out)}:"
            out.append({})
        elif line.startswith("  ") and out:
            key, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            out[-1][key] = value
    return out


def test_head_shows_the_first_records_in_written_order(snapshot: Path) -> None:
    first = written_order(snapshot)[:3]
    code, stdout, stderr = run("head", str(snapshot), "-n", "3")
    assert code == 0, stderr
    shown = records_of(stdout)
    assert len(shown) == 3
    assert [int(r["label"]) for r in shown] == [int(r["label"]) for r in first] == [0, 1, 2]
    for rec, want in zip(shown, first, strict=True):
        i = int(want["label"])
        img = image(i)
        assert rec["img"].startswith(f"uint8[3,4,4]  min {img.min()} max {img.max()} mean ")
        assert rec["img"].endswith(", ".join(str(v) for v in img.reshape(-1)[:6]) + ", …]")
        assert rec["tokens"].startswith(f"int32[{len(want['tokens'])}]")
        start = text(i)[: report.TEXT_LIMIT - 1] + "…"
        assert rec["text"] == f"str[{len(text(i))}] {start!r}"
    assert stdout.splitlines()[-1] == f"(3 of {NUM_RECORDS} records)"


def test_head_json(snapshot: Path) -> None:
    first = written_order(snapshot)[:3]
    doc = no_nan(run("head", str(snapshot), "-n", "3", "--json")[1])
    assert doc["num_records"] == NUM_RECORDS and doc["path"] == str(snapshot)
    assert len(doc["records"]) == 3
    for rec, want in zip(doc["records"], first, strict=True):
        i = int(want["label"])
        assert rec["label"] == i
        assert rec["img"] == {
            "dtype": "uint8",
            "shape": [3, 4, 4],
            "min": int(image(i).min()),
            "max": int(image(i).max()),
            "mean": round(float(image(i).mean()), 6),
            "non_finite": 0,
            "first": image(i).reshape(-1)[:6].tolist(),
        }
        assert rec["tokens"]["dtype"] == "int32"
        assert rec["tokens"]["first"] == list(range(i % 4 + 1))
        assert rec["text"]["type"] == "str" and rec["text"]["length"] == len(text(i))
        assert text(i).startswith(rec["text"]["start"].rstrip("…"))


def test_head_zero_and_more_than_there_are(snapshot: Path) -> None:
    code, stdout, _ = run("head", str(snapshot), "-n", "0")
    assert code == 0 and "record" not in stdout.replace(f"of {NUM_RECORDS} records", "")
    assert stdout.strip() == f"(0 of {NUM_RECORDS} records)"
    assert run_json("head", str(snapshot), "-n", "0")["records"] == []
    doc = run_json("head", str(snapshot), "-n", str(NUM_RECORDS + 10))
    assert [r["label"] for r in doc["records"]] == list(range(NUM_RECORDS))


def test_head_columns(snapshot: Path) -> None:
    code, stdout, _ = run("head", str(snapshot), "-n", "4", "--columns", "label")
    assert code == 0
    assert records_of(stdout) == [{"label": str(i)} for i in range(4)]
    assert "uint8" not in stdout and "str[" not in stdout
    doc = run_json("head", str(snapshot), "-n", "2", "--columns", "text,label")
    assert [list(r) for r in doc["records"]] == [["text", "label"]] * 2


def test_head_unknown_column_exits_1_naming_it(snapshot: Path) -> None:
    code, stdout, stderr = run("head", str(snapshot), "--columns", "label,nope")
    assert code == 1 and stdout == ""
    assert "'nope'" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("command", ["head", "bench"])
@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_columns_that_name_none_are_a_usage_error(snapshot: Path, command: str, text: str) -> None:
    """``--columns ''`` showed (or read) every column, as if it had not been given."""
    code, stdout, stderr = run(command, str(snapshot), "--columns", text)
    assert code == 2 and stdout == ""
    assert f"Invalid value for '--columns': {text!r} names no column" in stderr


@pytest.mark.parametrize("command", ["head", "bench"])
@pytest.mark.parametrize("text", ["label,label", "text, label,text,label"])
def test_columns_named_twice_are_a_usage_error(snapshot: Path, command: str, text: str) -> None:
    """A column named twice was the loader's error (exit 1), though it is malformed
    whatever the snapshot holds."""
    code, stdout, stderr = run(command, str(snapshot), "--columns", text)
    assert code == 2 and stdout == ""
    assert "more than once: name each once" in stderr and "label" in stderr


ODD_NAMES = ["a,b", " padded", "plain"]


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> str:
    def preprocess() -> Iterator[dict[str, Any]]:
        for i in range(3):
            yield {name: np.int32(10 * k + i) for k, name in enumerate(ODD_NAMES)}

    out = str(tmp_path_factory.mktemp("odd") / "s")
    snap.create(preprocess, out, workers=0)
    return out


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("a,b", ["a,b"]),
        (" padded", [" padded"]),
        ("plain, padded", ["plain", " padded"]),
        ("plain,a,b", None),
        ("a, b", None),
    ],  # fmt: skip
)
@pytest.mark.parametrize("command", ["head", "bench"])
def test_columns_whose_names_hold_a_comma_or_a_space_can_be_named(
    odd_names: str, command: str, given: str, shown: list[str] | None
) -> None:
    """A column named "a,b" or " padded" (create takes any name) could not be shown or read:
    "unknown columns ['a', 'b']". The text as given, if a column has it, is that column."""
    if command == "head":
        code, stdout, stderr = run("head", odd_names, "-n", "1", "--columns", given, "--json")
    else:
        code, stdout, stderr = run("bench", odd_names, "--epochs", "1", "--columns", given)
    if shown is None:  # (a part no column has is named)
        assert code == 1 and "unknown columns" in stderr and "Traceback" not in stderr
        return
    assert code == 0, stderr
    if command == "head":
        assert list(json.loads(stdout)["records"][0]) == shown


def test_head_as_a_real_process(snapshot: Path) -> None:
    proc = snap_subprocess("head", str(snapshot), "-n", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["label"] for r in json.loads(proc.stdout)["records"]] == [0, 1]


def test_head_float_arrays_with_nan_and_inf(tmp_path: Path) -> None:
    values = [np.array([0.5, np.nan, 2.0], np.float32), np.array([1.0, np.inf], np.float32)]

    def gen() -> Iterator[dict[str, Any]]:
        for i, v in enumerate(values):
            yield {"x": v, "id": i}

    path = tmp_path / "nan"
    snap.create(gen, path, workers=0)
    code, stdout, stderr = run("head", str(path))
    assert code == 0, stderr
    shown = records_of(stdout)
    assert [r["id"] for r in shown] == ["0", "1"]
    assert shown[0]["x"].startswith("float32[3]") and "nan" in shown[0]["x"]
    assert shown[1]["x"].startswith("float32[2]") and "inf" in shown[1]["x"]
    doc = no_nan(run("head", str(path), "--json")[1])  # strict JSON: no NaN literal
    means = [r["x"]["mean"] for r in doc["records"]]
    assert means == [pytest.approx(float(np.mean(v[np.isfinite(v)]))) for v in values]


def _arrow_columns() -> dict[str, Any]:
    """A column of every kind of Arrow value a yielded table may hold beyond snap's own."""
    import datetime
    import decimal

    import pyarrow as pa

    n = 3
    day = datetime.date(2026, 11, 28)
    return {
        "ts": pa.array(
            [datetime.datetime(2026, 1, 1, 12, i) for i in range(n)], pa.timestamp("ms")
        ),
        "ts_tz": pa.array([0, 1, 2], pa.timestamp("s", tz="Europe/Paris")),
        "ts_ns": pa.array([1_700_000_000_123_456_789] * n, pa.timestamp("ns")),
        "date": pa.array([day] * n, pa.date32()),
        "time": pa.array([datetime.time(1, 2, 3)] * n, pa.time64("us")),
        "dur": pa.array([datetime.timedelta(seconds=i) for i in range(n)], pa.duration("s")),
        "dec": pa.array([decimal.Decimal("1.25")] * n, pa.decimal128(5, 2)),
        "struct": pa.array([{"k": i, "b": b"\x00\xff", "t": day} for i in range(n)]),
        "map": pa.array([[("a", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        "words": pa.array([["x", "y"]] * n),
        "nested": pa.array([[[1.5, float("nan")]]] * n),
        "label": pa.array(range(n)),
    }


def test_head_shows_every_arrow_type_and_its_json_is_strict(tmp_path: Path) -> None:
    """Dates, times, durations, decimals and structs of them (a yielded Arrow table) made
    `snap head --json` fail with "Object of type datetime is not JSON serializable"."""
    import pyarrow as pa

    columns = _arrow_columns()

    def preprocess() -> Any:
        yield pa.table(columns)

    out = str(tmp_path / "s")
    snap.create(preprocess, out, workers=0)
    doc = no_nan(run("head", out, "-n", "3", "--json")[1])
    first = doc["records"][0]
    assert set(first) == set(columns)
    assert first["ts"] == "2026-01-01T12:00:00.000"  # (in the column's unit)
    assert first["ts_ns"] == "2023-11-14T22:13:20.123456789"  # (not nanoseconds as an int)
    assert first["date"] == "2026-11-28" and first["time"] == "01:02:03"
    assert first["dec"] == "1.25" and first["dur"] == "0 seconds"
    assert first["struct"] == {
        "k": 0,
        "b": {"type": "bytes", "length": 2, "start": "00ff"},
        "t": "2026-11-28",
    }
    assert first["ts_tz"] == "1970-01-01T00:00:00Z"  # in UTC (as numpy reads it), marked so
    code, stdout, stderr = run("head", out, "-n", "3")
    assert code == 0, stderr
    shown = records_of(stdout)
    # times, durations and decimals unquoted: quoted, they looked like text (a column of the
    # text "2026-11-28" and one of dates were shown alike); --json keeps them strings
    assert len(shown) == 3 and shown[0]["dec"] == "1.25"
    assert shown[0]["date"] == "2026-11-28" and shown[0]["time"] == "01:02:03"
    assert shown[0]["ts"] == "2026-01-01T12:00:00.000" and shown[0]["dur"] == "0 seconds"
    fields = shown[0]["struct"].strip("{}").split(", ")  # (pyarrow 19 orders them by name)
    assert sorted(fields) == ["'b': bytes[2] 00ff", "'k': 0", "'t': 2026-11-28"]
