"""A task's 10,000th shard (a huge task, or a small ``--shard-size``) and a snapshot's
100,000th task have names wider than the padding (``<run>-<task:05d>-<seq:04d>``): they were
no snapshot's files to ``--input`` globs and to gc, so ``--input 'data/**'`` over a directory
holding such a snapshot fed its shards to the pipeline, and gc never removed them (a scale
probe's finding). Names are made here as a writer that far makes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli import layout
from snapshot_cli.cli import cli

PIPELINE = "def prep(path):\n    return [{'name': path.rsplit('/', 1)[-1]}]\n"


def _snapshot(tmp_path: Path, out: Path) -> dict[str, object]:
    (tmp_path / "p.py").write_text(PIPELINE)
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    (raw / "r.bin").write_bytes(b"r")
    res = CliRunner().invoke(cli, ["create", str(tmp_path / "p.py:prep"), str(out),
                                   "--input", str(raw / "*.bin"), "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads((out / "manifest.json").read_text())


def _wide_copy(out: Path, manifest: dict[str, object], task: int, seq: int) -> Path:
    """A copy of the snapshot's shard under the name its writer gives shard ``seq`` of
    ``task``."""
    shard = manifest["shards"][0]["path"]  # type: ignore[index]
    run, _, _, writer = Path(shard).stem.split("-")
    wide = out / layout.shard_path(run, task, seq, int(writer))
    shutil.copyfile(out / shard, wide)
    return wide


@pytest.mark.parametrize(("task", "seq"), [(0, 10_000), (0, 123_456), (100_000, 0)])
def test_an_input_glob_leaves_out_every_shard_of_another_snapshot(
    tmp_path: Path, task: int, seq: int
) -> None:
    data = tmp_path / "data"
    old = data / "old"
    wide = _wide_copy(old, _snapshot(tmp_path, old), task, seq)
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(b"x")
    res = CliRunner().invoke(cli, ["create", str(tmp_path / "p.py:prep"), str(tmp_path / "new"),
                                   "--input", str(data / "**"), "--quiet", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["num_records"] == 3, wide.name
    head = CliRunner().invoke(cli, ["head", str(tmp_path / "new"), "-n", "10", "--json"])
    names = sorted(r["name"] for r in json.loads(head.stdout)["records"])
    assert names == ["f0.bin", "f1.bin", "f2.bin"]


@pytest.mark.parametrize(("task", "seq"), [(0, 10_000), (100_000, 12_345)])
def test_gc_removes_a_shard_no_version_lists_whatever_its_numbers(
    tmp_path: Path, task: int, seq: int
) -> None:
    out = tmp_path / "s"
    wide = _wide_copy(out, _snapshot(tmp_path, out), task, seq)
    res = CliRunner().invoke(cli, ["gc", str(out), "--retention", "0", "--json"])
    assert res.exit_code == 0, res.output
    removed = [item["path"] for item in json.loads(res.stdout)["removed"]]
    assert any(p.endswith(wide.name) for p in removed), removed
    assert not wide.exists()
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0
