"""snap's own modules are not the user's code: a by-value function naming ``snap.Batch``,
created twice in one process, was refused the second time as "different pipeline code"
(snap in an editable install, as ``make demo`` makes it, outside site-packages: the modules
of snap's the process had imported since counted in the function's identity)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from snapshot_cli.writers import codedeps

SCRIPT = """
import numpy as np, snapshot_cli as snap
def fn(start):
    return snap.Batch(id=np.arange(start, start + 3))
first = snap.create(fn, {out!r}, inputs=[0, 10], workers=0)
again = snap.create(fn, {out!r}, inputs=[0, 10], workers=0)
print(first.reused, again.reused)
"""


def test_a_function_naming_snap_is_up_to_date_when_created_again(tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"  # (a script's __main__: its function goes by value)
    script.write_text(textwrap.dedent(SCRIPT.format(out=str(tmp_path / "out"))))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["False", "True"]


def test_snaps_modules_are_never_the_users() -> None:
    assert codedeps.user_module_file("snapshot_cli") is None
    assert codedeps.user_module_file("snapshot_cli.writers.codedeps") is None
    assert codedeps.user_module_file(__name__) is not None  # (the suite's: a user's own)
