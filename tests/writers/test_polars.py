"""A polars DataFrame, yielded as it is (it exports Arrow data through the PyCapsule
interface, as DuckDB results and other tables do): it was refused as "a value of type
DataFrame". Its strings (``string_view``), lists (``large_list``), fixed-size arrays
(``Array``) and categoricals are stored as snap stores the same values from numpy, in worker
processes as in this one, and read back as numpy arrays: a ``pl.Array`` column as one
``(n, *shape)`` array."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli


def frame(i: int) -> pl.DataFrame:
    n = 5
    return pl.DataFrame(
        {
            "id": [i * 10 + j for j in range(n)],
            "score": np.linspace(0, 1, n, dtype=np.float32) + i,
            "text": [f"caption {i}.{j} é" for j in range(n)],
            "tokens": [list(range(j)) for j in range(n)],
            "emb": np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) + i,
            "kind": ["cat", "dog", "cat", "cow", "dog"],
            "raw": [bytes([i, j]) for j in range(n)],
            "ok": [j % 2 == 0 for j in range(n)],
        },
        schema_overrides={
            "tokens": pl.List(pl.Int16),
            "emb": pl.Array(pl.Float32, (2, 3)),
            "kind": pl.Categorical,
        },
    )


def preprocess(i: int) -> Any:
    yield frame(i)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_polars_dataframe_is_a_batch_of_its_columns(tmp_path: Path, workers: int) -> None:
    out = str(tmp_path / "s")
    snap.create(preprocess, out, inputs=[1, 2, 3], workers=workers)
    batch = next(iter(snap.open(out).loader(batch_size=100, shuffle=False)))
    expected = pl.concat([frame(i) for i in (1, 2, 3)])
    assert batch["id"].tolist() == expected["id"].to_list()
    np.testing.assert_array_equal(batch["score"], expected["score"].to_numpy())
    assert list(batch["text"]) == expected["text"].to_list()
    assert [t.tolist() for t in batch["tokens"]] == expected["tokens"].to_list()
    assert batch["tokens"][3].dtype == np.int16
    assert batch["emb"].shape == (15, 2, 3)  # one array, not one per record
    np.testing.assert_array_equal(batch["emb"], expected["emb"].to_numpy())
    assert list(batch["kind"]) == expected["kind"].cast(pl.String).to_list()
    assert list(batch["raw"]) == expected["raw"].to_list()
    assert batch["ok"].dtype == np.bool_
    assert batch["ok"].tolist() == expected["ok"].to_list()

    shown = CliRunner().invoke(cli, ["inspect", out, "--json"])
    assert shown.exit_code == 0, shown.output
    columns = {c["name"]: c for c in json.loads(shown.output)["schema"]}
    assert (columns["emb"]["kind"], columns["emb"]["shape"]) == ("tensor", [2, 3])
    assert columns["text"]["kind"] == columns["kind"]["kind"] == "string"
    assert (columns["tokens"]["kind"], columns["tokens"]["dtype"]) == ("ragged", "int16")
    assert columns["raw"]["kind"] == "binary"


def test_a_polars_dataframe_and_records_of_the_same_values_agree(tmp_path: Path) -> None:
    """One task yields the DataFrame, another the same values as numpy records: one schema."""

    def mixed(i: int) -> Any:
        if i == 1:
            yield frame(1).drop("kind")
            return
        for row in frame(i).drop("kind").iter_rows(named=True):
            yield {
                "id": row["id"],
                "score": np.float32(row["score"]),
                "text": row["text"],
                "tokens": np.array(row["tokens"], np.int16),
                "emb": np.array(row["emb"], np.float32),
                "raw": row["raw"],
                "ok": row["ok"],
            }

    snap.ragged("tokens")(mixed)
    out = str(tmp_path / "s")
    snap.create(mixed, out, inputs=[1, 2], workers=0)
    batch = next(iter(snap.open(out).loader(batch_size=100, shuffle=False)))
    np.testing.assert_array_equal(
        batch["emb"], np.concatenate([frame(1)["emb"].to_numpy(), frame(2)["emb"].to_numpy()])
    )


def test_missing_values_and_lazy_frames_are_told_what_to_do(tmp_path: Path) -> None:
    def with_null() -> Any:
        yield pl.DataFrame({"a": [1, None, 3]})

    with pytest.raises(snap.RecordError, match=r"column 'a' of a yielded .* 1 missing value"):
        snap.create(with_null, str(tmp_path / "n"), workers=0)

    def lazy() -> Any:
        yield pl.DataFrame({"a": [1, 2]}).lazy()

    with pytest.raises(snap.RecordError, match=r"LazyFrame; .*lazy query: .*value.collect\(\)"):
        snap.create(lazy, str(tmp_path / "l"), workers=0)

    def series() -> Any:
        yield pl.Series("a", [1, 2])

    with pytest.raises(snap.RecordError, match=r"type Series; .*yield \{'x': value\}"):
        snap.create(series, str(tmp_path / "s"), workers=0)


def test_python_objects_are_refused_not_stored_as_their_addresses(tmp_path: Path) -> None:
    """polars exports an Object column as fixed_size_binary[8]: each object's address. It was
    stored as data, silently."""
    values = [object(), object()]
    frame = pl.DataFrame({"id": [1, 2], "obj": values}, schema={"id": pl.Int64, "obj": pl.Object})

    def preprocess() -> Any:
        yield frame

    with pytest.raises(snap.RecordError, match=r"column 'obj' of a yielded DataFrame holds Py"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()

    def named_object() -> Any:  # a struct with a field named "Object" holds no objects
        yield pl.DataFrame({"st": [{"Object": 1}, {"Object": 2}]})

    snap.create(named_object, str(tmp_path / "t"), workers=0)
    assert [r["st"] for r in snap.open(str(tmp_path / "t")).head()] == [
        {"Object": 1},
        {"Object": 2},
    ]


def test_a_frame_arrow_cannot_take_says_to_cast_its_columns(tmp_path: Path) -> None:
    def preprocess() -> Any:
        yield pl.DataFrame({"big": [1]}, schema={"big": pl.Int128})

    with pytest.raises(snap.RecordError, match=r"could not be read as Arrow data .*cast the col"):
        snap.create(preprocess, str(tmp_path / "s"), workers=0)
