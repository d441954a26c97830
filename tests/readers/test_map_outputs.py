"""A map that returns the same memory for every batch is an error, not wrong batches.

``np.add(a, b, out=buf)`` into a preallocated buffer is right where each batch is used before
the next is made; a loader's map runs ahead of the loop, in threads, so every batch the loop
held changed under it (1,936 of 2,000 records wrong in a probe, silently). Maps that return
the batch itself, change it in place, return views of it, new arrays or the same constant
arrays every time, over slot windows and
gathered ones (an uncompressed snapshot's later epochs, whose buffers the loader reuses once
dropped), with batches kept or dropped, read every record right and raise nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap

RECORDS = 3000


def records(task: int) -> Iterator[dict[str, Any]]:
    for k in range(300):
        i = task * 300 + k
        yield {"x": np.full(16, i, np.int64), "i": i}


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, snap.Snapshot]:
    root = tmp_path_factory.mktemp("maps")
    made = {}
    for codec in ("none", "zstd"):
        snap.create(records, root / codec, inputs=list(range(10)), workers=0, compression=codec)
        made[codec] = snap.open(root / codec)
    return made


def refilling(kind: str) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """A map that returns memory of its own for every batch, in one of the ways code does."""
    buf = np.empty((RECORDS, 16), np.int64)

    def fill(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(b["i"])
        if kind == "out=":
            np.add(b["x"], 0, out=buf[:n])
            return {"x": buf[:n], "i": b["i"]}
        if kind == "whole buffer":
            buf[:n] = b["x"]
            return {"x": buf, "i": b["i"]}
        out = buf[:n].reshape(n, 4, 4)  # a view of another shape
        out[:] = b["x"].reshape(n, 4, 4)
        return {"i": b["i"], "x": out}

    return fill


@pytest.mark.parametrize("kind", ["out=", "whole buffer", "reshaped view"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_map_refilling_one_buffer_is_an_error_naming_the_column(
    snapshots: dict[str, snap.Snapshot], kind: str, codec: str
) -> None:
    loader = snapshots[codec].loader(batch_size=64, map=refilling(kind), epochs=2)
    with pytest.raises(ValueError, match=r"map returned column 'x' of batch \d+ in the memory of"):
        for _batch in loader:  # the loop holds the batch before the next: it is in use
            pass


def ident(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return b


def in_place(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    b["x"] += 1
    return b


def views(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"x": b["x"][:, ::2], "i": b["i"]}


def new_arrays(b: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": b["x"] + rng.integers(0, 1, b["x"].shape), "i": b["i"].copy()}


POSITIONS = np.arange(16, dtype=np.int64)
MASKS = np.ones((700, 16), np.float32)


def constants(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same arrays, unchanged, for every batch: fine, as nothing changes under the loop."""
    return {**b, "pos": POSITIONS, "mask": MASKS[: len(b["i"])]}


MAPS = {"the batch": ident, "in place": in_place, "views": views, "new arrays": new_arrays,
        "constants": constants}  # fmt: skip


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(sorted(MAPS)),
    codec=st.sampled_from(["none", "zstd"]),
    batch_size=st.integers(1, 700),
    window=st.sampled_from(["auto", 256, 1000]),
    keep=st.booleans(),
    shuffle=st.booleans(),
)
def test_maps_of_the_batch_or_new_arrays_read_every_record(
    snapshots: dict[str, snap.Snapshot],
    name: str,
    codec: str,
    batch_size: int,
    window: Any,
    keep: bool,
    shuffle: bool,
) -> None:
    loader = snapshots[codec].loader(batch_size=batch_size, map=MAPS[name], epochs=2,
                                     shuffle=shuffle, shuffle_buffer=window)  # fmt: skip
    kept, seen = [], []
    for b in loader:
        x = b["x"] - (1 if name == "in place" else 0)
        assert (x == b["i"][:, None]).all()
        seen.extend(b["i"].tolist())
        if keep:
            kept.append(b)
    assert sorted(seen) == sorted(list(range(RECORDS)) * 2)
    for b in kept:  # what was kept was not changed by the batches after it
        assert (b["x"] - (1 if name == "in place" else 0) == b["i"][:, None]).all()


def test_a_map_refilling_one_torch_tensor_is_an_error_too(
    snapshots: dict[str, snap.Snapshot],
) -> None:
    """A torch user's map: ``torch.add(x, 1, out=buf)``; tensors of the batch's memory, or new
    ones, are fine."""
    import torch

    buf = torch.empty((RECORDS, 16), dtype=torch.int64)

    def refill(b: dict[str, np.ndarray]) -> dict[str, Any]:
        n = len(b["i"])
        return {"x": torch.add(torch.from_numpy(b["x"]), 0, out=buf[:n]), "i": b["i"]}

    def tensors(b: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"x": torch.from_numpy(b["x"]), "y": torch.from_numpy(b["x"]) + 0, "i": b["i"]}

    with pytest.raises(ValueError, match=r"map returned column 'x' of batch \d+ in the memory of"):
        for _batch in snapshots["zstd"].loader(batch_size=64, map=refill, epochs=2):
            pass
    seen = 0
    for b in snapshots["none"].loader(batch_size=64, map=tensors, epochs=2):
        assert (b["x"][:, 0].numpy() == b["i"]).all() and (b["y"] == b["x"]).all()
        seen += len(b["i"])
    assert seen == 2 * RECORDS


def test_a_map_cheap_then_costly_then_cheap_keeps_every_batch_in_order(tmp_path: Any) -> None:
    """A map cheaper than handing a batch to a map thread and back runs in the serving
    thread (a running mean of its calls decides): one that turns costly for a stretch (here
    batches 40-80) goes back to the map threads and back again, every batch mapped once, in
    order, its buffer-refill check kept for the arrays it makes."""
    out = str(tmp_path / "s")
    snap.create(records, out, inputs=list(range(RECORDS // 300)), workers=0)
    heavy = np.random.default_rng(0).random((120, 120))
    calls: list[int] = []

    def costly_for_a_while(b: dict[str, Any]) -> dict[str, Any]:
        first = int(b["i"][0])
        calls.append(first)
        if 40 * 10 <= first < 80 * 10:
            np.linalg.svd(heavy)  # ~1 ms: the map threads again
        return {**b, "twice": b["i"] * 2}

    plain = [b["i"].copy() for b in snap.open(out).loader(10, seed=3, shuffle=False)]
    got = list(snap.open(out).loader(10, seed=3, shuffle=False, map=costly_for_a_while))
    assert len(got) == len(plain) == RECORDS // 10
    for b, want in zip(got, plain, strict=True):
        assert np.array_equal(b["i"], want) and np.array_equal(b["twice"], want * 2)
    assert sorted(calls) == [int(p[0]) for p in plain]  # each batch mapped once


def test_a_map_adding_a_refilled_column_to_the_batch_it_got_is_refused(tmp_path: Any) -> None:
    """``b["y"] = np.multiply(b["x"], 2, out=buf); return b``: the batch dict the map got and
    returned is the loader's, and the new column was taken for one of its own ("given", so
    not checked): 62 of 63 kept batches were wrong, without a word."""
    out = str(tmp_path / "s")
    snap.create(records, out, inputs=list(range(RECORDS // 300)), workers=0)
    buf = np.empty(64, np.int64)

    def in_place(b: dict[str, Any]) -> dict[str, Any]:
        b["y"] = np.multiply(b["i"], 2, out=buf[: len(b["i"])])
        return b

    with pytest.raises(ValueError, match="map returned column 'y' of batch"):
        list(snap.open(out).loader(64, shuffle=False, map=in_place))
