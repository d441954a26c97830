"""A loader ``map`` may return views and byte-swapped arrays; the adapters take them.

README says a map may return views of the batch. A flip (``batch["image"][:, :, ::-1]``, the
commonest augmentation) has negative strides, which ``torch.from_numpy`` refuses: ``to_torch()``
and ``SnapshotDataset`` failed with torch's "At least one stride ... is negative", naming no
column. An array in the other byte order (``.astype(">f4")``, data read with
``np.frombuffer(..., ">f4")``) failed in torch ("byte order different from the native") and in
JAX ("Dtype >f4 is not a valid JAX array type"), and ``to_tf()`` said the map returned ">f4
rows ..., but float32 rows ... in the first batch" though the first batch was >f4 too. Each is
now copied (in native order) and handed on with the values the map made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

RECORDS = 24
BATCH = 8


@snap.ragged("tokens")
def records() -> Any:
    for i in range(RECORDS):
        image = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) + i
        yield {"image": image, "x": np.float32(i) + 0.5, "id": i, "tokens": np.arange(i % 3 + 1)}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("views") / "s")
    snap.create(records, out, workers=0)
    return out


def flipped(batch: dict[str, Any]) -> dict[str, Any]:
    batch["image"] = batch["image"][:, :, ::-1]  # a horizontal flip: a view
    tokens = np.empty(len(batch["tokens"]), dtype=object)
    tokens[:] = [t[::-1] for t in batch["tokens"]]  # ragged: each record's view, reversed
    batch["tokens"] = tokens
    return batch


def big_endian(batch: dict[str, Any]) -> dict[str, Any]:
    batch["x"] = batch["x"].astype(">f4")
    batch["id"] = batch["id"].astype(">i8")
    batch["image"] = batch["image"].astype(">u2")[:, ::-1]  # both at once
    return batch


MAPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "flipped": flipped,
    "big_endian": big_endian,
}


def expected(name: str, snapshot: str) -> list[dict[str, np.ndarray]]:
    """The batches the map makes, in native numpy: what every adapter must hand on."""

    def native(v: np.ndarray) -> np.ndarray:
        return v if v.dtype == object else v.astype(v.dtype.newbyteorder("="))

    loader = snap.open(snapshot).loader(BATCH, shuffle=False, map=MAPS[name])
    return [{k: native(v) for k, v in batch.items()} for batch in loader]


@pytest.mark.parametrize("name", sorted(MAPS))
def test_to_torch_takes_what_the_map_returned(snapshot: str, name: str) -> None:
    import torch

    want = expected(name, snapshot)
    loader = snap.open(snapshot).loader(BATCH, shuffle=False, map=MAPS[name])
    got = list(loader.to_torch())
    assert len(got) == len(want) == RECORDS // BATCH
    for g, w in zip(got, want, strict=True):
        for column in ("image", "x", "id"):
            assert isinstance(g[column], torch.Tensor), column
            np.testing.assert_array_equal(g[column].numpy(), w[column])
            assert g[column].numpy().dtype == w[column].dtype  # native: >f4 is float32
        assert [t.tolist() for t in g["tokens"]] == [t.tolist() for t in w["tokens"]]


@pytest.mark.parametrize("name", sorted(MAPS))
def test_a_dataloader_of_a_snapshot_dataset_takes_what_the_map_returned(
    snapshot: str, name: str
) -> None:
    from torch.utils.data import DataLoader

    from snapshot_cli.readers.torch import SnapshotDataset

    want = expected(name, snapshot)
    dataset = SnapshotDataset(snapshot, batch_size=BATCH, shuffle=False, map=MAPS[name])
    got = list(DataLoader(dataset, batch_size=None, num_workers=0))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g["image"].numpy(), w["image"])
        np.testing.assert_array_equal(g["x"].numpy(), w["x"])
        assert g["x"].dtype.is_floating_point and g["image"].numpy().dtype == w["image"].dtype


JAX_CHECK = """
import json, sys
import jax, numpy as np
import snapshot_cli as snap
sys.path.insert(0, sys.argv[3])
from test_map_views import MAPS

url, batch, name = sys.argv[1], int(sys.argv[2]), sys.argv[4]
out = []
for b in snap.open(url).loader(batch, shuffle=False, map=MAPS[name]).to_jax():
    assert all(isinstance(b[c], jax.Array) for c in ("image", "x", "id"))
    out.append({c: [np.asarray(b[c]).tolist(), np.asarray(b[c]).dtype.str] for c in
                ("image", "x", "id")})
print(json.dumps(out))
"""


@pytest.mark.parametrize("name", sorted(MAPS))
def test_to_jax_takes_what_the_map_returned(snapshot: str, name: str) -> None:
    """(JAX in a subprocess, as the suite's other JAX tests: imported here, it would make
    every later fork in this test process warn, and warnings are errors.)"""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run(
        [sys.executable, "-c", JAX_CHECK, snapshot, str(BATCH), here, name],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    want = expected(name, snapshot)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for column in ("image", "x", "id"):
            values, dtype = g[column]
            np.testing.assert_array_equal(np.array(values, dtype=np.dtype(dtype)), w[column])
        assert g["x"][1] == np.dtype(np.float32).str


TF_CHECK = """
import json, sys
import numpy as np
import snapshot_cli as snap

url, batch = sys.argv[1], int(sys.argv[2])

def big_endian(b):
    b["x"] = b["x"].astype(">f4")
    return {"x": b["x"], "id": b["id"]}

first = int(next(iter(snap.open(url).loader(batch, shuffle=False)))["id"][0])

def widening(b):  # float32 first, float64 from the second batch on: a real change (told
    # by its ids: the map threads call it in any order)
    return {"x": b["x"].astype(">f4" if int(b["id"][0]) == first else ">f8"), "id": b["id"]}

out = {"x": [], "dtype": []}
for x in snap.open(url).loader(batch, shuffle=False, map=big_endian).to_tf():
    out["x"] += x["x"].numpy().tolist()
    out["dtype"].append(x["x"].dtype.name)
try:
    list(snap.open(url).loader(batch, shuffle=False, map=widening).to_tf())
    out["error"] = None
except Exception as err:
    out["error"] = [line for line in str(err).splitlines() if "map returned column" in line][0]
print(json.dumps(out))
"""


def test_to_tf_takes_a_byte_swapped_column_and_says_truly_what_changed(snapshot: str) -> None:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run(
        [sys.executable, "-c", TF_CHECK, snapshot, str(BATCH)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["x"] == [i + 0.5 for i in range(RECORDS)]
    assert set(out["dtype"]) == {"float32"}
    assert "map returned column 'x' as float64 rows of shape (), but float32 rows" in out["error"]


def test_a_framework_array_is_the_array_itself_when_nothing_needs_a_copy() -> None:
    from snapshot_cli.readers.map_arrays import framework_array

    plain = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert framework_array(plain) is plain
    strided = plain[:, ::2]
    assert framework_array(strided) is strided  # strided, not negative: as it is
    one = plain[0, :1][::-1]  # one value: numpy calls it contiguous, torch does not
    for view in (plain[:, ::-1], plain.astype(">f4"), plain.astype(">f4")[::-1], one):
        copied = framework_array(view)
        assert copied.dtype.isnative and min(copied.strides) >= 0
        np.testing.assert_array_equal(copied, view)
