"""``to_jax()`` without x64: JAX makes int64/uint64 columns 32-bit and keeps the low 32 bits
of a value that does not fit, silently (an id of 2**32 + 5 became 5), and float64 columns
float32, a finite value past its range inf. Such a value is an ``OptionError`` naming the
column, found in whichever batch holds it; values that fit
arrive exact, and with x64 on every value does (JAX in a subprocess, as in
test_jax_checks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests.readers.conftest import numbered_snapshot

RECORDS = 120
BIG = 2**32 + 5  # the id of record 100 only: its low 32 bits are 5

SCRIPT = """
import json, sys
import jax, numpy as np
import snapshot_cli as snap
from snapshot_cli.errors import OptionError

s = snap.open(sys.argv[1])
out = {}
for columns in (["id"], ["unsigned"], ["label"], ["wide"], ["odd"]):
    batches = s.loader(8, shuffle=False, columns=columns).to_jax()
    seen = []
    try:
        for b in batches:
            seen.extend(np.asarray(b[columns[0]]).tolist())
            out[columns[0] + "_dtype"] = str(b[columns[0]].dtype)
    except OptionError as err:
        out[columns[0]] = {"error": str(err), "before": len(seen)}
    else:
        out[columns[0]] = {"values": seen}
jax.config.update("jax_enable_x64", True)
out["x64"] = [v for b in s.loader(8, shuffle=False, columns=["id"]).to_jax()
              for v in np.asarray(b["id"]).tolist()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    record = (
        f'{{"id": np.int64({BIG} if n == 100 else -n), "unsigned": np.uint64(2**32 if n == 7 '
        'else n), "label": np.int64(n), "wide": np.float64(-1e300 if n == 50 else n / 2), '
        '"odd": np.float64([np.nan, np.inf, -np.inf, 3e38, -1e-300][n % 5])}'
    )
    url = numbered_snapshot(tmp_path_factory.mktemp("narrow"), RECORDS, record, "2KiB")
    res = subprocess.run([sys.executable, "-W", "error", "-c", SCRIPT, url],
                         env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def test_an_int64_that_int32_cannot_hold_is_refused_in_the_batch_that_holds_it(
    results: dict[str, Any],
) -> None:
    got = results["id"]
    where = results["label"]["values"].index(100)  # (the order of the shards, unshuffled)
    assert got["before"] == where // 8 * 8 > 0  # the batches before the one holding it
    assert got["error"].startswith(
        f"column 'id' holds {BIG:,} in this batch, which JAX without x64 cannot: it makes "
        "int64 columns int32"
    )
    assert "jax.config.update('jax_enable_x64', True)" in got["error"]


def test_a_uint64_past_uint32_is_refused(results: dict[str, Any]) -> None:
    got = results["unsigned"]
    assert got["before"] == 0 and "column 'unsigned' holds 4,294,967,296" in got["error"]
    assert "uint64 columns uint32" in got["error"]


def test_values_that_fit_arrive_exact_and_with_x64_every_one_does(
    results: dict[str, Any],
) -> None:
    assert results["label"] == {"values": list(range(RECORDS))}
    assert results["label_dtype"] == "int32"
    assert results["x64"] == [BIG if n == 100 else -n for n in range(RECORDS)]


def test_a_float64_that_float32_makes_inf_is_refused(results: dict[str, Any]) -> None:
    got = results["wide"]
    where = results["label"]["values"].index(50)
    assert got["before"] == where // 8 * 8 > 0
    assert got["error"].startswith(
        "column 'wide' holds -1e+300 in this batch, which JAX without x64 makes inf: it makes "
        "float64 columns float32"
    )


def test_nan_inf_and_values_in_range_pass_as_float32_makes_them(results: dict[str, Any]) -> None:
    odd = results["odd"]["values"]
    assert results["odd_dtype"] == "float32" and len(odd) == RECORDS
    expected = [float(np.float32(v)) for v in [np.nan, np.inf, -np.inf, 3e38, -1e-300]]
    for n, value in enumerate(odd):
        want = expected[results["label"]["values"][n] % 5]
        assert value == want or (np.isnan(want) and np.isnan(value)), (n, value, want)
