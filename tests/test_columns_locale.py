"""``--columns`` text the locale could not decode (``LC_ALL=C`` with ``légende``: Python
holds its bytes as lone surrogates): a usage error that says so, as ``--param`` gets, not
"unknown columns ['l\\udcc3\\udca9gende']"; no snapshot column can have such a name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.users import SOURCE


@pytest.mark.parametrize("command", ["head", "bench"])
def test_columns_not_valid_text_in_this_locale(tmp_path: Path, command: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SOURCE,
           "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}  # fmt: skip
    where = str(tmp_path / "nowhere")
    args: list[str | bytes] = [sys.executable, "-m", "snapshot_cli", command, where,
                               "--columns", "label,légende".encode()]  # fmt: skip
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert (
        "Invalid value for '--columns': 'label,l\\udcc3\\udca9gende' is not valid text in this "
        "locale (Python decoded the command line as ascii, and column names are UTF-8): set a "
        "UTF-8 locale (export LANG=C.UTF-8) or PYTHONUTF8=1 and run again"
    ) in done.stderr
    ok = subprocess.run([*args[:-1], "label"], env=env, capture_output=True, text=True,
                        check=False)  # fmt: skip
    assert ok.returncode == 1 and "Invalid value" not in ok.stderr  # (no snapshot there)
