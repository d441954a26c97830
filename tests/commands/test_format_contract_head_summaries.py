"""``snap head --json``: an array of numbers is summarised with the same keys whatever its
dtype, shape and values. An empty one had no ``min``, ``max`` or ``mean`` (README: they are
null when there are no finite values), and ``non_finite`` was there only when some were:
a script indexing the keys README lists failed on an empty ragged value. Now every summary
of numbers has ``dtype, shape, min, max, mean, non_finite, first``; arrays of other values
(text, times) keep ``dtype, shape, first``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import report
from tests.commands.conftest import run

NUMBERS = {"dtype", "shape", "min", "max", "mean", "non_finite", "first"}
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]  # fmt: skip
SHAPES = [(), (0,), (3,), (0, 4), (2, 0, 3), (2, 3)]


def strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def check(summary: dict[str, Any], value: np.ndarray) -> None:
    """The keys, and what they say of ``value``."""
    assert set(summary) == NUMBERS, summary
    flat = value.reshape(-1).astype(np.float64)
    finite = flat[np.isfinite(flat)]
    assert summary["non_finite"] == flat.size - finite.size
    if finite.size:
        assert summary["min"] == finite.min() and summary["max"] == finite.max()
        assert math.isclose(summary["mean"], finite.mean(), rel_tol=1e-3, abs_tol=1e-6)
    else:
        assert summary["min"] is None and summary["max"] is None and summary["mean"] is None
    assert summary["shape"] == list(value.shape) and summary["dtype"] == str(value.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_numeric_summary_has_every_key(dtype: str, shape: tuple[int, ...]) -> None:
    value = (np.arange(math.prod(shape)) % 2).astype(dtype).reshape(shape)
    summary = report.summarise_value(value)
    check(summary, value)
    json.dumps(summary, allow_nan=False)
    if np.dtype(dtype).kind == "f" and value.size:
        for fill in (np.nan, np.inf):
            check(report.summarise_value(np.full(shape, fill, dtype)), np.full(shape, fill, dtype))


def test_other_arrays_keep_their_keys() -> None:
    for value in (np.array(["a", "b"], dtype=object), np.array([], dtype=object),
                  np.array(["2020-01-01"], dtype="datetime64[D]")):  # fmt: skip
        assert set(report.summarise_value(value)) == {"dtype", "shape", "first"}


def test_the_terminal_shows_an_empty_array_as_empty() -> None:
    assert report.format_summary(report.summarise_value(np.zeros((0, 4), np.int32))) == (
        "int32[0,4]  []"
    )
    nan = report.format_summary(report.summarise_value(np.full(2, np.nan)))
    assert "min n/a max n/a mean n/a (2 non-finite)" in nan


@snap.ragged("tokens", "boxes")
def records(i: int) -> Iterator[dict[str, Any]]:
    yield {
        "tokens": np.arange(i, dtype=np.int32),  # record 0: empty
        "boxes": np.zeros((i, 4), np.float32),  # record 0: shape (0, 4)
        "scores": np.full(3, np.nan if i == 1 else float(i), np.float64),  # record 1: all NaN
        "flags": np.array([i % 2 == 0] * 2),
    }


def test_head_json_of_empty_and_all_nan_values(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    snap.create(records, str(out), inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    code, stdout, stderr = run("head", str(out), "--json")
    assert code == 0, stderr
    got = strict(stdout)["records"]
    values = [next(records(i)) for i in range(3)]
    assert len(got) == 3
    for shown, want in zip(got, values, strict=True):
        for column in ("tokens", "boxes", "scores", "flags"):
            check(shown[column], want[column])
    assert got[0]["tokens"]["min"] is None and got[0]["boxes"]["shape"] == [0, 4]
    assert got[1]["scores"]["non_finite"] == 3 and got[1]["scores"]["mean"] is None
    code, stdout, _ = run("head", str(out))
    assert code == 0 and "tokens  int32[0]  []" in stdout
