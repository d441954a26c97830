"""Any value a user function yields is either stored and read back as it was, or refused with
a RecordError naming the column (and, through the CLI, the input), the same way for
``--workers 0`` and worker processes: unsupported numpy dtypes (float128, complex, datetime,
object, str_; byte-swapped ones are stored in native order), text that is not valid Unicode
(lone surrogates), ints outside int64, None, nested containers, arbitrary objects, and Arrow
data that Arrow rejects."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.writers.values import text_list

# Every dtype numpy can make, in both byte orders where it has one.
ALL_DTYPES = sorted(
    {np.dtype(t) for t in np.sctypeDict.values() if np.dtype(t).kind != "V"}
    | {np.dtype(t).newbyteorder() for t in np.sctypeDict.values() if np.dtype(t).itemsize > 1},
    key=str,
)


def numpy_value(dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    if dtype.kind in "US":
        return np.full(shape, "ab", dtype=dtype)
    if dtype.kind == "O":
        return np.full(shape, None, dtype=object) if shape else np.array(None, dtype=object)
    if dtype.kind in "mM":
        return np.zeros(shape, dtype=dtype)
    return np.ones(shape, dtype=dtype) if shape else dtype.type(1)


class Opaque:
    """An object snap has no way to store."""


texts = st.lists(st.integers(0, 0x10FFFF), max_size=6).map(lambda cs: "".join(map(chr, cs)))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.binary(max_size=6),
    st.builds(Opaque),
    st.complex_numbers(allow_nan=False, max_magnitude=10),
)
values = st.one_of(
    scalars,
    st.builds(
        numpy_value,
        st.sampled_from(ALL_DTYPES),
        st.lists(st.integers(0, 3), max_size=2).map(tuple),
    ),
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=3), scalars, max_size=2),
)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)  # byte-swapped values come back in native order
        nan = a.dtype.kind == "f"
        return a.dtype.newbyteorder("=") == b.dtype and np.array_equal(a, b, equal_nan=nan)
    return bool(a == b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_any_value_is_stored_faithfully_or_refused_naming_the_column(
    tmp_path_factory: pytest.TempPathFactory, value: Any
) -> None:
    out = tmp_path_factory.mktemp("values") / uuid.uuid4().hex

    def preprocess(i: int) -> Any:
        yield {"the_column": value, "i": i}

    try:
        snap.create(preprocess, str(out), inputs=[7], workers=0)
    except snap.RecordError as err:
        assert "'the_column'" in str(err), err
        assert not (out / "manifest.json").exists()
        return
    back = snap.open(str(out)).head(1)[0]["the_column"]
    stored = value.item() if isinstance(value, np.generic) else value
    texts = text_list(stored)
    if texts is not None:  # a list of str or of bytes: replayed as an object array of them
        assert back.dtype == object and list(back) == list(texts), (value, back)
        assert all(type(v) is type(t) for v, t in zip(back, texts, strict=True))
        return
    if isinstance(stored, list):
        stored = np.asarray(stored)
    assert same(stored, back), (value, back)


PIPE = """
import numpy as np
import pyarrow as pa

VALUES = {
    "float128": lambda: np.ones(2, dtype=np.longdouble),
    "complex64": lambda: np.complex64(1 + 2j),
    "pandas NA": lambda: __import__("pandas").NA,
    "datetime": lambda: np.datetime64("2020-01-01"),
    "surrogate": lambda: "caf\\udce9",
    "huge int": lambda: 2**80,
    "none": lambda: None,
    "object": lambda: object(),
    "bad arrow": lambda: pa.StringArray.from_buffers(
        1, pa.py_buffer(np.array([0, 2], np.int32)), pa.py_buffer(b"\\xff\\xfe")
    ),
}

def preprocess(i, kind):
    value = VALUES[kind]()
    if kind == "bad arrow":
        yield pa.RecordBatch.from_arrays([value], names=["the_column"])
    else:
        yield {"the_column": value, "i": i}
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "1"])
def test_refusals_read_the_same_in_process_and_in_workers(tmp_path: Path, workers: str) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    (tmp_path / "in-7").write_text("an input")
    kinds = ["float128", "complex64", "pandas NA", "datetime", "surrogate", "huge int", "none",
             "object", "bad arrow"]  # fmt: skip
    for kind in kinds:
        res = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path}/pipe.py:preprocess",
             str(tmp_path / "out"), "--input", "in-7", "--param",
             f"kind={json.dumps(kind)}", "--workers", workers],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert res.returncode == 1, f"{kind}: {res.stderr}"
        assert "Traceback" not in res.stderr, f"{kind}: {res.stderr}"
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("snap: error:")]
        assert "'the_column'" in line and "in-7" in line, f"{kind}: {line}"
        assert not (tmp_path / "out" / "manifest.json").exists()


def test_an_arrow_batch_arrow_rejects_is_refused_before_it_is_written(tmp_path: Path) -> None:
    offsets = np.array([0, 2], np.int32)
    column = pa.StringArray.from_buffers(1, pa.py_buffer(offsets), pa.py_buffer(b"ab"))
    bad = pa.RecordBatch.from_arrays([column], names=["the_column"])
    offsets[1] = 4096  # past the data: Arrow checked the offsets when the batch was made

    def preprocess(i: int) -> Any:
        yield bad

    with pytest.raises(snap.RecordError, match="'the_column' .* not valid Arrow data"):
        snap.create(preprocess, str(tmp_path / "out"), inputs=[1], workers=0)
