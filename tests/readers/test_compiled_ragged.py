"""The compiled take of variable-width records (``snapshot_cli._ragged``) reads nothing outside
the buffers it is given, whatever they hold: a damaged record batch read with ``verify=False``
can have any offsets. Each refusal names the row or the record (what it was, what it needed),
and nothing is written to ``out`` unless every record is in bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from snapshot_cli.readers import convert

ragged: Any = convert._ragged


@pytest.fixture(autouse=True)
def _built() -> None:
    assert ragged is not None  # built by `make test`'s install, never skipped


def offsets(*values: int, dtype: Any = np.int32) -> np.ndarray:
    return np.array(values, dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_bounds_and_values_of_the_rows(dtype: Any) -> None:
    off = offsets(0, 2, 2, 5, dtype=dtype)  # records [0, 1], [], [2, 3, 4]
    values = np.arange(10, 15, dtype=np.int16)
    rows = np.array([2, 0, 1, 2], np.int64)
    bounds = np.empty(5, np.int64)
    assert ragged.bounds(off, rows, bounds) == 8
    assert bounds.tolist() == [0, 3, 5, 5, 8]
    out = np.empty(8, np.int16)
    ragged.take_values(off, values, 2, rows, out)
    assert out.tolist() == [12, 13, 14, 10, 11, 12, 13, 14]


@pytest.mark.parametrize("row", [-1, 3, 2**40])
def test_a_row_outside_the_column_is_an_index_error(row: int) -> None:
    off, rows = offsets(0, 1, 2, 3), np.array([0, row], np.int64)
    with pytest.raises(IndexError, match=f"row {row} of a column of 3 records"):
        ragged.bounds(off, rows, np.empty(3, np.int64))
    with pytest.raises(IndexError, match=f"row {row} "):
        ragged.take_values(off, np.zeros(3, np.int8), 1, rows, np.zeros(1, np.int8))
    with pytest.raises(IndexError, match=f"row {row} "):
        ragged.take_text(off, b"abc", rows, False)


@pytest.mark.parametrize(
    "off", [(0, 2, 1), (0, 1, 9), (-4, 1, 2)], ids=["backwards", "past the values", "negative"]
)
def test_offsets_outside_the_values_are_refused_before_anything_is_copied(
    off: tuple[int, ...],
) -> None:
    o, rows = offsets(*off), np.array([0, 1], np.int64)
    out = np.full(4, 7, np.int32)
    damaged = off[1] > off[2] or off[0] < 0  # a span backwards or before the values
    why = r"damaged offsets" if damaged else r"outside the 3 values of its column"
    with pytest.raises(ValueError, match=rf"record \d spans \[-?\d+, \d+\)(:|,) {why}"):
        ragged.take_values(o, np.zeros(3, np.int32), 4, rows, out)
    assert out.tolist() == [7, 7, 7, 7]
    with pytest.raises(ValueError, match=why):
        ragged.take_text(o, b"abc", rows, True)
    if damaged:
        with pytest.raises(ValueError, match="damaged offsets"):
            ragged.bounds(o, rows, np.empty(3, np.int64))
    else:  # bounds checks the offsets, not the values
        assert ragged.bounds(o, rows, np.empty(3, np.int64)) == off[2] - off[0]


def test_the_output_must_fit_the_records_exactly() -> None:
    off, rows = offsets(0, 2, 5), np.array([1], np.int64)
    values = np.arange(5, dtype=np.int64)
    with pytest.raises(ValueError, match="out holds 16 bytes, the records 24"):
        ragged.take_values(off, values, 8, rows, np.empty(2, np.int64))
    with pytest.raises(ValueError, match="out_bounds must be writable and hold 2 items"):
        ragged.bounds(off, rows, np.empty(3, np.int64))
    with pytest.raises(TypeError, match="rows must be an aligned buffer of int64"):
        ragged.bounds(off, rows.astype(np.int32), np.empty(2, np.int64))
    with pytest.raises(TypeError, match="offsets must be"):
        ragged.bounds(off.astype(np.float32), rows, np.empty(2, np.int64))
    with pytest.raises(ValueError, match="width must be positive"):
        ragged.take_values(off, values, 0, rows, np.empty(3, np.int64))


def test_text_that_is_not_utf8_is_a_unicode_error_and_bytes_are_kept_as_they_are() -> None:
    off, rows = offsets(0, 2, 3), np.array([1, 0, 1], np.int64)
    data = b"\xc3\xa9\xff"  # "é", then a byte no UTF-8 text holds
    assert ragged.take_text(off, data, rows[1:2], False) == ["é"]
    with pytest.raises(UnicodeDecodeError):
        ragged.take_text(off, data, rows, False)
    assert ragged.take_text(off, data, rows, True) == [b"\xff", b"\xc3\xa9", b"\xff"]
