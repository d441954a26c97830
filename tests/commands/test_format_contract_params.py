"""``--param`` items that are no ``KEY=VALUE`` are usage errors (exit 2, click's usage
answer), as other badly formed option values are; they exited 1. A well-formed param whose
value does not fit the function stays a snap error (exit 1). Python's ``parse_params`` keeps
raising OptionError with the same text."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_cli.errors import OptionError
from snapshot_cli.writers.params import parse_params
from tests.commands.conftest import run

PIPELINE = """
def f(path, size: int = 1, name=None):
    yield {"x": size}
"""


@pytest.fixture
def spec(tmp_path: Path) -> str:
    (tmp_path / "p.py").write_text(PIPELINE)
    (tmp_path / "in.txt").write_text("x")
    return str(tmp_path / "p.py") + ":f"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["noeq"], "--param 'noeq' must look like KEY=VALUE with KEY a Python name"),
        (["=5"], "--param '=5' must look like KEY=VALUE with KEY a Python name"),
        ([" =5"], "--param ' =5' must look like KEY=VALUE with KEY a Python name"),
        (["a b=1"], "--param 'a b=1' must look like KEY=VALUE with KEY a Python name"),
        (["1x=1"], "--param '1x=1' must look like KEY=VALUE with KEY a Python name"),
        (["size=2", "size=3"], "--param size is given twice; give each parameter once"),
        (["size=2", "oops"], "--param 'oops' must look like KEY=VALUE"),
    ],
)
def test_a_malformed_param_is_a_usage_error(
    spec: str, tmp_path: Path, params: list[str], message: str
) -> None:
    args = [a for p in params for a in ("--param", p)]
    out = tmp_path / "s"
    code, stdout, stderr = run("create", spec, str(out), "--input", str(tmp_path / "in.txt"),
                               "--workers", "0", *args)  # fmt: skip
    assert code == 2, stderr
    assert f"Error: {message}" in stderr and "Usage: " in stderr
    assert "snap: error:" not in stderr and stdout == ""
    assert not out.exists()
    with pytest.raises(OptionError) as caught:  # the library's answer is unchanged
        parse_params(params)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("size=big", "--param size='big': f() annotates size as int; give an integer"),
        ("size=nan", "--param size='nan': f() annotates size as int"),
        ("name=" + "1" * 5000, "--param name:"),  # an integer over 4,300 digits
    ],
)
def test_a_well_formed_param_with_a_bad_value_stays_exit_1(
    spec: str, tmp_path: Path, param: str, message: str
) -> None:
    code, _, stderr = run("create", spec, str(tmp_path / "s"), "--input",
                          str(tmp_path / "in.txt"), "--workers", "0", "--param", param)  # fmt: skip
    assert code == 1 and f"snap: error: {message}" in stderr, stderr


def test_well_formed_params_run(spec: str, tmp_path: Path) -> None:
    code, _, stderr = run("create", spec, str(tmp_path / "s"), "--input",
                          str(tmp_path / "in.txt"), "--workers", "0", "--param", " size = 4",
                          "--param", "name=")  # fmt: skip
    assert code == 0, stderr
