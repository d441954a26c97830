"""Records of many small columns (a feature table) make record batches of hundreds of rows, not
the few that fit in 1 MiB (5,000 float64 columns: 26 rows a record batch, 4.4x the bytes on
disk of pyarrow's 1,024-row batches and 6-8x its time); a given ``batch_bytes`` and large
records keep their record batches of about 1 MiB."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli.units import MiB
from snapshot_cli.writers.options import WIDE_BATCH_BYTES, CreateOptions, WriteOptions

COLUMNS, RECORDS = 2_000, 600
NAMES = [f"c{j}" for j in range(COLUMNS)]


def wide(i: int) -> Iterator[dict[str, Any]]:
    for k in range(RECORDS):
        yield {name: float(k * COLUMNS + j) for j, name in enumerate(NAMES)}


def wide_frame(i: int) -> Iterator[pd.DataFrame]:
    values = np.arange(RECORDS * COLUMNS, dtype=np.float64).reshape(RECORDS, COLUMNS)
    yield pd.DataFrame(values, columns=NAMES)


def batch_rows(path: Path) -> list[int]:
    manifest = snap.open(path).manifest
    return [rows for shard in manifest.shards for rows in shard.batch_sizes()]


def by_hand_bytes() -> int:
    """The same values written by pyarrow in record batches of 1,024 rows, zstd level 1."""
    values = np.arange(RECORDS * COLUMNS, dtype=np.float64).reshape(RECORDS, COLUMNS)
    batch = pa.record_batch(list(values.T), names=NAMES)
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", 1))
    with pa.ipc.new_file(sink, batch.schema, options=options) as writer:
        writer.write_table(pa.Table.from_batches([batch]), max_chunksize=1024)
    return len(sink.getvalue())


@pytest.mark.parametrize("pipeline", [wide, wide_frame], ids=["records", "a DataFrame"])
def test_many_small_columns_make_record_batches_of_hundreds_of_rows(
    tmp_path: Path, pipeline: Any
) -> None:
    info = snap.create(pipeline, tmp_path / "s", inputs=[0], workers=0)
    rows = batch_rows(tmp_path / "s")
    assert sum(rows) == RECORDS
    assert rows[:-1] and min(rows[:-1]) >= 256, rows  # (was 65 rows a record batch)
    assert info.bytes < 1.25 * by_hand_bytes(), (info.bytes, by_hand_bytes())  # (was 2.4x)
    loaded = snap.open(tmp_path / "s").head(RECORDS)
    assert [r["c7"] for r in loaded] == [float(k * COLUMNS + 7) for k in range(RECORDS)]
    assert [loaded[599][n] for n in NAMES[-3:]] == [599 * COLUMNS + j for j in (1997, 1998, 1999)]


def test_a_given_batch_bytes_holds_as_given(tmp_path: Path) -> None:
    snap.create(wide, tmp_path / "s", inputs=[0], workers=0, batch_bytes="1MiB")
    rows = batch_rows(tmp_path / "s")
    assert sum(rows) == RECORDS and max(rows) * COLUMNS * 8 <= 1 * MiB + COLUMNS * 8


def test_large_records_keep_record_batches_of_about_1_mib(tmp_path: Path) -> None:
    def frames(i: int) -> Iterator[dict[str, Any]]:
        for k in range(20):  # 256 KiB a record, in 3 columns
            yield {"frame": np.full(32_768, k, np.float64), "label": k, "name": f"f{k}"}

    snap.create(frames, tmp_path / "s", inputs=[0], workers=0)
    assert batch_rows(tmp_path / "s") == [3] * 6 + [2]  # (at most 1 MiB each)


def test_the_wide_target_is_capped_and_given_sizes_hold() -> None:
    options = WriteOptions()
    assert options.batch_bytes_for(3) == options.batch_bytes == 1 * MiB
    assert options.batch_bytes_for(5_000) == 5_000 * options.column_bytes  # 256 float64 rows
    assert options.batch_bytes_for(100_000) == WIDE_BATCH_BYTES
    assert CreateOptions(batch_bytes="2MiB").write.batch_bytes_for(5_000) == 2 * MiB
    assert CreateOptions().write.batch_bytes_for(5_000) == 5_000 * options.column_bytes
    # a run state an older snap wrote (resumed: its tasks' record batches as they were)
    older = {k: v for k, v in options.to_json().items() if k != "column_bytes"}
    assert WriteOptions.from_json(older).batch_bytes_for(5_000) == 1 * MiB
    assert WriteOptions.from_json(options.to_json()) == options
    with pytest.raises(ValueError, match="column_bytes must be an integer >= 0, got -1"):
        WriteOptions(column_bytes=-1)
