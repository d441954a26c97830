"""An epoch's first window of a snapshot written in small record batches (``--batch-rows``).

Each record batch costs the first window ~35 us of Python however small it is, so a first
window of 32 MiB of 200-byte records written one per record batch (160,000 of them) took 6.2 s
to the first batch. The first window now holds at most ``FIRST_WINDOW_BLOCKS`` record batches
(of the snapshot's average size); a snapshot whose first window held fewer keeps its order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import loader as loader_mod
from snapshot_cli.readers.plan import Blocks, EpochPlan

RECORDS, CLASSES = 5_000, 50  # written in class order, 100 records of a class together


def records(i: int) -> object:
    ids = np.arange(i * RECORDS // 2, (i + 1) * RECORDS // 2)
    yield snap.Batch(i=ids, label=ids // (RECORDS // CLASSES), x=np.zeros((len(ids), 64), np.uint8))


@pytest.fixture(scope="module")
def one_per_batch(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("first") / "s")
    snap.create(records, out, inputs=range(2), workers=0, inputs_per_task=1, batch_rows=1)
    assert len(Blocks.from_manifest(snap.open(out).manifest).rows) == RECORDS
    return out


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_first_window_holds_at_most_the_cap_of_record_batches(
    one_per_batch: str, shuffle: bool
) -> None:
    """Before: the whole epoch (5,000 record batches) was the first window."""
    loader = snap.open(one_per_batch).loader(16, shuffle=shuffle, seed=1)
    cap = 2048  # one record per record batch
    assert loader.plan_options.first_window_rows == cap == loader_mod.FIRST_WINDOW_BLOCKS
    plan = EpochPlan(loader.blocks, loader.plan_options, 0)
    first = plan.window(0)
    assert len({s.block for s in first}) <= cap
    assert sum(s.rows for s in first) == cap
    seen = np.concatenate([b["i"] for b in loader])  # the epoch is whole, each record once
    assert np.array_equal(np.sort(seen), np.arange(RECORDS))
    loader.close()


def test_the_first_batch_of_class_sorted_small_record_batches_is_mixed(one_per_batch: str) -> None:
    """The first window's record batches come from all over the snapshot: a first batch of
    256 holds about as many classes as a uniform shuffle (~50 of 50)."""
    for seed in range(3):
        loader = snap.open(one_per_batch).loader(256, seed=seed)
        first = next(iter(loader))
        assert len(np.unique(first["label"])) >= 45
        loader.close()


def test_a_state_of_the_first_window_before_the_cap_is_refused(one_per_batch: str) -> None:
    """The cap changes the order of such snapshots only: a state saved by the snap before it
    (its config's first_window_rows: 32 MiB of these 80-byte records) is refused saying
    another version of snap drew it; a state of this one resumes with the same batches."""
    s = snap.open(one_per_batch)
    loader = s.loader(16, seed=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    rest = [b["i"].tolist() for b in it]
    loader.close()
    old = loader_mod.FIRST_WINDOW_BYTES // 80
    before = {**state, "config": {**state["config"], "first_window_rows": old}}
    with pytest.raises(snap.OptionError, match=r"another version of snap.*set_epoch"):
        s.loader(16, seed=2).load_state_dict(before)
    again = s.loader(16, seed=2)
    again.load_state_dict(state)
    assert [b["i"].tolist() for b in again] == rest
    again.close()


def test_record_batches_of_the_default_size_keep_their_first_window(tmp_path: Path) -> None:
    """Full record batches of the default 1,024 rows: the cap does not bind (their first
    window of at most 2**20 records is at most 1,024 of them), so the order is as it was."""
    snap.create(records, tmp_path / "s", inputs=range(2), workers=0, inputs_per_task=1)
    loader = snap.open(tmp_path / "s").loader(16)
    L = loader_mod
    before = loader.reading.first_rows(  # the caps that were: bytes, records, shards
        L.FIRST_WINDOW_BYTES, L.FIRST_WINDOW_ROWS, L.FIRST_WINDOW_SHARDS, 1 << 62
    )
    assert loader.plan_options.first_window_rows == before == (32 << 20) // 80
    loader.close()
