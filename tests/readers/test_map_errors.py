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


def received(it: Any) -> tuple[list[int], BaseException | None]:
    """The first record of each batch the loop got, and the error that ended it (TensorFlow
    wraps it in one of its own)."""
    got: list[int] = []
    try:
        got.extend(int(np.asarray(batch["n"])[0]) for batch in it)  # (kept up to an error)
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


@pytest.mark.parametrize("adapter", ["torch", "tf"])
def test_so_do_the_adapters(numbered: snap.Snapshot, adapter: str) -> None:
    loader = numbered.loader(BATCH, shuffle=False, map=failing_at(numbered, 40))
    with loader:
        got, err = received(loader.to_torch() if adapter == "torch" else loader.to_tf())
    assert err is not None and got == firsts(numbered)[:40]
