"""With ``map=``, a batch goes to the loop as soon as it is mapped: batches went over in
groups of up to 64 (for small batches, one hand-off per group), and a group waited for its
last batch's map, so with a 50 ms map the first batch came after 64 calls, 1.7 s (found by
a probe). Now a map's groups hold about a millisecond of its calls (one batch each until
its cost is known), and the prefetch depth stays a number of batches."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

from .conftest import numbered_snapshot

BATCH = 8
GIVE_UP = 30.0  # (seconds: only a failing run waits this long)


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    root = tmp_path_factory.mktemp("map-first")
    return snap.open(numbered_snapshot(root, 2400, '{"n": n, "v": np.float32(n)}', "16KiB"))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("adapter", ["loader", "to_torch"])
def test_the_first_batch_comes_while_the_maps_of_the_next_are_held(
    numbered: snap.Snapshot, shuffle: bool, adapter: str
) -> None:
    """Every map but the first batch's waits until the loop has that batch: the loop gets
    it only if it goes over alone (held in a group, it never came: the test gives up)."""
    loader = numbered.loader(BATCH, seed=5, shuffle=shuffle)
    first = [int(x) for x in next(iter(loader))["n"]]
    loader.close()
    got_first, give_up = threading.Event(), threading.Event()
    held: list[int] = []

    def costly(batch: dict[str, Any]) -> dict[str, Any]:
        if [int(x) for x in batch["n"]] != first:
            held.append(1)
            if not got_first.is_set():
                give_up.wait(GIVE_UP)
        return {**batch, "m": batch["v"] * 2}

    mapped = numbered.loader(BATCH, seed=5, shuffle=shuffle, map=costly)
    it = iter(mapped if adapter == "loader" else mapped.to_torch())
    arrived: list[Any] = []
    taker = threading.Thread(target=lambda: arrived.append(next(it)), daemon=True)
    taker.start()
    taker.join(GIVE_UP)
    came = bool(arrived)
    got_first.set()
    give_up.set()  # (a failing run: let the maps go, to end cleanly)
    taker.join()
    assert came, "the first batch waited for the maps of later ones"
    assert [int(x) for x in np.asarray(arrived[0]["n"])] == first
    assert np.array_equal(np.asarray(arrived[0]["m"]), np.asarray(arrived[0]["v"]) * 2)
    rest = [int(x) for b in it for x in np.asarray(b["n"])]  # (the epoch goes on whole)
    assert sorted(first + rest) == list(range(2400))
    assert held  # (the later maps did run, and were held until then)
    mapped.close()


def test_a_costly_map_s_batches_go_one_by_one_and_a_cheap_one_s_in_groups(
    numbered: snap.Snapshot,
) -> None:
    """What decides: the map's running cost. A cheap map (an addition) is grouped as before
    once measured; the prefetch buffer holds the same number of batches either way."""
    from snapshot_cli.readers.serve import GROUP_MAP_SECONDS, Server

    def group_of(calls: int, mean: float, group: int = 64) -> int:
        stand_in: Any = type("S", (), {})()
        stand_in.map_pool, stand_in.group = object(), group
        stand_in._map_calls, stand_in._map_time = calls, mean * 8
        return Server._group_now(stand_in)

    assert group_of(0, 0.0) == 1 and group_of(7, 1e-6) == 1  # (not measured yet)
    assert group_of(100, 0.05) == 1  # a 50 ms map
    assert group_of(100, GROUP_MAP_SECONDS / 10) == 10
    assert group_of(100, 1e-6) == 64 and group_of(100, 1e-6, group=4) == 4  # cheap: as before
    with numbered.loader(BATCH, shuffle=False, map=lambda b: {**b, "m": b["v"] + 1}) as cheap:
        assert sum(len(b["n"]) for b in cheap) == 2400
