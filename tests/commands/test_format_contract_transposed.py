"""A fixed-shape tensor column whose Arrow type has a ``permutation`` (another writer's, or an
earlier snap's, which kept a yielded one as it came): ``verify`` said ok, ``inspect`` showed
the stored shape (int32[2,3]), ``head`` the logical one ([3,2]), and the loader refused the
column. Now ``verify`` says the snapshot cannot be loaded, why and what to do (exit 1,
without calling a valid file damaged), and ``inspect`` shows the logical shape ``head`` and
pyarrow give, marked as stored transposed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from tests.commands.conftest import run, run_json
from tests.reliability.test_format_contract_manifests import foreign_snapshot

LOGICAL = np.arange(12, dtype=np.int32).reshape(2, 3, 2)  # two records of shape (3, 2)


def transposed(out: Path) -> Path:
    """Two records of ``LOGICAL``, stored with shape [2, 3] and permutation [1, 0], beside a
    plain column."""
    t = pa.fixed_shape_tensor(pa.int32(), [2, 3], permutation=[1, 0])
    stored = np.ascontiguousarray(LOGICAL.transpose(0, 2, 1)).reshape(2, 6)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(stored.reshape(-1)), 6)
    column = pa.ExtensionArray.from_storage(t, storage)
    assert column.to_numpy_ndarray().tolist() == LOGICAL.tolist()  # (pyarrow's view)
    batch = pa.record_batch([column, pa.array([7, 8])], names=["t", "label"])
    return foreign_snapshot(out, batch)


def test_verify_says_it_cannot_be_loaded_and_why(tmp_path: Path) -> None:
    path = transposed(tmp_path / "t")
    for extra in ([], ["--fast"]):
        doc = run_json("verify", str(path), *extra, code=1)
        assert doc["ok"] is False and doc["num_damaged"] == 0 and doc["damaged"] == []
        (problem,) = doc["unloadable"]
        assert problem.startswith("column 't' holds tensors stored transposed")
        assert "valid Arrow files" in problem and "snap create --overwrite" in problem
        assert "columns=" in problem
        code, stdout, _ = run("verify", str(path), *extra)
        assert code == 1 and "CANNOT BE LOADED  column 't'" in stdout
        assert "cannot be loaded" in stdout.splitlines()[-1 if not extra else -2]
        assert "damaged" not in stdout.lower() and "delete" not in stdout


def test_inspect_head_and_the_loader_agree_on_the_shape(tmp_path: Path) -> None:
    path = transposed(tmp_path / "t")
    (t, label) = run_json("inspect", str(path))["schema"]
    assert t == {"name": "t", "kind": "tensor", "dtype": "int32", "shape": [3, 2],
                 "transposed": True}  # fmt: skip
    assert label == {"name": "label", "kind": "scalar", "dtype": "int64", "shape": []}
    assert "t      int32[3,2] (stored transposed)" in run("inspect", str(path))[1]
    records = run_json("head", str(path))["records"]
    assert [r["t"]["shape"] for r in records] == [[3, 2], [3, 2]]
    assert [r["t"]["first"] for r in records] == [x.reshape(-1)[:6].tolist() for x in LOGICAL]
    assert "int32[3,2]" in run("head", str(path))[1]
    s = snap.open(path)
    assert [r["t"].tolist() for r in s.head(2)] == LOGICAL.tolist()
    with pytest.raises(OptionError, match="column 't' holds tensors stored transposed"):
        s.loader(batch_size=2)
    batches = list(s.loader(batch_size=2, columns=["label"], shuffle=False))  # (as advised)
    assert batches[0]["label"].tolist() == [7, 8]


def test_a_snapshot_made_of_a_permuted_tensor_is_loadable(tmp_path: Path) -> None:
    """snap stores a yielded permuted tensor in its logical order: verify ok, and inspect's
    shape is the loader's."""
    t = pa.fixed_shape_tensor(pa.int32(), [2, 3], permutation=[1, 0])
    stored = np.ascontiguousarray(LOGICAL.transpose(0, 2, 1)).reshape(-1)
    column = pa.ExtensionArray.from_storage(
        t, pa.FixedSizeListArray.from_arrays(pa.array(stored), 6)
    )

    def pipeline() -> pa.Table:
        yield pa.table({"t": column})

    out = tmp_path / "made"
    snap.create(pipeline, str(out), workers=0)
    doc = run_json("verify", str(out))
    assert doc["ok"] is True and doc["unloadable"] == []
    (col,) = run_json("inspect", str(out))["schema"]
    assert col == {"name": "t", "kind": "tensor", "dtype": "int32", "shape": [3, 2]}
    (batch,) = snap.open(out).loader(batch_size=2, shuffle=False)
    assert batch["t"].shape == (2, *col["shape"]) and batch["t"].tolist() == LOGICAL.tolist()
