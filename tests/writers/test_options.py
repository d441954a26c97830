from __future__ import annotations

import pickle

import pytest

from snapshot_cli.units import MiB, parse_size
from snapshot_cli.writers.options import Compression, WriteOptions


@pytest.mark.parametrize(
    ("text", "value"),
    [("256MiB", 256 * MiB), ("1GB", 10**9), ("4096", 4096), ("1.5KiB", 1536), (" 2 mib ", 2 * MiB)],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1MiB", "0", "12 parsecs"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_options_are_picklable() -> None:
    opts = WriteOptions(compression=Compression("lz4"), batch_rows=7)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="batch_rows must be a positive integer"):
        WriteOptions(batch_rows=0)
    with pytest.raises(ValueError, match="compression must be one of"):
        Compression("gzip")
    with pytest.raises(ValueError, match="zstd only"):
        Compression("lz4", 3)
    assert WriteOptions.from_json(WriteOptions().to_json()) == WriteOptions()
