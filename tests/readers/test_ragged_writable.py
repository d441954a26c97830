"""A ragged column's records are writable in every mode, and writing into them changes no
other batch or epoch. An uncompressed snapshot read in order gave read-only arrays (views of
the shard's map) where every other mode gave writable ones: masking tokens in place (`x[:1]
= MASK`) worked in a shuffled training loop and raised in its in-order evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ragged_records_are_writable_and_their_own(
    tmp_path: Path, compression: str, shuffle: bool
) -> None:
    @snap.ragged("ids")
    def preprocess() -> Any:
        for i in range(200):
            yield {"ids": np.arange(i % 9, dtype=np.int32) + i, "grid": np.ones((i % 3, 2)) * i,
                   "label": i}  # fmt: skip

    path = str(tmp_path / "s")
    snap.create(preprocess, path, workers=0, compression=compression)
    with snap.open(path).loader(24, shuffle=shuffle, seed=0) as loader:
        for epoch in range(2):
            seen = 0
            for batch in loader:
                for label, ids, grid in zip(
                    batch["label"], batch["ids"], batch["grid"], strict=True
                ):
                    assert ids.tolist() == list(range(label, label + label % 9))
                    assert grid.shape == (label % 3, 2) and (grid == label).all()
                    assert ids.flags.writeable and grid.flags.writeable
                    ids[:] = -1  # (the next epoch's records must be as written)
                    grid[:] = -1
                    seen += 1
            assert seen == 200, epoch
