"""Text given as any of numpy's text arrays is stored as the same str, and a list or array
with a missing value or times in it is refused saying so, naming the item.

numpy 2's ``StringDType`` arrays were refused ("has dtype StringDType(); supported dtypes
are bool, int8..int64, ...: convert it to one of these", pointing at numbers), and a list
holding None or datetimes got the message for any object array (a value probe)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap

STRING_DTYPE = np.dtypes.StringDType()
# any str UTF-8 holds (no lone surrogates), NULs and trailing NULs included
texts = st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=6), max_size=4)
FORMS = {
    "list": list,
    "object array": lambda t: np.array(t, dtype=object),
    "StringDType array": lambda t: np.array(t, dtype=STRING_DTYPE),
}


@settings(max_examples=25)
@given(rows=st.lists(texts, min_size=1, max_size=3), form=st.sampled_from(sorted(FORMS)))
def test_texts_of_a_record_replay_as_given(
    tmp_path_factory: pytest.TempPathFactory, rows: list[list[str]], form: str
) -> None:
    out = str(tmp_path_factory.mktemp("t") / "s")
    make = FORMS[form]

    def records(i: int) -> Any:
        yield {"i": i, "tags": make(rows[i])}

    # (one task: a task of empty lists alone is float64, told as documented)
    snap.create(records, out, inputs=list(range(len(rows))), workers=0, inputs_per_task=3)
    got = {int(i): list(t) for b in snap.open(out).loader(2, shuffle=False) for i, t in
           zip(b["i"], b["tags"], strict=True)}  # fmt: skip
    assert got == dict(enumerate(rows))


@settings(max_examples=15)
@given(column=st.lists(st.text(st.characters(exclude_categories=["Cs"])), min_size=1, max_size=5))
def test_a_string_dtype_column_of_a_batch_replays_as_given(
    tmp_path_factory: pytest.TempPathFactory, column: list[str]
) -> None:
    out = str(tmp_path_factory.mktemp("b") / "s")

    def batch(_: int) -> Any:
        yield snap.Batch(s=np.array(column, dtype=STRING_DTYPE))

    snap.create(batch, out, inputs=[0], workers=0)
    assert [s for b in snap.open(out).loader(8, shuffle=False) for s in b["s"]] == column


MISSING = np.dtypes.StringDType(na_object=None)


@pytest.mark.parametrize(
    ("value", "said"),
    [([1, None], "a list holding None (item 1)"),
     ((2.5, float("nan"), None), "a tuple holding None (item 2)"),
     (np.array(["a", None], dtype=object), "dtype object holding None (item 1)"),
     (np.array([None, "b"], dtype=MISSING), "holding None (item 0)"),
     ([datetime.datetime(2020, 1, 1)] * 2, "a list of times: a column of times holds one"),
     ([datetime.timedelta(1)], "a list of times: a column of times holds one")],
)  # fmt: skip
def test_a_missing_value_or_times_in_a_list_are_said(tmp_path: Path, value: Any, said: str) -> None:
    def records(_: int) -> Any:
        yield {"x": value}

    with pytest.raises(snap.RecordError, match=re.escape(said)) as err:
        snap.create(records, str(tmp_path / "s"), inputs=[0], workers=0)
    assert "column 'x' has " in str(err.value) and "supported dtypes" not in str(err.value)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_batch_column_of_string_dtype_with_a_missing_value_is_refused(tmp_path: Path) -> None:
    def batch(_: int) -> Any:
        yield snap.Batch(s=np.array(["a", None], dtype=MISSING))

    with pytest.raises(snap.RecordError, match="column 's' is None; snap columns have no missing"):
        snap.create(batch, str(tmp_path / "s"), inputs=[0], workers=0)


@pytest.mark.parametrize(
    ("column", "said"),
    [([1.0, None, 3.0], "row 1: column 'x' is None"),
     (["a", "b", 3, None], "row 2: column 'x' changed type between records: str before"),
     ([np.zeros(2), np.zeros(2, np.complex64)], "row 1: column 'x' has dtype complex64")],
)  # fmt: skip
def test_a_bad_value_of_a_batch_column_names_its_row(
    tmp_path: Path, column: list[Any], said: str
) -> None:
    """It named the column only: ``snap.Batch(x=[1.0, None, 3.0])`` said "column 'x' is
    None", leaving the user to search the batch."""

    def batch(_: int) -> Any:
        yield snap.Batch(x=column)

    with pytest.raises(snap.RecordError, match=re.escape(said)):
        snap.create(batch, str(tmp_path / "s"), inputs=[0], workers=0)
