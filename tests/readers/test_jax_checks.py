"""``to_jax(sharding=...)`` checks at construction that every batch of an epoch splits over
the devices, the final partial one included (4 forced host devices, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.readers.conftest import numbered_snapshot

RECORDS = 120  # 120 / 7 ranks: 18 records per rank, not a multiple of 4


@pytest.fixture(scope="module")
def snapshot_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full(3, n, np.float32)}'
    return numbered_snapshot(tmp_path_factory.mktemp("jax_checks"), RECORDS, record, "2KiB")


# Each case: loader options → the error at to_jax(...), or the batches of one epoch.
JAX_CHECKS = """
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import snapshot_cli as snap
from snapshot_cli.errors import OptionError

mesh = Mesh(np.array(jax.devices()), ("batch",))
by_batch, replicated = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
s = snap.open(sys.argv[1])
cases = {
    "partial_3": (dict(batch_size=32, world_size=7), by_batch),   # 18 per rank: 18 = 0x32 + 18
    "partial_rank_6": (dict(batch_size=8, rank=6, world_size=7), by_batch),  # 2x8 + 2
    "one_rank_odd": (dict(batch_size=4, world_size=40), by_batch),  # 3 per rank: 0x4 + 3
    "batch_30": (dict(batch_size=30), by_batch),
    "drop_last": (dict(batch_size=8, world_size=7, drop_last=True), by_batch),  # 2x8
    "divides": (dict(batch_size=32), by_batch),  # 120 = 3x32 + 24, 24 splits
    "replicated": (dict(batch_size=32, world_size=7), replicated),  # nothing to split
}
out = {"devices": len(jax.devices())}
for name, (options, sharding) in cases.items():
    loader = s.loader(seed=1, **options)
    try:
        batches = loader.to_jax(sharding=sharding)
    except OptionError as err:
        out[name] = {"error": str(err), "batches_read": loader.stats()["batches"]}
        continue
    rows, dtypes, labels = [], set(), []
    for b in batches:
        rows.append(int(b["x"].shape[0]))
        dtypes.add(str(b["label"].dtype))
        labels.extend(np.asarray(b["label"]).tolist())
    out[name] = {"rows": rows, "dtypes": sorted(dtypes), "labels": labels}
out["bad_sharding"] = []
for bad in ("cpu", 3):  # failed at the first batch, blamed on "the last, partial batch"
    try:
        s.loader(8, drop_last=True).to_jax(bad)
    except OptionError as err:
        out["bad_sharding"].append(str(err))
device = s.loader(8, drop_last=True).to_jax(jax.devices()[1])  # a device is a placement too
out["device"] = [str(next(iter(device))["label"].devices())]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(snapshot_url: str) -> dict[str, Any]:
    # JAX runs in a subprocess: XLA_FLAGS must be set before it loads, and JAX in this
    # process would make later fork()s (torch DataLoader workers) warn. -W error: placing
    # batches (int64 labels included) must not warn.
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")  # fmt: skip
    res = subprocess.run([sys.executable, "-W", "error", "-c", JAX_CHECKS, snapshot_url],
                         env=env, capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    return out


@pytest.mark.parametrize(
    ("case", "last", "per_rank", "batch"),
    [("partial_3", 18, 18, 32), ("partial_rank_6", 2, 18, 8), ("one_rank_odd", 3, 3, 4)],
)
def test_a_last_batch_that_does_not_split_fails_at_construction(
    results: dict[str, Any], case: str, last: int, per_rank: int, batch: int
) -> None:
    got = results[case]
    assert "error" in got, got
    assert got["batches_read"] == 0  # raised by to_jax(...), before any batch
    message = got["error"]
    assert f"the last batch of every epoch has {last} records" in message
    assert "do not split over the 4 devices" in message
    assert f"reads {per_rank} records per epoch" in message
    assert f"{per_rank} % batch_size {batch} = {last}" in message
    assert "drop_last=True" in message and "world_size" in message


def test_a_batch_size_that_does_not_split_fails_at_construction(
    results: dict[str, Any],
) -> None:
    assert "batch_size 30 does not split over the 4 devices" in results["batch_30"]["error"]


def test_batches_that_split_iterate_a_full_epoch(results: dict[str, Any]) -> None:
    divides = results["divides"]
    assert divides["rows"] == [32, 32, 32, 24]  # the partial last batch splits: 4 x 6
    assert sorted(divides["labels"]) == list(range(RECORDS))
    dropped = results["drop_last"]
    assert dropped["rows"] == [8, 8]  # 18 per rank, the last 2 dropped
    assert results["replicated"]["rows"] == [18]  # replicated: any size is placed whole


def test_int64_columns_become_int32_without_x64(results: dict[str, Any]) -> None:
    # what the module docstring says; and the subprocess ran with -W error: no warning
    assert results["divides"]["dtypes"] == ["int32"]


def test_a_sharding_that_is_none_of_jaxs_is_refused_when_made(results: dict[str, Any]) -> None:
    assert results["bad_sharding"] == [
        "sharding must be None, a jax.sharding.Sharding or a jax.Device, got 'cpu'",
        "sharding must be None, a jax.sharding.Sharding or a jax.Device, got 3",
    ]
    assert results["device"] == ["{CpuDevice(id=1)}"]
