"""The shard cache names its directory the way the caller gave it: ``--cache-dir`` and
``--cache-limit`` in a ``snap`` command, ``cache_dir`` and ``cache_limit`` in Python. Its
faults and warnings are said in the loader's threads (and decode processes), which cannot
tell a command from Python: a ``snap bench --cache-dir`` was told to "choose another
cache_dir", an option it does not have."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli import console
from snapshot_cli.cli import cli
from snapshot_cli.errors import StorageError
from snapshot_cli.readers import cache_faults

URL = "memory://cache-named/snap"


def _records(i: int) -> Any:
    for k in range(4):
        yield {"n": np.int64(i * 4 + k), "x": np.full(3000, k, np.uint8)}


@pytest.fixture
def remote(memfs: Any) -> str:  # noqa: ARG001 (emptied around the test)
    snap.create(_records, URL, inputs=range(6), workers=0, compression="none")
    return URL


def _read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of a cache entry fails as on a read-only filesystem (the loader itself
    writes nothing with pwrite: only the cache does)."""

    def failing(*args: Any) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "pwrite", failing)


def test_a_commands_cache_fault_names_its_flag(
    remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _read_only(monkeypatch)
    cache = tmp_path / "c"
    result = CliRunner().invoke(cli, ["bench", remote, "--epochs", "1", "--cache-dir", str(cache)])
    assert result.exit_code == 1, result.output
    said = result.output.strip().splitlines()[-1]
    assert said.startswith(f"snap: error: --cache-dir {cache}: Read-only file system (EROFS)")
    assert said.endswith("the filesystem is read-only: choose another --cache-dir (or none)")
    assert "cache_dir" not in said and "cache_limit" not in said


def test_the_same_fault_in_python_names_the_keyword(
    remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _read_only(monkeypatch)
    with (
        pytest.raises(StorageError) as raised,
        snap.open(remote).loader(4, epochs=1, cache_dir=tmp_path / "c") as loader,
    ):
        list(loader)
    said = str(raised.value)
    assert said.startswith(f"cache_dir {tmp_path / 'c'}: Read-only file system (EROFS)")
    assert said.endswith("choose another cache_dir (or none)") and "--" not in said


def test_a_commands_limit_warning_names_its_flags(
    remote: str, tmp_path: Path, write_pipeline: Any
) -> None:
    """On the command's own stderr as a ``snap: warning:`` line: outside ``create`` it read
    ``snap: snapshot_cli: ...``, and after a create run in the same process (CliRunner, a
    notebook) it went to that create's stderr, closed since."""
    pipeline = write_pipeline("def preprocess(path):\n    yield {'n': len(path)}\n")
    (tmp_path / "in.txt").write_text("1")
    made = CliRunner().invoke(cli, ["create", pipeline, str(tmp_path / "local"), "--input",
                                    str(tmp_path / "in.txt")])  # fmt: skip
    assert made.exit_code == 0, made.output
    cache = tmp_path / "c"
    args = ["bench", remote, "--epochs", "1", "--cache-dir", str(cache), "--cache-limit", "1KiB"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if " has no room " in line]
    assert len(said) == 1 and "snapshot_cli" not in result.stderr, result.stderr
    assert said[0].startswith(f"snap: warning: --cache-dir {cache} has no room in its ")
    assert "--cache-limit of 1.0 KiB for more of the shards" in said[0]
    assert said[0].endswith("a --cache-limit above the snapshot's size keeps them all")


@pytest.mark.parametrize("code", sorted({*cache_faults.HINTED, errno.ENXIO}))
@pytest.mark.parametrize("in_command", [False, True])
def test_every_hint_names_the_option_as_given(code: int, in_command: bool) -> None:
    with console.command() if in_command else contextlib.nullcontext():
        option = cache_faults.option_name()
    assert option == ("--cache-dir" if in_command else "cache_dir")
    said = cache_faults.hint(code, option)
    other, limit = ("cache_dir", "cache_limit") if in_command else ("--cache-dir", "--cache-limit")
    assert option in said and other not in said and limit not in said, said


@pytest.mark.parametrize("url", ["gs://b/c", "memory://c", "hdfs://nn/c"])
def test_a_url_for_the_cache_dir_is_a_usage_error(url: str) -> None:
    result = CliRunner().invoke(cli, ["bench", "/nowhere", "--cache-dir", url])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--cache-dir': the cache is this machine's disk" in result.output
    assert repr(url) in result.output
