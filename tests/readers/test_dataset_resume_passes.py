"""``SnapshotDataset.load_state_dict`` reaches every pass that starts after it, in any
DataLoader: without workers, in new workers each epoch, and in persistent workers started
before the state was loaded (they held the copy of the dataset made when they started, and
began the state's epoch at its first batch). The usual epoch loop, ``load_state_dict`` and
then ``set_epoch(e)`` at the top of each epoch, resumes in workers as without them (it
started the epoch over, dropping the state); and a state is taken once: the next pass is the
next epoch, and a later ``set_epoch`` of the state's epoch replays it whole (a persistent
worker's copy applied the state again). Real DataLoaders, real worker processes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import snapshot_cli as snap
from snapshot_cli.readers.torch import SnapshotDataset

RECORDS, GLOBAL, SEED, STEP = 320, 16, 4, 3


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("passes") / "s"

    def records() -> Any:
        for s in range(0, RECORDS, 40):
            yield snap.Batch(id=np.arange(s, s + 40, dtype=np.int64))

    snap.create(records, str(path), workers=0, batch_rows=20, shard_size="4KiB")
    return str(path)


@pytest.fixture(scope="module")
def epochs(url: str) -> dict[int, list[list[int]]]:
    """Each epoch's global batches, as a plain loader gives them."""
    loader = snap.open(url).loader(global_batch_size=GLOBAL, seed=SEED)
    out = {}
    for e in range(4):
        loader.set_epoch(e)
        out[e] = [sorted(b["id"].tolist()) for b in loader]
    return out


def _dataset(url: str) -> Any:
    return SnapshotDataset(url, global_batch_size=GLOBAL, seed=SEED, rank=0, world_size=1)


def _pass(loader: Any) -> list[list[int]]:
    """One whole pass of ``loader``, as global batches (a worker's items are its slices)."""
    items = [item["id"].tolist() for item in loader]
    n = max(1, loader.num_workers)
    return [sorted(sum(items[i : i + n], [])) for i in range(0, len(items), n)]


@pytest.fixture(scope="module")
def state(url: str) -> dict[str, Any]:
    """A state STEP global batches into epoch 1, saved without workers."""
    ds = _dataset(url)
    ds.set_epoch(1)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None))
    for _ in range(STEP):
        next(it)
    return ds.state_dict(epoch=1, step=STEP)


@pytest.mark.parametrize("set_epoch", [False, True], ids=["iterated", "set_epoch-first"])
@pytest.mark.parametrize(
    ("workers", "persistent", "started"),
    [(0, False, False), (2, False, False), (2, True, False), (2, True, True)],
    ids=["no-workers", "new-workers", "persistent", "persistent-started-before"],
)
def test_a_loaded_state_starts_the_next_pass_once(
    url: str, epochs: dict[int, list[list[int]]], state: dict[str, Any],
    workers: int, persistent: bool, started: bool, set_epoch: bool,
) -> None:  # fmt: skip
    ds = _dataset(url)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=workers, persistent_workers=persistent
    )
    if started:  # the workers exist, with a copy of the dataset as it was then
        assert _pass(dl) == epochs[0]
    ds.load_state_dict(state)
    if set_epoch:
        ds.set_epoch(1)
    assert _pass(dl) == epochs[1][STEP:]  # resumed where the state was saved
    assert _pass(dl) == epochs[2]  # then the next epoch, whole
    ds.set_epoch(1)
    assert _pass(dl) == epochs[1]  # the state was taken: epoch 1 again is all of it


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_of_another_epoch_drops_the_state(
    url: str, epochs: dict[int, list[list[int]]], state: dict[str, Any], workers: int
) -> None:
    ds = _dataset(url)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0
    )
    ds.load_state_dict(state)
    ds.set_epoch(3)
    assert _pass(dl) == epochs[3]


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "new-workers"])
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_every_start_method_takes_set_epoch_and_a_loaded_state(
    url: str, epochs: dict[int, list[list[int]]], state: dict[str, Any], context: str,
    persistent: bool,
) -> None:  # fmt: skip
    """A forkserver worker's parent is the forkserver, not the process iterating the
    DataLoader: its passes counted under the forkserver's process id, so set_epoch and
    load_state_dict never reached them (a resumed epoch started over, repeating the steps
    trained on; set_epoch(0) after epoch 1 gave epoch 2; found by a probe)."""
    ds = _dataset(url)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                     multiprocessing_context=context,
                                     persistent_workers=persistent)  # fmt: skip
    ds.load_state_dict(state)
    ds.set_epoch(1)
    assert _pass(dl) == epochs[1][STEP:]
    ds.set_epoch(0)
    assert _pass(dl) == epochs[0]
    ds.set_epoch(0)  # (asked again: the same order again, not the next epoch)
    assert _pass(dl) == epochs[0]
