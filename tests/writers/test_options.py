from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
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


@pytest.mark.parametrize(
    ("given", "codec"),
    [("ZSTD", "zstd"), ("Lz4", "lz4"), ("lz4_frame", "lz4"), ("NONE", "none"), (None, "none")],
)
def test_compression_is_named_as_people_write_it(tmp_path: Path, given: object, codec: str) -> None:
    """ "ZSTD" was "compression must be one of ['lz4', 'none', 'zstd']"; None (pyarrow's way
    of saying no compression) too."""
    info = snap.create(lambda i: iter([{"x": i}]), str(tmp_path / "s"), inputs=[1],
                       workers=0, compression=given)  # fmt: skip
    assert snap.open(info.path).manifest.compression["codec"] == codec
    code = CliRunner().invoke(cli, ["create", "x.py:f", str(tmp_path / "c"), "--compression",
                                    "gzip"]).exit_code  # fmt: skip
    assert code == 2  # still refused, by click, naming the choices


def test_compression_on_the_command_line_in_any_case(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("def f():\n    yield {'x': 1}\n")
    args = ["create", f"{tmp_path / 'p.py'}:f", str(tmp_path / "s"), "--compression", "LZ4"]
    result = CliRunner().invoke(cli, [*args, "--workers", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    assert snap.open(str(tmp_path / "s")).manifest.compression["codec"] == "lz4"
