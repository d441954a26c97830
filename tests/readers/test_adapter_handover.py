"""Whoever iterates a loader next goes on where the last consumer stopped: an adapter takes
batches ahead of its consumer (``prefetch``), so a loop over it broken off leaves the loader
ahead. The same adapter went back; a new adapter over the loader (a notebook cell run
again: ``for b in loader.to_jax(): ...``) or the loader itself skipped the batches taken
ahead, silently (to_jax with prefetch=4: 4 batches a cell), and an older adapter used again
went back to its own consumer's place, repeating what a newer one had delivered.

The base :class:`Adapter` with a depth is what ``to_jax()`` and ``to_torch(device=...)``
are (JAX in this process would warn at later tests' forks); ``to_tf()``'s own chunks are
tested in test_tf.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers.adapter import Adapter
from tests.readers.conftest import numbered_snapshot

BATCH, SEED = 16, 2

# (who takes batches next, an adapter's depth, how many batches its consumer receives)
TAKES = st.lists(
    st.tuples(
        st.sampled_from(["new adapter", "first adapter", "loader"]),
        st.integers(0, 4),
        st.integers(1, 12),
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full((3,), n, np.float32)}'
    return numbered_snapshot(tmp_path_factory.mktemp("handover"), 240, record, "4KiB")


def _labels(batch: Any) -> list[int]:
    return np.asarray(batch["label"]).tolist()


def _stream(url: str, batches: int) -> tuple[list[list[int]], dict[str, Any]]:
    """The first ``batches`` batches of one uninterrupted loop, and the state after them."""
    loader = snap.open(url).loader(BATCH, seed=SEED, epochs=None)
    got: list[list[int]] = []
    if batches:
        for batch in loader:
            got.append(_labels(batch))
            if len(got) == batches:
                break
    return got, loader.state_dict()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(takes=TAKES, epochs=st.sampled_from([1, None]))
def test_whoever_iterates_next_goes_on_where_the_last_consumer_stopped(
    url: str, takes: list[tuple[str, int, int]], epochs: int | None
) -> None:
    loader = snap.open(url).loader(BATCH, seed=SEED, epochs=epochs)
    adapters: list[Adapter[Any]] = []
    got: list[list[int]] = []
    for who, depth, n in takes:
        if who == "loader":
            source: Any = loader
        elif who == "new adapter" or not adapters:
            adapters.append(Adapter(loader, depth))
            source = adapters[-1]
        else:
            source = adapters[0]  # an older adapter, used again after newer ones
        for i, batch in enumerate(source):  # the consumer receives n batches, then stops
            got.append(_labels(batch))
            if i + 1 == n:
                break
        expected, state = _stream(url, len(got))
        assert got == expected, (who, depth, n)
        assert loader.state_dict()["epoch"] == state["epoch"]
        assert loader.state_dict()["batch"] == state["batch"]
        for adapter in adapters:  # every adapter over the loader says the same
            assert adapter.state_dict() == loader.state_dict()


def test_a_notebook_cell_run_again_goes_on_from_the_batch_after(tmp_path: Path) -> None:
    """The tester's case: ids 0..99 unshuffled in batches of 10; a cell takes 3 batches of
    an adapter with prefetch 2 and stops; the cell run again (a new adapter) began at batch
    5, and the bare loader after it at 8."""

    def records() -> Any:
        yield snap.Batch(id=np.arange(100))

    snap.create(records, str(tmp_path / "s"), workers=0)
    loader = snap.open(str(tmp_path / "s")).loader(10, shuffle=False)
    for step, _ in enumerate(Adapter(loader, 2)):
        if step == 2:
            break
    assert int(next(iter(Adapter(loader, 2)))["id"][0]) == 30
    assert int(next(iter(loader))["id"][0]) == 40
    assert loader.state_dict()["batch"] == 5
