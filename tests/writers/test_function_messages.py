"""What create says of badly behaved pipeline functions (a tester's report of `snap create`).

- A function that called ``os._exit(3)`` with ``--workers 2`` was "killed, out of memory, or a
  crash in native code": an exit by code is none of those; it is said as an exit, with what
  to do instead (writers/executors.py).
- A numpy structured array returned or yielded was "a value of type void": it is a table of
  named fields, stored as a batch of its fields; a row of one says so (writers/task.py).
- With ``--workers 0``, a pipeline's ``warnings.warn`` printed as ``snap: warning: ...``, as if
  snap had said it, without its category or line; with workers as Python prints it. Now as
  Python prints it in both; snap's own warnings keep their one line (cli_io.py).
- A misspelt ``@snap.ragged("token")`` for a column ``tokens`` was never said, and the type
  conflict it led to told the user to add the decorator they had added (commit.py, task.py).
- Errors that said what was wrong but not what to do: a polars LazyFrame returned, a
  DataFrame's duplicate column names, an object column of ints and strs, a list of str then
  a str, ``np.array([5])`` then ``5`` (advice.py, records.py, schema.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import PipelineError, RecordError, SchemaMismatchError
from tests.conftest import snap_subprocess

WriteFn = Callable[..., str]


def create(fn: Any, out: Path, inputs: list[Any], workers: int = 0, **kw: Any) -> Any:
    return snap.create(fn, str(out), inputs=inputs, workers=workers, progress=False, **kw)


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The messages snap logs meanwhile (its logger, whatever a CLI test set up before)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("snapshot_cli")
    handler, level = Keep(logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- a worker process ended by an exit code ----------------------------------------------------

EXITS = """
import os

def preprocess(item):
    if item == 2:
        os._exit({code})
    yield {{"x": item}}
"""


@pytest.mark.parametrize("code", [0, 3])
def test_a_worker_ended_by_an_exit_code_is_said_as_such(
    tmp_path: Path, write_pipeline: WriteFn, code: int
) -> None:
    spec = write_pipeline(EXITS.format(code=code))
    with pytest.raises(PipelineError) as caught:
        create(spec, tmp_path / "s", [1, 2, 3], workers=2, inputs_per_task=1)
    text = str(caught.value)
    assert f"ended its worker process with exit code {code}" in text
    assert "inputs [2]" in text and "task 1" in text
    assert f"os._exit({code})" in text and "return from the function, or raise" in text
    assert "out of memory" not in text and "killed" not in text


# --- numpy structured arrays ------------------------------------------------------------------

FIELDS = [("id", "i8"), ("score", "f8"), ("pos", "f4", (3,)), ("name", "U5")]


def table(item: int) -> np.ndarray:
    rows = [(item * 10 + i, i / 2, (i, i + 1, i + 2), f"r{i}") for i in range(3)]
    return np.array(rows, dtype=FIELDS)


def returns_table(item: int) -> np.ndarray:
    return table(item)


def yields_table(item: int) -> Iterator[Any]:
    yield table(item)[:2]
    yield {"id": -1, "score": 0.5, "pos": np.zeros(3, np.float32), "name": "rec"}


@pytest.mark.parametrize(
    ("fn", "workers"), [(returns_table, 0), (returns_table, 2), (yields_table, 0)]
)
def test_a_structured_array_is_a_batch_of_its_fields(
    tmp_path: Path, fn: Callable[[int], Any], workers: int
) -> None:
    create(fn, tmp_path / "s", [1, 2], workers=workers)
    s = snap.open(str(tmp_path / "s"))
    assert s.schema.names == ["id", "score", "pos", "name"]
    got = next(iter(s.loader(batch_size=100, shuffle=False, drop_last=False)))
    if fn is returns_table:
        want = np.concatenate([table(1), table(2)])
    else:
        want = np.concatenate([table(1)[:2], table(1)[:1], table(2)[:2], table(2)[:1]])
        want[[2, 5]] = (-1, 0.5, (0, 0, 0), "rec")
    np.testing.assert_array_equal(got["id"], want["id"])
    np.testing.assert_array_equal(got["score"], want["score"])
    np.testing.assert_array_equal(got["pos"], want["pos"])
    assert list(got["name"]) == list(want["name"])


def test_a_row_of_a_structured_array_says_what_to_yield(tmp_path: Path) -> None:
    def rows(item: int) -> Iterator[Any]:
        yield from table(item)

    with pytest.raises(RecordError) as caught:
        create(rows, tmp_path / "s", [1])
    text = str(caught.value)
    assert "a row of a numpy structured array" in text
    assert "{name: row[name] for name in row.dtype.names}" in text


def test_a_structured_value_in_a_record_says_how_to_split_it(tmp_path: Path) -> None:
    with pytest.raises(RecordError) as caught:
        create(lambda item: [{"t": table(item)}], tmp_path / "s", [1])
    assert "column 't'" in str(caught.value)
    assert "**{name: v[name] for name in v.dtype.names}" in str(caught.value)


# --- the pipeline's warnings -------------------------------------------------------------------

WARNS = """
import warnings

def preprocess(path):
    warnings.warn("label file has 3 duplicate ids")
    yield {"x": 1}
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_pipelines_warning_prints_as_python_prints_it(tmp_path: Path, workers: str) -> None:
    (tmp_path / "prep.py").write_text(WARNS)
    (tmp_path / "in.txt").write_text("1")
    spec, out = f"{tmp_path / 'prep.py'}:preprocess", str(tmp_path / "s")
    done = snap_subprocess(
        "create", spec, out, "--input", str(tmp_path / "in.txt"), "--workers", workers, "--quiet"
    )
    assert done.returncode == 0, done.stderr
    shown = f"{tmp_path / 'prep.py'}:5: UserWarning: label file has 3 duplicate ids"
    assert shown in done.stderr
    assert "snap: warning: label file" not in done.stderr


# --- a misspelt @snap.ragged -------------------------------------------------------------------


@snap.ragged("token")
def misspelt(item: int) -> Iterator[dict[str, Any]]:
    yield {"tokens": np.arange(item, dtype=np.int32), "label": item}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_ragged_name_that_is_no_column_is_said_and_named_in_the_conflict(
    tmp_path: Path, logged: list[str], workers: int
) -> None:
    with pytest.raises(SchemaMismatchError) as caught:
        create(misspelt, tmp_path / "s", [1, 2], workers=workers, inputs_per_task=1)
    said = [line for line in logged if "@snapshot_cli.ragged declares 'token'" in line]
    assert len(said) == 1, logged
    assert "its columns: 'tokens', 'label'" in said[0] and "did you mean 'tokens'?" in said[0]
    text = str(caught.value)
    assert "column 'tokens' changed type" in text
    assert "@snapshot_cli.ragged declares 'token', which is no column" in text
    assert "did you mean 'tokens'?" in text


def test_a_ragged_name_that_is_no_column_is_said_once_in_a_create_that_succeeds(
    tmp_path: Path, logged: list[str]
) -> None:
    create(misspelt, tmp_path / "s", [2, 2, 2], inputs_per_task=1)
    said = [line for line in logged if "@snapshot_cli.ragged declares 'token'" in line]
    assert len(said) == 1, logged


def test_a_ragged_name_that_is_no_column_is_named_in_a_conflict_within_a_task(
    tmp_path: Path,
) -> None:
    @snap.ragged("boxes", "tokn")
    def two_shapes(item: int) -> Iterator[dict[str, Any]]:
        for n in (2, 1):
            yield {"tokens": np.arange(n), "boxes": np.zeros((n, 4))}

    with pytest.raises(SchemaMismatchError) as caught:
        create(two_shapes, tmp_path / "s", [1], batch_rows=1)
    text = str(caught.value)
    assert "@snapshot_cli.ragged declares 'tokn', which is no column" in text
    assert "did you mean 'tokens'?" in text


def test_ragged_names_that_are_columns_say_nothing(tmp_path: Path, logged: list[str]) -> None:
    @snap.ragged("tokens")
    def right(item: int) -> Iterator[dict[str, Any]]:
        yield {"tokens": np.arange(item)}

    create(right, tmp_path / "s", [1, 2], inputs_per_task=1)
    assert not [line for line in logged if "ragged" in line]


@pytest.mark.parametrize(
    ("value", "kind"),
    [(lambda i: np.int64(i), "numbers"), (lambda i: "t" * i, "text"), (lambda i: b"b", "bytes")],
)
def test_ragged_names_of_one_value_columns_are_said_once(
    tmp_path: Path, logged: list[str], value: Any, kind: str
) -> None:
    """``@snap.ragged("label")`` on a column of numbers (or text) marked nothing, silently:
    the user believed it declared something (a probe)."""

    @snap.ragged("tokens", "label")
    def fn(item: int) -> Iterator[dict[str, Any]]:
        yield {"tokens": np.arange(item), "label": value(item)}

    create(fn, tmp_path / "s", [1, 2, 3], inputs_per_task=1)
    said = [line for line in logged if "@snapshot_cli.ragged declares" in line]
    assert said == [
        f"@snapshot_cli.ragged declares 'label', a column of {kind}, one a record, not of "
        "arrays: ragged marks an array column whose shape varies, and marks nothing here; "
        "leave it out of the decorator"
    ], logged


# --- errors that say what to do ----------------------------------------------------------------


def refused(fn: Callable[[int], Any], tmp_path: Path) -> str:
    with pytest.raises((RecordError, SchemaMismatchError)) as caught:
        create(fn, tmp_path / "s", [1])
    return str(caught.value)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (lambda: np.zeros(3), "numpy ndarray (dtype float64, shape (3,))"),
        (lambda: np.ones((2, 4), np.uint8), "numpy ndarray (dtype uint8, shape (2, 4))"),
        (lambda: __import__("torch").zeros(2), "torch Tensor (dtype torch.float32, shape (2,))"),
    ],
)
def test_an_array_returned_is_named_as_such(tmp_path: Path, value: Any, kind: str) -> None:
    """Iterated, its rows were said as yielded values: "the pipeline yielded a value of type
    float64", which named neither the array nor what it was (a probe)."""
    text = refused(lambda item: value(), tmp_path)
    assert f"the pipeline returned a {kind}, whose items are values, not records" in text


def test_an_object_array_of_records_returned_is_still_its_records(tmp_path: Path) -> None:
    records = np.array([{"a": 1}, {"a": 2}], dtype=object)
    create(lambda item: records, tmp_path / "s", [1])
    assert [r["a"] for r in snap.open(str(tmp_path / "s")).head(5)] == [1, 2]


def test_a_lazy_frame_returned_is_told_to_collect(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    text = refused(lambda item: pl.LazyFrame({"a": [1, 2]}), tmp_path)
    assert "returned a value of type LazyFrame" in text and "value.collect()" in text
    assert "input 1 " in text


def test_duplicate_dataframe_columns_are_named_and_told_to_rename(tmp_path: Path) -> None:
    text = refused(lambda item: pd.DataFrame([[1, 2]], columns=["a", "a"]), tmp_path)
    assert "['a'] more than once" in text and "rename them" in text


def test_duplicate_table_columns_are_named_and_told_to_rename(tmp_path: Path) -> None:
    import pyarrow as pa

    text = refused(lambda item: pa.table([[1], [2], [3]], names=["a", "b", "a"]), tmp_path)
    assert "['a'] are given more than once" in text and "rename them" in text


def test_an_object_column_of_ints_and_strs_is_told_to_take_one_type(tmp_path: Path) -> None:
    def mixed(item: int) -> pd.DataFrame:
        return pd.DataFrame({"id": pd.Series([1, "n/a", 3], dtype=object), "x": [1, 2, 3]})

    text = refused(mixed, tmp_path)
    assert "column 'id' of a yielded DataFrame has dtype object" in text
    assert "(int, str)" in text and "changed type between records" not in text
    assert "df['id'] = df['id'].astype(str)" in text and "pd.to_numeric(df['id'])" in text


def test_a_list_of_texts_then_a_text_is_told_to_take_one_form(tmp_path: Path) -> None:
    text = refused(lambda item: [{"tags": ["a", "b"]}, {"tags": "c"}], tmp_path)
    assert "column 'tags' changed type" in text and "list of str before, str now" in text
    assert "make a lone text a list ([value])" in text


def test_an_array_then_a_number_is_told_to_take_one_form(tmp_path: Path) -> None:
    text = refused(lambda item: [{"n": np.array([5])}, {"n": 5}], tmp_path)
    assert "column 'n' changed type" in text
    assert "np.atleast_1d(value)" in text and "value.item()" in text


def test_tasks_of_arrays_and_of_numbers_are_told_to_take_one_form(tmp_path: Path) -> None:
    def per_task(item: int) -> list[dict[str, Any]]:
        return [{"n": np.array([5]) if item == 1 else 5}]

    with pytest.raises(SchemaMismatchError) as caught:
        create(per_task, tmp_path / "s", [1, 2], inputs_per_task=1)
    assert "column 'n' changed type" in str(caught.value)
    assert "np.atleast_1d(value)" in str(caught.value)


@pytest.mark.parametrize("name", ["display", "get_ipython"])
def test_ipython_s_names_in_a_worker_are_said_to_be_the_notebook_s(
    tmp_path: Path, name: str
) -> None:
    """``display(x)`` in a notebook's pipeline ran with ``workers=0`` and was a bare
    ``NameError`` in workers, where IPython's names are not defined (a probe)."""
    namespace: dict[str, Any] = {}
    exec(f"def shows(n):\n    {name}(n)\n    return {{'v': n}}\n", namespace)  # (as a cell)
    with pytest.raises(PipelineError) as raised:
        snap.create(namespace["shows"], str(tmp_path / "s"), inputs=[1], workers=1)
    said = str(raised.value)
    assert f"NameError: name {name!r} is not defined" in said
    assert said.endswith(
        f"{name!r} is IPython's, defined in the notebook's own process only, and the pipeline "
        "runs in snap's worker processes: leave it out of the pipeline (print, or log), or run "
        "the pipeline in this process (workers=0)"
    )
