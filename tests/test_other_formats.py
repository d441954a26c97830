"""Another tool's file or folder given as a snapshot is named as what it is, with what to do
("is a file, not a snapshot" said neither: a probe of users coming from Parquet, Arrow,
Hugging Face datasets, WebDataset and NumPy), by every reader and by gc, which removes
nothing of it."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.other_formats import ADVICE

TABLE = pa.table({"x": np.arange(5), "y": [str(i) for i in range(5)]})


def _stream(path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, TABLE.schema) as writer:
        writer.write_table(TABLE)


def _tar(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        data = b"\x00" * 10
        info = tarfile.TarInfo("000000.jpg")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("snap/manifest.json", "{}")


FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "data.parquet": (lambda p: pq.write_table(TABLE, p), "a Parquet file"),
    "data.feather": (lambda p: feather.write_feather(TABLE, p), "an Arrow IPC file (Feather v2)"),
    "data.arrow": (_stream, "an Arrow IPC stream"),
    "x.npy": (lambda p: np.save(p, np.arange(3)), "a NumPy .npy file"),
    "shard-000.tar": (_tar, "a tar archive (a WebDataset shard?)"),
    "snap.zip": (_zip, "a zip archive"),
}


def _hf(path: Path) -> None:
    path.mkdir()
    (path / "dataset_info.json").write_text("{}")
    (path / "state.json").write_text(json.dumps({"_data_files": []}))
    _stream(path / "data-00000-of-00001.arrow")


def _parquets(path: Path) -> None:
    path.mkdir()
    for k in range(3):
        pq.write_table(TABLE, path / f"part-{k}.parquet")


FOLDERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "hf": (_hf, "a Hugging Face datasets folder (save_to_disk)"),
    "parquets": (_parquets, "a folder of Parquet files"),
}


def _said(path: Path) -> list[str]:
    """What snap.open and each reading command say of ``path``."""
    out = []
    with pytest.raises(snap.ManifestError) as raised:
        snap.open(str(path))
    out.append(str(raised.value))
    for command in ("inspect", "head", "verify", "bench"):
        result = CliRunner().invoke(cli, [command, str(path)])
        assert result.exit_code == 1, (command, result.output)
        out.append(result.stderr)
    return out


@pytest.mark.parametrize("name", sorted(FILES))
def test_another_tools_file_is_named_as_what_it_is(tmp_path: Path, name: str) -> None:
    make, kind = FILES[name]
    path = tmp_path / name
    make(path)
    before = path.read_bytes()
    for said in _said(path):
        assert f"{path} is {kind}" in said and "not a snapshot" in said, said
        assert " ".join(ADVICE.split()[:6]) in said
    gc = CliRunner().invoke(cli, ["gc", str(path)])
    assert gc.exit_code == 1 and f"is {kind}, not a snapshot" in gc.stderr, gc.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_another_tools_folder_is_named_as_what_it_is(tmp_path: Path, name: str) -> None:
    make, kind = FOLDERS[name]
    path = tmp_path / name
    make(path)
    before = sorted((p.name, p.read_bytes()) for p in path.iterdir())
    for said in _said(path):
        assert f"{path} is {kind}, not a snapshot (no manifest.json)" in said, said
    for extra in (["--dry-run"], []):
        assert CliRunner().invoke(cli, ["gc", str(path), *extra]).exit_code == 1
    assert sorted((p.name, p.read_bytes()) for p in path.iterdir()) == before


def test_a_file_of_no_known_format_is_said_as_before(tmp_path: Path) -> None:
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    (said,) = _said(path)[:1]
    assert said == f"{path} is a file, not a snapshot (a directory with a manifest.json)"
