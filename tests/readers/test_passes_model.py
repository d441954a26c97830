"""The loader's passes against README's description of them, for any sequence of what a
training script does: loops broken off after any number of batches, ``set_epoch``,
``state_dict`` and ``load_state_dict``, with ``epochs`` of 1, 2 or None.

The model: batches form one stream, epoch after epoch, each epoch's batches those of a
fresh loader set to that epoch. A pass (``for batch in loader``) starts where the loader is
and, when it starts at a pass's end, runs ``epochs`` epochs from there; breaking out and
iterating again continues where the loop stopped (the batch it broke on was handed over);
``set_epoch(e)`` moves to epoch ``e``'s start and a new pass; a state is where the next
batch comes from and ``load_state_dict`` goes back there, pass and all. Right after a load
(no pass since), a state taken after its pass's last batch gives an empty pass first, and
``set_epoch(e)`` keeps the loaded place when ``e`` is the epoch the state is within (for a
state at its pass's end, an epoch of that pass)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from tests.readers.conftest import MOVES

RECORDS, BATCH = 240, 16
PER_EPOCH = RECORDS // BATCH
OPTIONS = {"batch_size": BATCH, "seed": 5, "shuffle_buffer": 64}


def _records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(16):
        yield {"label": np.int64(16 * i + k)}


@pytest.fixture(scope="module", params=["zstd", "none"])
def snapshot_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    # (none: later epochs are gathered from the shard files, a path of their own)
    out = tmp_path_factory.mktemp(f"passes-{request.param}") / "snap"
    snap.create(_records, out, inputs=list(range(RECORDS // 16)), workers=0,
                compression=request.param, shard_size="2KiB", progress=False)  # fmt: skip
    return str(out)


class Stream:
    """Epoch ``e``'s batches, as a fresh loader set to ``e`` gives them (labels)."""

    def __init__(self, s: snap.Snapshot) -> None:
        self.s, self.epochs = s, {}  # type: ignore[var-annotated]

    def __getitem__(self, position: int) -> list[int]:
        epoch, index = divmod(position, PER_EPOCH)
        if epoch not in self.epochs:
            loader = self.s.loader(**OPTIONS, epochs=1)
            loader.set_epoch(epoch)
            self.epochs[epoch] = [batch["label"].tolist() for batch in loader]
        return self.epochs[epoch][index]  # type: ignore[no-any-return]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=MOVES, epochs=st.sampled_from([1, 2, None]))
def test_passes_move_as_readme_says(
    snapshot_url: str, moves: list[tuple[str, int]], epochs: int | None
) -> None:
    s = snap.open(snapshot_url)
    stream = Stream(s)
    loader = s.loader(**OPTIONS, epochs=epochs)
    at, end = 0, None  # the model: the next batch's place in the stream, the pass's end
    loaded = False  # a state loaded, no pass since
    saved: Any = None
    for move, n in moves:
        if move == "take" and loaded and end is not None and at >= end:
            assert list(loader) == [], (moves, at)  # the loaded pass's end
            loaded, end = False, None
        elif move == "take":
            loaded = False
            if end is None or at >= end:  # a new pass
                end = None if epochs is None else (at // PER_EPOCH + epochs) * PER_EPOCH
            got = []
            for i, batch in enumerate(loader):
                if i == n:
                    break
                got.append(batch["label"].tolist())
            left = n + 1 if end is None else end - at
            assert got == [stream[p] for p in range(at, at + min(n, left))], (moves, at)
            at += min(n + 1, left)
            if n >= left:  # the loop ran the pass to its end (not broken off at its last batch)
                end = None
        elif move == "set_epoch":
            loader.set_epoch(n)
            epoch = at // PER_EPOCH
            at_end = end is not None and at >= end
            keeps = loaded and (
                (not at_end and n == epoch)
                or (at_end and epochs is not None and epoch - epochs <= n < epoch)
            )
            if not keeps:
                at, end, loaded = n * PER_EPOCH, None, False
        elif move == "save":
            state = loader.state_dict()
            assert (state["epoch"], state["batch"]) == divmod(at, PER_EPOCH), (moves, state)
            saved = (at, end, state)
        elif saved is not None:
            loader.load_state_dict(saved[2])
            at, end, loaded = saved[0], saved[1], True
