"""snap's warnings as a library user and a command's user see them: `snap: ` lines where
nothing configured logging, through the user's own handlers where something did, and one
`snap: warning:` line each from a command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import REPO, snap_subprocess

WARNS = """
import logging, os, sys
import numpy as np
import snapshot_cli as snap

def preprocess(item):
    yield {"x": np.full(2, item)}

if sys.argv[1:] == ["root"]:
    logging.basicConfig(format="app %(levelname)s %(name)s %(message)s")
elif sys.argv[1:] == ["snap"]:  # a handler on snap's logger only
    mine = logging.StreamHandler()
    mine.setFormatter(logging.Formatter("mine %(message)s"))
    logging.getLogger("snapshot_cli").addHandler(mine)
snap.create(preprocess, "out", inputs=[0, 1, 2, 3], inputs_per_task=1, workers=0)
os.remove(os.path.join("out", snap.open("out").shards[1].path))
snap.create(preprocess, "out", inputs=[0, 1, 2, 3], inputs_per_task=1, workers=0)
"""


@pytest.mark.parametrize(
    ("logging_set_up", "want"),
    [
        ("none", "snap: warning: "),
        ("root", "app WARNING snapshot_cli.writers.lost "),
        ("snap", "mine "),
    ],  # fmt: skip
)
def test_a_library_users_warnings_say_they_are_snaps(
    tmp_path: Path, logging_set_up: str, want: str
) -> None:
    """A script that never configured logging got snap's warnings from Python's last-resort
    handler, bare ("waiting for the writer lease of ...", "... missing or cut short"), with
    nothing saying they were snap's: they are "snap: warning: " lines now, as a command's
    are. A script that configured
    logging (the root logger's or snap's) gets them through its own handler, once."""
    (tmp_path / "warns.py").write_text(WARNS)
    res = subprocess.run(
        [sys.executable, "warns.py", logging_set_up],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "missing or cut short" in line]
    assert len(said) == 1, res.stderr
    assert said[0].startswith(f"{want}{tmp_path / 'out'}: 1 shard of version 1 missing"), said[0]


def test_a_commands_warnings_are_snap_warning_lines(tmp_path: Path) -> None:
    """README: snap's own warnings are one `snap: warning:` line each. Those snap logs (a
    shard missing, computed again) printed as `snap: ...`, like its notes: a script looking
    for the warnings missed them."""
    (tmp_path / "f.py").write_text(
        "def f(x):\n    return {'x': x}\ndef items():\n    return [0, 1, 2, 3]\n"
    )
    out = tmp_path / "out"
    spec = f"{tmp_path / 'f.py'}:f"
    common = ["create", spec, str(out), "--inputs-from", spec.replace(":f", ":items"),
              "--inputs-per-task", "1", "--workers", "0", "--quiet"]  # fmt: skip
    assert snap_subprocess(*common).returncode == 0
    os.remove(out / snap.open(out).shards[1].path)
    res = snap_subprocess(*common)
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "missing or cut short" in line]
    assert len(said) == 1 and said[0].startswith(f"snap: warning: {out}: 1 shard"), res.stderr
