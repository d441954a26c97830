"""A Ctrl-C while ``snap`` loads its modules (before any command runs: click, the command
group, ~40 ms) is one line and exit 130, as in a command; it was Python's traceback of the
import it cut (found by a probe of `timeout -s INT 0.05 snap inspect`). The interrupt is
raised where that import would be (an import hook), as a Ctrl-C lands there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CUT = """
import sys

class Cut:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1]:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Cut())
from snapshot_cli.entry import main
sys.argv[1:] = ["inspect", "nowhere"]
main()
"""


@pytest.mark.parametrize("module", ["click", "snapshot_cli.cli", "snapshot_cli.render"])
def test_a_ctrl_c_while_the_commands_load_is_one_line(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", CUT, module], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stderr, done.stdout) == (130, "snap: interrupted\n", "")


def test_the_programs_start_there() -> None:
    text = (Path(REPO) / "pyproject.toml").read_text()  # (tomllib: Python 3.11 and later)
    scripts = text.split("[project.scripts]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert scripts == [
        'snap = "snapshot_cli.entry:main"',
        'snapshot-cli = "snapshot_cli.entry:main"',
    ]
    main = (Path(REPO) / "snapshot_cli" / "__main__.py").read_text()
    assert "from snapshot_cli.entry import main" in main
