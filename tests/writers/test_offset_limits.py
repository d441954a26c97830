"""Values and record batches past Arrow's 32-bit lengths (2 GiB of text, bytes or ragged values).

One string, binary or list array holds at most 2**31 - 1 bytes or values, and a tensor at most
2**31 - 1 values a record. A value past that is refused as it arrives, naming its column and
input (it was an OverflowError from pyarrow, after the copy). Values within it that together
pass it in one record batch (a yielded DataFrame or Batch of 2.4 GB of text, or records with
a large ``batch_bytes``) failed with "Cannot convert pyarrow.lib.ChunkedArray to
pyarrow.lib.Array"; their rows are now split across record batches.

The limit is lowered here (``arrays.MAX_OFFSET``, fault injection) so that every kind of yield
meets it at a few KB; the last tests use the real limit, with memory numpy never touches.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import arrays

LIMIT = 600  # bytes of text or bytes, or values of a ragged column, in one array


def _var_size(column: pa.Array) -> int:
    """What one array's 32-bit offsets count: bytes of text, values of a list."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return int(pc.sum(pc.binary_length(column)).as_py() or 0)
    if pa.types.is_struct(t):  # an n-d ragged column: its data
        column = column.field("data")
    if pa.types.is_list(column.type):
        return len(column.flatten())
    return 0


@pytest.fixture
def low_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrays, "MAX_OFFSET", LIMIT, raising=False)


def _rows(sizes: list[int], start: int) -> list[dict[str, Any]]:
    """Rows numbered from ``start``, the k-th with ``sizes[k]`` bytes or values in each of
    its text (UTF-8, two bytes a character but the last), bytes and ragged values."""
    return [
        {
            "t": "é" * (k // 2) + "x" * (k % 2),
            "b": bytes([(start + j) % 256]) * k,
            "r": np.full(k, (start + j) % 100, np.int8),
            "i": start + j,
        }
        for j, k in enumerate(sizes)
    ]


def _yielded(kind: str, rows: list[dict[str, Any]]) -> Any:
    cols = {name: [r[name] for r in rows] for name in ("t", "b", "r", "i")}
    if kind == "records":
        return rows
    if kind == "Batch":
        return [snap.Batch(t=cols["t"], b=cols["b"], r=cols["r"], i=np.array(cols["i"]))]
    if kind == "Batch of numpy text":
        text = np.array(cols["t"]) if rows else np.array([], "U1")
        return [snap.Batch(t=text, b=cols["b"], r=cols["r"], i=np.array(cols["i"]))]
    if kind == "DataFrame":
        frame = pd.DataFrame({"t": cols["t"], "b": cols["b"], "i": cols["i"]})
        frame.insert(2, "r", pd.Series(cols["r"], dtype=object))
        return [frame]
    # a Table of chunks that each fit, together past the limit
    chunks = [
        pa.record_batch(
            [
                pa.array([r["t"]], pa.string()),
                pa.array([r["b"]], pa.binary()),
                pa.array([r["r"]], pa.list_(pa.int8())),
                pa.array([r["i"]], pa.int64()),
            ],
            names=["t", "b", "r", "i"],
        )
        for r in rows
    ]
    return [pa.Table.from_batches(chunks)] if chunks else []


KINDS = ["records", "Batch", "Batch of numpy text", "DataFrame", "Table"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    yields=st.lists(
        st.tuples(st.sampled_from(KINDS), st.lists(st.integers(1, LIMIT), min_size=1, max_size=12)),
        min_size=1,
        max_size=5,
    ),
    batch_bytes=st.sampled_from(["1GiB", 2000, 300]),
)
def test_rows_past_the_limit_together_are_split_across_record_batches(
    tmp_path_factory: pytest.TempPathFactory, low_limit: None, yields: list, batch_bytes: Any
) -> None:
    out = tmp_path_factory.mktemp("s") / "s"
    expected: list[dict[str, Any]] = []
    items: list[Any] = []
    for kind, sizes in yields:
        rows = _rows(sizes, len(expected))
        expected += rows
        items += _yielded(kind, rows)

    @snap.ragged("r")
    def pipeline() -> Iterator[Any]:
        yield from items

    snap.create(pipeline, out, workers=0, batch_bytes=batch_bytes, compression="none")
    got = snap.open(out).head(len(expected) + 1)
    assert [r["i"] for r in got] == [r["i"] for r in expected]
    for want, row in zip(expected, got, strict=True):
        assert row["t"] == want["t"] and row["b"] == want["b"]
        np.testing.assert_array_equal(row["r"], want["r"])
    for shard in sorted((out / "shards").iterdir()):
        with pa.memory_map(str(shard)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                sizes = {
                    name: _var_size(col)
                    for name, col in zip(batch.schema.names, batch.columns, strict=True)
                }
                assert max(sizes.values()) <= LIMIT, (shard.name, i, sizes)


@pytest.mark.parametrize(
    "value, said",
    [
        ("x" * (LIMIT + 1), f"a str of {LIMIT + 1:,} bytes in UTF-8"),
        ("é" * (LIMIT // 2 + 1), f"a str of {LIMIT + 2:,} bytes in UTF-8"),
        (b"x" * (LIMIT + 1), f"{LIMIT + 1:,} bytes"),
        (
            np.zeros((3, LIMIT // 3 + 1), np.uint8),
            f"an array of {LIMIT + 3:,} values (shape (3, 201))",
        ),
    ],
)
@pytest.mark.parametrize("second", [False, True])
def test_one_value_past_the_limit_is_refused_naming_its_column_and_input(
    tmp_path: Path, low_limit: None, value: Any, said: str, second: bool
) -> None:
    """Also as the second value of its column, which takes the fast path of one like it."""
    small = value[:1] if not isinstance(value, np.ndarray) else value[:1, :1]
    first = [{"v": small if not isinstance(value, np.ndarray) else np.zeros_like(value[:0])}]

    @snap.ragged("v")
    def pipeline(i: int) -> Iterator[dict[str, Any]]:
        if second:
            yield from first
        yield {"v": value}

    with pytest.raises(snap.RecordError) as err:
        snap.create(pipeline, tmp_path / "s", inputs=[7], workers=0)
    message = str(err.value)
    assert message.startswith(f"input 7 (task 0), {'2nd' if second else '1st'} item it yielded: ")
    assert f"column 'v' has {said}: one value holds at most {LIMIT:,} values or bytes" in message
    assert "split it across records" in message
    assert not (tmp_path / "s" / "manifest.json").exists()


def _past_the_real_limit(case: int) -> Iterator[Any]:
    big = np.empty(2**31, np.uint8)  # numpy's memory, never touched
    yield [{"v": big}, {"v": bytes(2**31)}, snap.Batch(v=big.reshape(1, -1))][case]


def test_the_real_limit_refuses_at_once_without_touching_the_value(tmp_path: Path) -> None:
    """2**31 values of uint8 and 2**31 zero bytes (calloc'd): refused as they arrive, as a
    record and as a Batch column."""
    assert arrays.MAX_OFFSET == 2**31 - 1
    said = [
        "column 'v' has an array of 2,147,483,648 values (shape (2147483648,))",
        "column 'v' has 2,147,483,648 bytes",
        "column 'v' has arrays of 2,147,483,648 values (shape (2147483648,))",
    ]
    for case in range(3):
        with pytest.raises(snap.RecordError, match="one value holds at most 2,147,483,647") as err:
            snap.create(_past_the_real_limit, tmp_path / "s", inputs=[case], workers=0)
        assert said[case] in str(err.value)
    assert not (tmp_path / "s" / "manifest.json").exists()
