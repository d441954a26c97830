"""A loader of some columns sizes its windows by those columns, and its first window by whole
records (a first read checks all of each record batch, whatever it keeps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
