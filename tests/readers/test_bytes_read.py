"""``stats()["bytes_read"]`` (``snap bench --json``'s key) is what the loader read from
storage: a local shard's record batches as they are read, not its whole size at every
reopen (a snapshot of more shards than the 128 kept open was counted 3.2x per epoch)."""

from __future__ import annotations

import pytest

import snapshot_cli as snap

from .conftest import numbered_snapshot


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("many")
    record = '{"x": np.random.default_rng(n).integers(0, 255, 2048, dtype=np.uint8)}'
    return numbered_snapshot(root, 8000, record, "1MiB")


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": True},
        {"shuffle": False},
        {"shuffle": True, "processes": 2},
        {"shuffle": True, "columns": ["x"], "shuffle_buffer": 600},
    ],
    ids=["shuffled", "in-order", "processes", "small-windows"],
)
def test_each_epoch_reads_about_the_snapshot_once(many_shards: str, options: dict) -> None:
    s = snap.open(many_shards)
    on_disk = sum(e.bytes for e in s.shards)
    assert len(s.shards) > 128  # more than the loader keeps open: shards are opened again
    with s.loader(256, seed=0, **options) as loader:
        totals = []
        for _ in range(3):
            assert sum(len(b["x"]) for b in loader) == 8000
            totals.append(loader.stats()["bytes_read"])
    per_epoch = [b - a for a, b in zip([0, *totals], totals, strict=False)]
    for read in per_epoch:
        # every record batch read at least once; one at a window's edge may be read twice
        assert 0.9 * on_disk < read < 1.6 * on_disk, (per_epoch, on_disk)
