"""A state taken at any batch of a training loop resumes where the uninterrupted run was:
also after an epoch's last batch, before the loop ends (it resumed with a whole extra epoch),
with the README's ``set_epoch`` at each epoch's start (it restarted the resumed epoch), and
from a checkpoint library's tree of numpy numbers and tuples."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap

EPOCHS = 2


def ids(i: int) -> Any:
    yield {"id": i}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    out = tmp_path_factory.mktemp("resume") / "ids"
    snap.create(ids, out, inputs=list(range(100)), workers=0)
    return snap.open(out)


def loader_of(s: snap.Snapshot, how: str) -> Any:
    if how == "global":
        return s.loader(global_batch_size=10, seed=0, rank=0, world_size=1)
    if how == "torch":
        return s.loader(10, seed=0).to_torch()
    return s.loader(10, seed=0)


def train(loader: Any, start: int, stop_after: int | None, set_epoch: bool) -> tuple[list, Any]:
    """A loop that checkpoints after every step; preempted after ``stop_after`` steps."""
    seen: list[list[int]] = []
    for epoch in range(start, EPOCHS):
        if set_epoch:
            loader.set_epoch(epoch)
        for batch in loader:
            seen.append([int(x) for x in batch["id"]])
            checkpoint = (epoch, json.loads(json.dumps(loader.state_dict())))
            if len(seen) == stop_after:
                return seen, checkpoint
    return seen, None


@pytest.mark.parametrize("how", ["per-rank", "global", "torch"])
@pytest.mark.parametrize("set_epoch", [False, True])
def test_a_run_preempted_at_any_step_ends_as_the_uninterrupted_one(
    snapshot: snap.Snapshot, how: str, set_epoch: bool
) -> None:
    full, _ = train(loader_of(snapshot, how), 0, None, set_epoch)
    for stop in range(1, len(full)):  # every step (10: after epoch 0's last batch)
        first, (epoch, state) = train(loader_of(snapshot, how), 0, stop, set_epoch)
        resumed = loader_of(snapshot, how)
        resumed.load_state_dict(state)
        rest, _ = train(resumed, epoch, None, set_epoch)
        assert first + rest == full, stop  # (stop 10: 30 batches, an extra epoch, before)


@pytest.mark.parametrize("stop", [10, 3])
def test_lightnings_set_epoch_after_a_resume_at_or_within_an_epoch(
    snapshot: snap.Snapshot, stop: int
) -> None:
    """Lightning checkpoints an epoch's end as the next epoch and calls the sampler's
    set_epoch with it; within an epoch, with the epoch it resumes."""
    full, _ = train(loader_of(snapshot, "torch"), 0, None, False)
    first, (epoch, state) = train(loader_of(snapshot, "torch"), 0, stop, False)
    resumed = loader_of(snapshot, "torch")
    resumed.load_state_dict(state)
    rest = []
    for e in range(state["epoch"], EPOCHS):
        resumed.sampler.set_epoch(e)
        rest += [[int(x) for x in b["id"]] for b in resumed]
    assert first + rest == full


def test_a_state_of_numpy_numbers_and_tuples_loads(snapshot: snap.Snapshot) -> None:
    """What a numpy/JAX checkpoint tree hands back: "'epoch' is np.int64(0), not an integer"
    and "other fingerprints: ('0d15...',) vs ['0d15...']" before."""
    loader = snapshot.loader(global_batch_size=10, seed=0, rank=0, world_size=1)
    it = iter(loader)
    expected = [next(it)["id"] for _ in range(2)]
    state = loader.state_dict()
    tree = {k: (np.int64(v) if isinstance(v, int) else v) for k, v in state.items()}
    tree["config"] = {k: tuple(v) if isinstance(v, list) else v for k, v in state["config"].items()}
    again = snapshot.loader(global_batch_size=10, seed=0, rank=0, world_size=1)
    again.load_state_dict(tree)
    fresh = snapshot.loader(global_batch_size=10, seed=0, rank=0, world_size=1)
    whole = [b["id"] for b in fresh]
    assert [b["id"].tolist() for b in again] == [b.tolist() for b in whole[2:]]
    assert [b.tolist() for b in expected] == [b.tolist() for b in whole[:2]]


def test_a_state_of_the_other_order_names_the_option(snapshot: snap.Snapshot) -> None:
    state = snapshot.loader(global_batch_size=10, seed=0, rank=0, world_size=1).state_dict()
    with pytest.raises(snap.OptionError, match=r"global order \(global_batch_size=10\)"):
        snapshot.loader(10, seed=0).load_state_dict(state)
    state = snapshot.loader(10, seed=0).state_dict()
    with pytest.raises(snap.OptionError, match=r"each rank's own order \(batch_size=10"):
        snapshot.loader(global_batch_size=10, seed=0).load_state_dict(state)
