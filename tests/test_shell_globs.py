"""An ``--input`` pattern the shell expanded: the usage error names the ``--input`` value the
extra files follow (the first file of that pattern), not the last ``--input`` given:
``--input img-0000*.bin --input 'nomatch*.bin'`` said "--input took only the first
(nomatch*.bin)"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli.cli import cli
from snapshot_cli.cli_types import expanded_inputs


@pytest.mark.parametrize(
    ("args", "extra", "found"),
    [
        (["p:f", "out", "--input", "a0", "a1", "a2", "--input", "b*"], ["a1", "a2"], ["a0"]),
        (["p:f", "out", "--input", "a0", "a1", "--input", "b0", "b1"], ["a1", "b1"], ["a0", "b0"]),
        (["--input=a0", "a1", "p:f", "out"], ["a1"], ["a0"]),
        # the files after the first taken as PIPELINE and OUTPUT, the rest left over
        (["--input", "a0", "a1", "a2", "a3", "p:f", "out"], ["a3", "p:f", "out"], ["a0"]),
        # another option between: those are not the pattern's files
        (["p:f", "out", "--input", "a0", "--param", "k=1", "x"], ["x"], []),
        (["p:f", "out", "x", "--input", "a0"], ["x"], []),
    ],
)
def test_the_input_the_extra_files_follow(
    args: list[str], extra: list[str], found: list[str]
) -> None:
    assert expanded_inputs(args, extra) == found


def test_the_usage_error_names_that_input(tmp_path: Path) -> None:
    for name in ("img-00000.bin", "img-00001.bin", "img-00002.bin", "other-0.bin", "other-1.bin"):
        (tmp_path / name).write_bytes(b"x")
    pipe = tmp_path / "pipe.py"
    pipe.write_text("def f(path):\n    return [{'x': 1}]\n")
    line = f"{sys.executable} -m snapshot_cli create {pipe}:f s --input img-0000*.bin --input "
    for tail, named in (
        ("'nomatch*.bin'", "--input took only the first (img-00000.bin); quote"),
        ("other-*.bin", "--input took only the first of each (img-00000.bin, other-0.bin);"),
    ):
        done = subprocess.run(["bash", "-c", line + tail], cwd=tmp_path, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert done.returncode == 2 and named in done.stderr, done.stderr
        assert "nomatch" not in done.stderr.split("Error: ")[1]
        assert not (tmp_path / "s").exists()
    extra = CliRunner().invoke(cli, ["create", f"{pipe}:f", "s", "--input", "a", "b", "c"])
    assert extra.exit_code == 2 and "Got unexpected extra arguments (b c)\n" in extra.stderr
