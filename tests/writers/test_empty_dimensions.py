"""An array with a dimension of length 0 is stored ragged, its shape as int32s: a dimension
past 2**31 - 1 (``np.zeros((2**31, 0))`` holds no values, so no size limit meets it) is refused
as a bad value, naming its column and the limit; it was an OverflowError from numpy, "a bug
in snap". Any non-empty array with such a dimension is past one record's values already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import RecordError

SNAP = str(Path(sys.executable).with_name("snap"))
HUGE = [(2**31, 0), (0, 2**31), (3, 0, 2**40)]  # no values, one dimension past int32


@pytest.mark.parametrize("shape", HUGE)
@pytest.mark.parametrize("after", [False, True])
def test_a_record_with_an_empty_array_of_a_huge_dimension_is_refused_naming_it(
    tmp_path: Path, shape: tuple[int, ...], after: bool
) -> None:
    """Alone, or after records of another (small) shape in its column: a ragged column."""

    def records():  # type: ignore[no-untyped-def]
        if after:
            yield {"x": np.zeros((2, 0, 1)[: len(shape)], np.uint8), "y": 1}
        yield {"x": np.zeros(shape, np.uint8), "y": 2}

    with pytest.raises(RecordError) as err:
        snap.create(records, str(tmp_path / "s"), workers=0, progress=False)
    text = str(err.value)
    assert f"column 'x' has an array of shape {shape}" in text, text
    assert "a dimension is at most 2,147,483,647" in text and "reshape it" in text, text


def test_a_batch_column_of_such_arrays_is_refused(tmp_path: Path) -> None:
    def batches():  # type: ignore[no-untyped-def]
        yield snap.Batch(x=np.zeros((2, 2**31, 0), np.uint8), y=np.arange(2))

    with pytest.raises(RecordError, match=r"array of shape \(2147483648, 0\): a dimension"):
        snap.create(batches, str(tmp_path / "s"), workers=0, progress=False)
    with pytest.raises(RecordError, match="column 'x' has an array"):  # (its name said)
        snap.create(batches, str(tmp_path / "s"), workers=0, progress=False)


def test_the_largest_dimension_is_stored_and_read_back(tmp_path: Path) -> None:
    out = str(tmp_path / "s")

    def records():  # type: ignore[no-untyped-def]
        yield {"x": np.zeros((2**31 - 1, 0), np.uint8)}
        yield {"x": np.zeros((0, 3), np.uint8)}

    snap.create(records, out, workers=0, progress=False)
    (batch,) = snap.open(out).loader(2, shuffle=False)
    assert [v.shape for v in batch["x"]] == [(2**31 - 1, 0), (0, 3)]


def test_the_command_says_it_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(
        "import numpy as np\n\ndef f():\n    yield {'x': np.zeros((2**31, 0), np.uint8)}\n"
    )
    res = subprocess.run(
        [SNAP, "create", f"{tmp_path / 'pipe.py'}:f", str(tmp_path / "s"), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("snap: error: ") and "column 'x'" in line and "2,147,483,647" in line
    assert "a bug in snap" not in line
