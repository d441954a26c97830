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
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli import render
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


@given(st.lists(st.text(st.sampled_from("a名🙂\u0301\u200bé"), min_size=1, max_size=8),
                min_size=1, max_size=5))  # fmt: skip
def test_names_of_wide_characters_keep_the_values_in_line(keys: list[str]) -> None:
    """``snap head`` and ``inspect`` padded names by ``len``: a column ``名前🙂`` (6 columns
    on a terminal, 3 characters) pushed its value 3 columns out of line."""
    lines = render.table([(k, "V") for k in keys])
    starts = {render.shown_width(line[: line.rindex("V")]) for line in lines}
    assert len(starts) == 1, lines
    assert render.shown_width("名前🙂") == 6 and render.shown_width("e\u0301\u200b") == 1


def test_inspect_shows_params_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``params {"s": "caf\\u00e9 \\u65e5\\u672c"}``: JSON's ASCII escapes, where the error
    of a changed param showed ``'café 日本'`` (found by a probe)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text("def prep(path, s='', größe=0):\n    return [{'n': 1}]\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.bin").write_bytes(b"abc")
    runner = CliRunner()
    made = runner.invoke(cli, ["create", "p.py:prep", "out", "--input", "in/*.bin", "--quiet",
                               "--param", "s=café 日本\u2028!", "--param", "größe=3"])  # fmt: skip
    assert made.exit_code == 0, made.output
    shown = runner.invoke(cli, ["inspect", "out"]).output.splitlines()
    row = next(line for line in shown if line.startswith("params"))
    assert row.split(None, 1)[1] == '{"s": "café 日本\\u2028!", "größe": 3}'  # (one line)
    assert json.loads(row.split(None, 1)[1]) == {"s": "café 日本\u2028!", "größe": 3}


@given(st.dictionaries(st.text(max_size=6), st.text(max_size=12), max_size=4))
def test_the_params_row_is_one_line_of_json_for_any_text(params: dict[str, str]) -> None:
    text = render._readable_json(params)
    assert json.loads(text) == params
    assert len(text.splitlines()) == 1 and "\u2028" not in text and "\u2029" not in text
