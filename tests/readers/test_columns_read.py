"""A loader of some columns sizes its windows by those columns, and its first window by whole
records (a first read checks all of each record batch, whatever it keeps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import loader as loader_mod


def test_windows_are_sized_by_the_columns_read_the_first_by_whole_records(
    tmp_path: Path,
) -> None:
    def preprocess(i: int) -> object:
        for k in range(100):
            yield {"image": np.full(4096, k, np.uint8), "label": i * 100 + k, "name": f"r{k}"}

    snap.create(preprocess, tmp_path / "s", inputs=range(20), workers=0)
    s = snap.open(tmp_path / "s")
    whole = s.loader(64)
    label = s.loader(64, columns=["label"])
    text = s.loader(64, columns=["label", "name"])
    per_whole = whole._context.bytes_per_row
    assert per_whole >= 4096 + 8
    # the image's 4,096 bytes a record left out; text left out is not known column by
    # column, so its share of the average record stays in (a few bytes here)
    per_label = label._context.bytes_per_row
    assert 8 <= per_label < 32
    assert text._context.bytes_per_row == per_label
    buffer = loader_mod.SHUFFLE_BUFFER_BYTES
    assert whole.plan_options.window_rows == buffer // per_whole
    assert label.plan_options.window_rows == buffer // per_label
    # what reads touch, by which the read threads take record batches in groups (a group
    # of 512 record batches of such labels mapped 260 MiB of shard pages at once)
    assert label._context.record_bytes == whole._context.record_bytes == per_whole
    first = loader_mod.FIRST_WINDOW_BYTES // per_whole
    assert whole.plan_options.first_window_rows == label.plan_options.first_window_rows == first
    labels = sorted(int(x) for b in label for x in b["label"])
    assert labels == list(range(2000))


def records(i: int) -> object:
    rng = np.random.default_rng(i)
    for k in range(300):
        yield {"image": rng.integers(0, 16, 3072, np.uint8), "label": i * 300 + k,
               "flag": bool(k % 3), "name": f"r{i}-{k}", "when": np.datetime64(k, "ms"),
               "tokens": np.arange(k % 7, dtype=np.int32)}  # fmt: skip


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
def test_some_columns_of_every_kind_are_the_columns_of_the_whole_records(
    tmp_path: Path, codec: str
) -> None:
    """A column not placed straight into the window (a bool, text, a time, a ragged list)
    made the loader decode every column of each record batch, images too, then select (10-17x
    the cost of the columns asked for): only those are decoded now. The same batches."""
    out = str(tmp_path / codec)
    snap.create(snap.ragged("tokens")(records), out, inputs=range(6), workers=0, compression=codec,
                batch_rows=64)  # fmt: skip
    s = snap.open(out)
    for columns in (["label", "flag"], ["name", "label"], ["when"], ["tokens", "label"]):
        for kw in ({"batch_size": 60}, {"batch_size": 60, "shuffle": False},
                   {"global_batch_size": 60}):  # fmt: skip
            whole = [{c: b[c] for c in columns} for b in s.loader(seed=4, **kw)]
            some = list(s.loader(seed=4, columns=columns, **kw))
            assert len(some) == len(whole)
            for a, b in zip(some, whole, strict=True):
                assert list(a) == columns
                for c in columns:
                    if c == "tokens":
                        assert all(np.array_equal(x, y) for x, y in zip(a[c], b[c], strict=True))
                    else:
                        assert np.array_equal(a[c], b[c]), (codec, columns, kw, c)


def test_a_damaged_column_not_read_is_still_found(tmp_path: Path) -> None:
    """The checksum covers the whole record batch: a flipped byte among the images is found
    by a loader of the labels and flags only."""
    out = str(tmp_path / "s")
    snap.create(records, out, inputs=range(2), workers=0, compression="none", batch_rows=300,
                inputs_per_task=1)  # fmt: skip
    shard = Path(out) / snap.open(out).shards[1].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the images (3 KiB of 3.1 KiB a record)
    shard.write_bytes(bytes(data))
    with pytest.raises(snap.CorruptShardError, match="crc32c"):
        list(snap.open(out).loader(100, columns=["label", "flag"]))
