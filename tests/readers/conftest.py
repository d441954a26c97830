"""What the reader tests share: small snapshots of numbered records, made in a test's dir, and
a comparison of two loaders' batches; tiny windows read one by one; and the moves of the
model tests of passes."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import units


@pytest.fixture(autouse=True)
def _windows_read_one_by_one(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """These tests' windows of a few records stand for a real loader's windows (a shuffle
    buffer of 400 records, to cross many window boundaries): each is read on its own, not
    with the next ones in a unit (:mod:`snapshot_cli.readers.units`), except in a test marked
    ``units`` (which show the two read the same records)."""
    if "units" not in request.keywords:
        monkeypatch.setattr(units, "UNIT_BYTES", 0)


PER_INPUT = 40  # records each input file yields


def numbered_snapshot(root: Path, records: int, record: str, shard_size: str) -> str:
    """Make a snapshot of ``records`` records under ``root``; return its path.

    Args:
        records: a multiple of PER_INPUT.
        record: the Python expression of the record numbered ``n`` (``i`` is its input,
            ``k`` its place there; ``np`` is numpy), e.g. ``{"label": np.int64(n)}``.
        shard_size: small sizes make many shards and record batches.
    """
    (root / "pipe.py").write_text(
        textwrap.dedent(
            f"""
            import numpy as np
            def preprocess(path):
                with open(path) as f:
                    i = int(f.read())
                for k in range({PER_INPUT}):
                    n = i * {PER_INPUT} + k
                    yield {record}
            """
        )
    )
    (root / "in").mkdir()
    for i in range(records // PER_INPUT):
        (root / "in" / f"{i}.txt").write_text(str(i))
    out = root / "snap"
    snap.create(f"{root / 'pipe.py'}:preprocess", str(out), inputs=[str(root / "in" / "*.txt")],
                workers=0, shard_size=shard_size)  # fmt: skip
    return str(out)


def damaged_snapshot(root: Path, width: int = 64) -> tuple[str, str]:
    """Four shards of 50 records (``label`` 50 i + k, ``x`` ``width`` bytes of k), one
    record batch each, uncompressed; shard 2 has one value byte flipped, so it still decodes
    but fails its checksum → (the snapshot's path, the damaged shard's path in it)."""
    import numpy as np

    def preprocess(i: int) -> Any:
        for k in range(50):
            yield {"label": i * 50 + k, "x": np.full(width, k, np.uint8)}

    out = str(root / "s")
    snap.create(preprocess, out, inputs=[0, 1, 2, 3], workers=0, inputs_per_task=1,
                compression="none")  # fmt: skip
    victim = snap.open(out).shards[2].path
    shard_file = Path(out) / victim
    data = bytearray(shard_file.read_bytes())
    data[len(data) // 2] ^= 0x01  # a value byte: the file still decodes, its checksum is wrong
    shard_file.write_bytes(bytes(data))
    return out, victim


def same_batches(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    """The same batches: columns in the same order, each of the same dtype, shape and values."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert list(x) == list(y)
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            assert np.array_equal(x[k], y[k]), k


# What a training script does to a loader, for the model tests of its passes: a loop broken
# off on batch n (n + 1 handed over, or the pass's end), set_epoch(n), state_dict() and
# load_state_dict() of the last state taken.
MOVES = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 40)),
        st.tuples(st.just("set_epoch"), st.integers(0, 3)),
        st.tuples(st.just("save"), st.just(0)),
        st.tuples(st.just("load"), st.just(0)),
    ),
    max_size=8,
)


@contextlib.contextmanager
def dataloader_iteration(loader: Any) -> Iterator[Any]:
    """``iter(loader)`` for a torch DataLoader, its workers shut down on leaving.

    An iterator left to the garbage collector (an exception's traceback holds it in a cycle)
    is shut down after its queues' feeder threads were closed: its workers never hear they
    are done and each waits out torch's 5 s join timeout. That is torch's, with any dataset;
    a test that meets an error in a worker would spend 10 s on it."""
    it = iter(loader)
    try:
        yield it
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
