"""``DirectPut`` (to_jax()'s device_put without JAX's dispatch) gives what ``jax.device_put``
gives, for every dtype, shape and memory layout a batch column can have, with x64 off and
on, under ``jax.default_device``; and turns itself off, with the same results, when JAX's
private call fails or differs. JAX runs in a subprocess (importing it here would make later
fork()s warn; XLA_FLAGS must be set before it loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.readers.conftest import numbered_snapshot

SCRIPT = r"""
import itertools, json, sys
import jax, ml_dtypes, numpy as np
from snapshot_cli.readers.jax_put import DirectPut, same_array
from snapshot_cli.readers.window import aligned_empty

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          ml_dtypes.bfloat16]
SHAPES = [(0,), (1,), (7,), (256,), (5, 3), (4, 3, 2), (2, 0, 3), (33, 3, 16, 16)]
rng = np.random.default_rng(0)


def values(dtype, shape):
    n = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)  # the extremes: what a cast to 32 bits changes
        out = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        out.flat[: min(n, 2)] = [info.max, info.min][: min(n, 2)]
        return out.reshape(shape)
    out = rng.standard_normal(n).astype(np.float64) * 1e5
    if n >= 3:
        out[:3] = [np.nan, np.inf, 1e300]  # out of float32's range: inf, as device_put makes
    return out.astype(dtype).reshape(shape)


def layouts(a):
    # the loader's 64-byte aligned buffers; numpy's own; misaligned; a strided view
    aligned = aligned_empty(a.shape, a.dtype)
    aligned[...] = a
    yield "aligned", aligned
    yield "numpy", a.copy()
    raw = np.empty(a.nbytes + 1, np.uint8)[1:]
    odd = raw.view(a.dtype).reshape(a.shape) if a.dtype.itemsize == 1 else None
    if odd is not None:
        odd[...] = a
        yield "misaligned", odd
    if a.ndim and a.shape[0] > 1:
        yield "strided", np.repeat(a, 2, axis=0)[::2]


put = DirectPut(jax)
checked = mismatches = 0
for x64 in (False, True):
    jax.config.update("jax_enable_x64", x64)
    for dtype, shape in itertools.product(DTYPES, SHAPES):
        for layout, a in layouts(values(dtype, shape)):
            arrays = {"a": a, "b": a[:1]}
            got, expected = put(arrays), jax.device_put(arrays)
            checked += 1
            if not all(same_array(got[k], expected[k]) for k in arrays):
                mismatches += 1
                print("differs:", x64, np.dtype(dtype), shape, layout, file=sys.stderr)
jax.config.update("jax_enable_x64", False)
direct_after_all = put.direct

# jax.default_device: the arrays go where device_put puts them (2 host devices)
second = jax.devices()[1]
with jax.default_device(second):
    placed = put({"a": np.arange(4, dtype=np.int32)})["a"]
    placed_expected = jax.device_put(np.arange(4, dtype=np.int32))
on_default = placed.devices() == placed_expected.devices() == {second}

# the private call fails: device_put's results, and it stays off
failing = DirectPut(jax)
def boom(*args):
    raise RuntimeError("private call changed")
failing._runtime_put = boom
a = np.arange(6, dtype=np.float32).reshape(2, 3)
r = failing({"a": a})["a"]
fails_over = (not failing.direct) and same_array(r, jax.device_put(a))

# the private call differs on the first batch (committed arrays): caught, and device_put's
differing = DirectPut(jax)
real = differing._runtime_put
differing._runtime_put = lambda aval, s, xs, ds, committed: real(aval, s, xs, ds, True)
r = differing({"a": a})["a"]
differs_over = (not differing.direct) and r.committed is False

# an error jax.device_put raises too (a transfer guard's) is raised, and it stays on
guarded = DirectPut(jax)
guarded({"a": a})
try:
    with jax.transfer_guard("disallow_explicit"):
        guarded({"a": a})
    guard_raised = False
except Exception as err:
    guard_raised = "Disallowed host-to-device transfer" in str(err)
guard_kept = guard_raised and guarded.direct

# to_jax() uses it with this JAX (a canary: an upgrade that turns it off fails here)
import snapshot_cli as snap
adapter = snap.open(sys.argv[1]).loader(32, seed=1).to_jax(prefetch=2)
expected_labels = [b["label"] for b in snap.open(sys.argv[1]).loader(32, seed=1)]
got_labels = [np.asarray(b["label"]) for b in adapter]
print(json.dumps({
    "checked": checked, "mismatches": mismatches, "direct_after_all": direct_after_all,
    "on_default": bool(on_default), "fails_over": bool(fails_over),
    "differs_over": bool(differs_over), "adapter_direct": adapter._put.direct,
    "guard_kept": bool(guard_kept),
    "adapter_equal": len(got_labels) == len(expected_labels) and all(
        np.array_equal(g, e) for g, e in zip(got_labels, expected_labels)),
}))
"""


@pytest.fixture(scope="module")
def snapshot_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full(3, n, np.float32)}'
    return numbered_snapshot(tmp_path_factory.mktemp("jax_put"), 120, record, "2KiB")


def test_direct_put_is_device_put(snapshot_url: str) -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", SCRIPT, snapshot_url], env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["mismatches"] == 0, res.stderr[-3000:]
    assert out["checked"] > 500  # every dtype x shape x layout, with x64 off and on
    assert out["direct_after_all"] is True  # no difference turned it off
    assert out["on_default"] is True
    assert out["fails_over"] is True and out["differs_over"] is True
    assert out["guard_kept"] is True  # jax.transfer_guard is honoured (by the runtime call)
    assert out["adapter_direct"] is True and out["adapter_equal"] is True
