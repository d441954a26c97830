"""A ``map=`` that fails on a later batch: the batches made before it reach the loop first,
in order, then its error (they went over in groups of up to 64 small batches, and the group
being filled was dropped: a map failing on batch 40 looked to the loop like one failing on
its first batch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

from .conftest import numbered_snapshot

BATCH = 8


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    root = tmp_path_factory.mktemp("map-errors")
    return snap.open(numbered_snapshot(root, 800, '{"n": n, "v": np.float32(n)}', "4KiB"))


class Rare(ValueError):
    pass


def firsts(s: snap.Snapshot) -> list[int]:
    """The first record of each batch in written order (inputs by name: 0, 1, 10, 11, ...)."""
    return [int(b["n"][0]) for b in s.loader(BATCH, shuffle=False)]


def failing_at(s: snap.Snapshot, k: int) -> Any:
    first = firsts(s)[k]

    def fn(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if int(batch["n"][0]) == first:  # batch k, by its records (maps run in threads)
            raise Rare(f"a rare record in batch {k}")
        return batch

    return fn


def first_of(column: Any) -> int:
    """A batch's first record; -1 on torch's meta device, which holds no values."""
    if getattr(getattr(column, "device", None), "type", None) == "meta":
        return -1
    return int(np.asarray(column)[0])


def same(got: list[int], want: list[int]) -> bool:
    """``got`` is ``want``, -1 standing for any record (the meta device's)."""
    return len(got) == len(want) and all(g in (-1, w) for g, w in zip(got, want, strict=True))


def received(it: Any) -> tuple[list[int], BaseException | None]:
    """The first record of each batch the loop got, and the error that ended it (TensorFlow
    wraps it in one of its own)."""
    got: list[int] = []
    try:
        got.extend(first_of(batch["n"]) for batch in it)  # (kept up to an error)
    except Exception as err:
        assert "a rare record in batch" in str(err)
        return got, err
    return got, None


@pytest.mark.parametrize("k", [1, 5, 40, 99])
@pytest.mark.parametrize("processes", [0, 2])
def test_the_batches_before_a_failing_map_reach_the_loop_first(
    numbered: snap.Snapshot, k: int, processes: int
) -> None:
    fn = failing_at(numbered, k)
    with numbered.loader(BATCH, shuffle=False, map=fn, processes=processes) as loader:
        got, err = received(loader)
    assert isinstance(err, Rare) and str(err) == f"a rare record in batch {k}"
    assert got == firsts(numbered)[:k]


def adapted(loader: Any, adapter: str) -> Any:
    """``loader`` through ``adapter``; "torch_device" and "jax" start 8 batches ahead."""
    if adapter == "torch":
        return loader.to_torch()
    if adapter == "torch_device":  # (the meta device: a copy started ahead, as to a GPU)
        return loader.to_torch(device="meta", prefetch=8)
    if adapter == "jax":
        return loader.to_jax(prefetch=8)
    return loader.to_tf()


ADAPTERS = ["torch", "torch_device", "jax", "tf"]


@pytest.mark.parametrize("k", [15, 40])  # (TensorFlow takes 8 at a time: 15 mid-chunk)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_so_do_the_adapters(numbered: snap.Snapshot, adapter: str, k: int) -> None:
    """The adapters that start batches ahead raised the error up to 8 batches early (the
    loader's own error passed by the batches started), and TensorFlow lost the batches of
    its chunk before it (a map failing on 15 handed over 8)."""
    loader = numbered.loader(BATCH, shuffle=False, map=failing_at(numbered, k))
    with loader:
        got, err = received(adapted(loader, adapter))
    assert err is not None and same(got, firsts(numbered)[:k])


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_after_an_error_the_state_and_a_new_pass_start_at_the_batch_it_ended(
    numbered: snap.Snapshot, adapter: str
) -> None:
    """A map that fails once (a transient fault): the state saved in the ``except`` names
    the first batch the loop did not get, and iterating again delivers every batch of the
    epoch once (to_tf()'s state said 15 with 8 received, and its next pass skipped 8-14)."""
    fails = failing_at(numbered, 15)
    failed: list[int] = []

    def once(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not failed:
            try:
                return fails(batch)
            except Rare:
                failed.append(1)
                raise
        return batch

    with numbered.loader(BATCH, shuffle=False, map=once) as loader:
        it = adapted(loader, adapter)
        got, err = received(it)
        assert isinstance(err, Exception) and len(got) == 15
        assert it.state_dict()["batch"] == 15
        again, err = received(it)
    want = firsts(numbered)  # (a to_tf() pass started mid-epoch runs on into the next)
    assert err is None and same(got + again[: len(want) - 15], want)


@pytest.mark.parametrize("adapter", ["bare", *ADAPTERS])
def test_a_map_s_keys_that_are_no_column_names_are_refused(
    numbered: snap.Snapshot, adapter: str
) -> None:
    """``{1: ...}`` from a map: the loader and ``to_torch()`` took it, ``to_jax()`` failed
    sorting the keys, ``to_tf()`` in its graph (a probe)."""
    for keys in ([1], [("a",)], ["n", b"y"]):
        loader = numbered.loader(BATCH, map=lambda b: dict.fromkeys(keys, b["n"]))  # noqa: B023
        with loader, pytest.raises(TypeError, match="map must return a dict keyed by column"):
            next(iter(loader if adapter == "bare" else adapted(loader, adapter)))  # (to_tf():
            # a map's first batch is read as the dataset is made)
