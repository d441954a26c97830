"""Counts computed with numpy (``np.int64(256)`` from a config array, ``sizes / sizes.sum()``
as mixing weights) are taken as the Python numbers they hold, everywhere an option takes a
count or a proportion; a bool is never a count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from tests.readers.conftest import numbered_snapshot

INTEGER_TYPES = [np.int8, np.int32, np.int64, np.uint16, np.uint64]

# option → (a value that works, the loader's other arguments)
COUNTS: dict[str, tuple[int, dict[str, Any]]] = {
    "batch_size": (12, {}),
    "seed": (5, {"batch_size": 8}),
    "epochs": (2, {"batch_size": 16}),
    "shuffle_buffer": (24, {"batch_size": 8}),
    "prefetch": (3, {"batch_size": 8}),
    "num_parallel_reads": (2, {"batch_size": 8}),
    "global_batch_size": (16, {}),
    "world_size": (2, {"batch_size": 8, "rank": 1}),
    "rank": (1, {"batch_size": 8, "world_size": 2}),
}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    root = tmp_path_factory.mktemp("numpy-counts")
    return snap.open(numbered_snapshot(root, 160, '{"label": np.int64(n)}', "4KiB"))


def labels(loader: snap.Loader) -> list[list[int]]:
    return [batch["label"].tolist() for batch in loader]


@pytest.mark.parametrize("kind", INTEGER_TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("option", sorted(COUNTS))
def test_a_numpy_integer_option_reads_as_the_python_int(
    snapshot: snap.Snapshot, option: str, kind: type
) -> None:
    value, others = COUNTS[option]
    assert labels(snapshot.loader(**others, **{option: kind(value)})) == labels(
        snapshot.loader(**others, **{option: value})
    )


@pytest.mark.parametrize("option", sorted(COUNTS))
def test_a_bool_is_not_a_count(snapshot: snap.Snapshot, option: str) -> None:
    """``True == 1``, so ``batch_size=True`` would silently read one record a batch."""
    _, others = COUNTS[option]
    with pytest.raises(snap.OptionError, match=f"{option} must be .*got True"):
        snapshot.loader(**others, **{option: True})


def test_head_sample_set_epoch_and_adapters_take_numpy_integers(snapshot: snap.Snapshot) -> None:
    assert snapshot.head(np.int64(3)) == snapshot.head(3)
    sampled = snapshot.sample(np.uint32(48)).loader(16, seed=1)
    assert labels(sampled) == labels(snapshot.sample(48).loader(16, seed=1))
    a, b = snapshot.loader(8), snapshot.loader(8)
    a.set_epoch(np.int64(2))
    b.set_epoch(2)
    assert labels(a) == labels(b)
    with pytest.raises(snap.OptionError, match="epoch must be an integer >= 0, got -1"):
        a.set_epoch(-1)
    with pytest.raises(snap.OptionError, match="epoch must be an integer >= 0, got 'x'"):
        a.set_epoch("x")  # type: ignore[arg-type]
    torch_batches = snapshot.loader(8, epochs=1).to_torch(prefetch=np.int16(2))
    assert sum(len(batch["label"]) for batch in torch_batches) == 160


def test_mixing_weights_may_be_a_numpy_array_or_numpy_numbers(
    snapshot: snap.Snapshot, tmp_path: Path
) -> None:
    other = snap.open(numbered_snapshot(tmp_path, 80, '{"label": np.int64(1000 + n)}', "4KiB"))
    sizes = np.array([160, 80])
    as_list = labels(snap.mix([snapshot, other], weights=[2.0, 1.0]).loader(16))
    for weights in (sizes / sizes.sum(), [np.int64(2), np.int64(1)], np.float32([2, 1])):
        assert labels(snap.mix([snapshot, other], weights=weights).loader(16)) == as_list
    with pytest.raises(snap.OptionError, match="weights must be a list of numbers"):
        snap.mix([snapshot, other], weights=np.ones((2, 1)))
