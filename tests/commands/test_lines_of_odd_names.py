"""Every command's text output keeps one line per line whatever the names it shows hold: a
snapshot named with a newline or a tab (a path is any bytes but NUL and ``/``) split
``inspect``'s ``snapshot`` row, ``verify``'s and ``gc``'s verdicts and ``create``'s result
in two, while input names were escaped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli.cli import cli

PIPELINE = "def prep(path):\n    return [{'n': len(path)}]\n"


@pytest.mark.parametrize("sep", ["\n", "\t", "\r\n", "\x0b", "\x0c", "\x1c", "\x85"])
def test_each_command_shows_an_odd_name_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sep: str
) -> None:
    odd = f"left{sep}right"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text(PIPELINE)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.bin").write_bytes(b"abc")
    runner = CliRunner()
    out = os.path.join(str(tmp_path), odd)
    shown: dict[str, str] = {}
    for args in (
        ["create", "p.py:prep", out, "--input", "in/*.bin", "--quiet"],
        ["inspect", out],
        ["inspect", out, "--shards"],
        ["head", out, "-n", "1"],
        ["verify", out],
        ["gc", out, "--dry-run"],
        ["create", "p.py:prep", out, "--input", "in/*.bin", "--quiet"],  # up to date
    ):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, (args, res.output)
        shown[args[0] + str(len(shown))] = res.stdout
        lines = res.stdout.split("\n")  # (the lines a terminal or `wc -l` sees)
        assert all("left" in line for line in lines if "right" in line), (args, res.stdout)
        assert all("\r" not in line and sep not in line for line in lines), (args, res.stdout)
    assert all("right" in text for cmd, text in shown.items() if cmd != "head3"), shown
    first_rows = shown["inspect1"].split("\n")
    assert first_rows[0].startswith("snapshot") and first_rows[1].startswith("fingerprint")
    doc = json.loads(runner.invoke(cli, ["inspect", out, "--json"]).stdout)
    assert doc["path"] == out  # (JSON keeps the name as it is)
