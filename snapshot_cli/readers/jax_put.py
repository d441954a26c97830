"""``jax.device_put`` of host numpy arrays without JAX's per-call dispatch.

``jax.device_put(array)`` spends 60-75 us of Python per array on this kind of machine
(tree flattening, the ``device_put`` primitive's bind, its checks and result handlers)
before the runtime's own transfer call, which takes 4-5 us for a 3 MiB batch on the CPU
(the runtime aliases an aligned host array there: no copy). Per batch of two columns that
is ~150 us, a quarter of what the loader spends reading a 3 MiB batch: ``to_jax()`` could
not pass ~0.8 of the bare loader on 2 cores (``benchmarks/device.py``).

:class:`DirectPut` makes the runtime call that ``device_put`` ends in, with the same
arguments it would pass for a numpy array and no ``device`` (the default device, its
single-device sharding, the abstract value JAX gives the array, so 64-bit columns become
32-bit unless x64 is on, exactly as ``device_put`` does, and an uncommitted result).

It uses JAX's private modules (``jax._src``), which change between releases, so it guards
itself: it is made only if those names exist, and the first batch it places is placed by
``jax.device_put`` too and the two results compared (type, shape, dtype, sharding,
committed, weak type, and the values); any difference or exception, then or later, turns it
off for good and ``jax.device_put`` is used, with no change to what the user gets (an
error ``jax.device_put`` raises too, such as a transfer guard's, is raised and changes
nothing). It serves only the case it was checked for: no ``sharding`` given, one process,
numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class DirectPut:
    """``put(arrays)`` == ``jax.device_put(arrays)`` for a dict of numpy arrays, faster.

    ``put`` falls back to ``jax.device_put`` when the direct call is unavailable or has once
    differed from it; :attr:`direct` says which is in use.
    """

    def __init__(self, jax: Any) -> None:
        self._jax = jax
        self._checked = False
        self._shardings: dict[Any, Any] = {}  # default device -> its single-device sharding
        try:
            from jax._src import core
            from jax._src.interpreters import pxla
            from jax._src.lib import xla_client

            self._abstract = core.shaped_abstractify
            self._default_device = pxla.get_default_device
            self._runtime_put = xla_client.batched_device_put
            self._sharding = jax.sharding.SingleDeviceSharding
        except (ImportError, AttributeError):  # another JAX: its public call it is
            self.direct = False
        else:
            self.direct = True

    def __call__(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        if not self.direct:
            return self._jax.device_put(arrays)
        try:
            out = self._put(arrays)
        except Exception:  # noqa: BLE001 - any failure of a private call: the public one
            expected = self._jax.device_put(arrays)  # raises what it would (a transfer guard)
            self.direct = False  # the private call failed where the public one did not
            return expected
        if not self._checked:
            self._checked = True
            expected = self._jax.device_put(arrays)
            if not all(same_array(out[k], expected[k]) for k in arrays):
                self.direct = False
                return expected
        return out

    def _put(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        device = self._default_device()
        sharding = self._shardings.get(device)
        if sharding is None:
            sharding = self._shardings[device] = self._sharding(device)
        put, abstract = self._runtime_put, self._abstract
        # the arguments jax.device_put passes for a numpy array and no device (uncommitted)
        return {k: put(abstract(v), sharding, [v], [device], False) for k, v in arrays.items()}


def same_array(got: Any, expected: Any) -> bool:
    """Whether two ``jax.Array`` s are alike in all that a user of the batch can see."""
    return (
        type(got) is type(expected)
        and got.shape == expected.shape
        and got.dtype == expected.dtype
        and got.sharding == expected.sharding
        and got.committed == expected.committed
        and getattr(got, "weak_type", None) == getattr(expected, "weak_type", None)
        and bool(np.array_equal(np.asarray(got), np.asarray(expected), equal_nan=True))
    )
