"""``to_jax(sharding)`` with a sharding of more axes than the batch's (data parallel over
one mesh axis, a feature axis over another): it raised ``IndexError`` from inside JAX as
the loader asked how the batch axis splits (found by a probe). Now such a sharding places
every batch; a column of fewer axes than it names is said by name, and a global batch
that does not split is said as ``global_batch_size`` (4 forced host devices, in a
subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.readers.conftest import numbered_snapshot

RECORDS = 80  # (a multiple of conftest.PER_INPUT)

SCRIPT = """
import json, sys
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import snapshot_cli as snap
from snapshot_cli.errors import OptionError

grid = jax.make_mesh((2, 2), ("data", "model"))
line = jax.make_mesh((4,), ("b",))
s = snap.open(sys.argv[1])
out = {}
specs = {"data_and_model": P("data", None, "model"), "model_only": P(None, "model")}
for name, spec in specs.items():
    loader = s.loader(8, seed=2, drop_last=True, columns=["x"])
    plain = [b["x"].copy() for b in s.loader(8, seed=2, drop_last=True, columns=["x"])]
    got = list(loader.to_jax(NamedSharding(grid, spec)))
    out[name] = {
        "batches": len(got),
        "same": all(np.array_equal(np.asarray(g["x"]), p) for g, p in zip(got, plain, strict=True)),
        "specs": sorted({str(g["x"].sharding.spec) for g in got}),
        "pieces": sorted({len(g["x"].addressable_shards) for g in got}),
    }
def error(make):
    try:
        make()
    except OptionError as err:
        return str(err)
    return None
sharded = NamedSharding(grid, P("data", None, "model"))
out["odd_batch"] = error(lambda: s.loader(5, columns=["x"]).to_jax(sharded))
out["label_too"] = error(lambda: next(iter(s.loader(8, drop_last=True).to_jax(sharded))))
out["global"] = error(
    lambda: s.loader(global_batch_size=8, rank=0, world_size=4).to_jax(NamedSharding(line, P("b")))
)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    record = '{"label": np.int64(n), "x": np.full((2, 4), n, np.float32)}'
    url = numbered_snapshot(tmp_path_factory.mktemp("jax_shardings"), RECORDS, record, "2KiB")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")  # fmt: skip
    res = subprocess.run([sys.executable, "-W", "error", "-c", SCRIPT, url], env=env,
                         capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize(
    ("case", "spec"),
    [("data_and_model", "P('data', None, 'model')"),
     ("model_only", "P(None, 'model')")],
)  # fmt: skip
def test_a_sharding_of_more_axes_places_every_batch(
    results: dict[str, Any], case: str, spec: str
) -> None:
    got = results[case]
    assert got["batches"] == RECORDS // 8 and got["same"]
    assert got["specs"] == [spec] and got["pieces"] == [4]


def test_the_batch_axis_split_is_read_from_such_a_sharding(results: dict[str, Any]) -> None:
    """P("data", None, "model") cuts the batch axis in 2 (the "data" axis), not 4."""
    said = results["odd_batch"]
    assert said is not None and said.startswith("batch_size 5 does not split over the 2 devices")


def test_a_column_of_fewer_axes_than_the_sharding_is_named(results: dict[str, Any]) -> None:
    said = results["label_too"]
    assert said is not None and said.startswith("column 'label' (shape (8,)) of a batch of 8")
    assert "the sharding applies to every column" in said and "drop_last" not in said


def test_a_global_batch_that_does_not_split_names_global_batch_size(
    results: dict[str, Any],
) -> None:
    assert results["global"] == (
        "global_batch_size 8 gives each of the 4 ranks batches of 2 records, which do not "
        "split over the 4 devices of NamedSharding(mesh=Mesh('b': 4, axis_types=(Explicit,)), "
        "spec=P('b',), memory_kind=device) along the batch axis: use a global_batch_size that "
        "is a multiple of 16"
    )
