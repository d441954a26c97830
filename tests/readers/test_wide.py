"""Wide tables (tabular features: hundreds of scalar columns) read back exactly, every way a
loader reads: the compiled decode takes at most MAX_COLUMNS columns a call and the compiled
scatter 64, so a wider record batch goes in parts or step by step. 500 columns failed with
the C decoder's "ValueError: at most 64 columns, got 500" before, and took 7 s an epoch over
100,000 rows (a window's size was worked out once per column)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import direct, memory

COLUMNS = 150  # > 2 x 64: three scatter calls a record batch
RECORDS = 3_000


def wide_snapshot(root: Path, compression: str) -> str:
    def preprocess(part: int) -> Any:
        label = np.arange(part * 1_000, (part + 1) * 1_000)
        columns: dict[str, Any] = {"label": label}
        for i in range(COLUMNS):
            kind = (np.float32, np.int64, np.uint8)[i % 3]
            columns[f"c{i}"] = ((label * 7 + i) % 251).astype(kind)
        columns["rgb"] = np.stack([label % 256, (label + 1) % 256, (label + 2) % 256], 1).astype(
            np.uint8
        )
        columns["name"] = [f"row {n}" for n in label]
        yield snap.Batch(columns)

    out = str(root / f"wide-{compression}")
    snap.create(preprocess, out, inputs=[0, 1, 2], workers=0, compression=compression,
                inputs_per_task=1, shard_size="64KiB")  # fmt: skip
    return out


def corrupt_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # its checksum is wrong, whatever the byte was
    path.write_bytes(bytes(data))


def check(batch: dict[str, np.ndarray], columns: list[str]) -> None:
    label = np.asarray(batch["label"])
    for name in columns:
        if name.startswith("c"):
            i = int(name[1:])
            kind = (np.float32, np.int64, np.uint8)[i % 3]
            assert batch[name].dtype == kind
            np.testing.assert_array_equal(batch[name], ((label * 7 + i) % 251).astype(kind))
    if "rgb" in columns:
        np.testing.assert_array_equal(batch["rgb"][:, 1], (label + 1) % 256)
    if "name" in columns:
        assert list(batch["name"]) == [f"row {n}" for n in label]


@pytest.fixture(scope="module", params=["none", "lz4", "zstd"])
def wide(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return wide_snapshot(tmp_path_factory.mktemp("wide"), request.param)


FIXED = ["label", "rgb"] + [f"c{i}" for i in range(COLUMNS)]
READS: dict[str, dict[str, Any]] = {
    "shuffled": {},
    "in order": {"shuffle": False},
    "unchecked": {"verify": False},
    "decode processes": {"processes": 1, "columns": FIXED},  # fixed-width columns only
    "a rank": {"rank": 1, "world_size": 2},
}


@pytest.mark.parametrize("how", READS)
def test_every_record_of_every_column_reads_back(wide: str, how: str) -> None:
    s = snap.open(wide)
    seen: list[int] = []
    for epoch in range(2):  # the second epoch gathers from what the first one found
        loader = s.loader(100, seed=epoch, **READS[how])
        loader.set_epoch(epoch)
        labels = []
        for batch in loader:
            assert sorted(batch) == sorted(READS[how].get("columns", s.schema.names))
            check(batch, list(batch))
            labels += batch["label"].tolist()
        seen.append(len(set(labels)))
    expected = RECORDS // READS[how].get("world_size", 1)
    assert seen == [expected, expected]


def test_a_few_of_many_columns(wide: str) -> None:
    s = snap.open(wide)
    picked = ["label"] + [f"c{i}" for i in range(0, COLUMNS, 2)]
    total = 0
    for batch in s.loader(256, columns=picked):
        assert sorted(batch) == sorted(picked)
        check(batch, picked)
        total += len(batch["label"])
    assert total == RECORDS


def test_a_window_reads_the_memory_in_use_once_not_once_a_column(
    wide: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's memory check counts every column, but it ran once a column, each time
    reading /proc/self/status (30,000 columns: 2.3 s of a 1.1 s first epoch's work)."""
    reads = []
    in_use = memory.in_use
    monkeypatch.setattr(memory, "in_use", lambda: reads.append(1) or in_use())
    loader = snap.open(wide).loader(100, shuffle_buffer=1_000 * (COLUMNS + 4) * 8)
    assert sum(len(b["label"]) for b in loader) == RECORDS
    assert 1 <= len(reads) <= 6  # (a window or two, and the two loads of it ahead)


def test_a_damaged_wide_shard_is_refused_before_its_records_are_served(tmp_path: Path) -> None:
    out = wide_snapshot(tmp_path, "lz4")
    s = snap.open(out)
    corrupt_byte(Path(out) / s.shards[1].path)
    for how in ({}, {"shuffle": False}):
        with pytest.raises(snap.CorruptShardError, match=s.shards[1].path.split("/")[-1]):
            for batch in snap.open(out).loader(100, **how):
                check(batch, ["label"])


def test_wider_than_one_compiled_call_is_decoded_step_by_step(
    wide: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the compiled decode was built with a lower bound (64 before), the record batch
    is decoded column by column instead: the same records."""
    monkeypatch.setattr(direct, "MAX_COLUMNS", 64)
    s = snap.open(wide)
    for how in ({}, {"shuffle": False}):
        labels = []
        for batch in s.loader(100, **how):
            check(batch, list(batch))
            labels += batch["label"].tolist()
        assert sorted(labels) == list(range(RECORDS))
