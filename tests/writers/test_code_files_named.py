""" "Different pipeline code" names the files that differ: the manifest records the files the
code's fingerprint hashed (``pipeline.files``, paths relative to the pipeline's file), and a
create whose code differs says which were edited, are used now or no longer (it said "its
file, or a file of your own modules its code uses" whichever it was; found by a probe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snapshot_cli.writers.pipeline import files_changed


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _create(root: Path) -> tuple[int, str]:
    """``snap create`` in a process of its own, as from a shell: each imports the files as
    they are (this process keeps the modules it imported)."""
    done = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "prep.py:f", "out", "--inputs-from",
         "prep.py:items", "--workers", "0", "--quiet"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, done.stderr


PREP = "from helpers import scale\n{more}\ndef items():\n    return [1, 2]\n\n" \
       "def f(x):\n    yield {{'v': scale(x){extra}}}\n"  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"helpers.py": "def scale(x):\n    return x * 3\n"}, "(helpers.py edited)"),
        (
            {"helpers.py": "def scale(x):\n    return x * 3\n",
             "prep.py": PREP.format(more="# a comment\n", extra="")},
            "(prep.py edited; helpers.py edited)",
        ),
        (
            {"prep.py": PREP.format(more="from lib.more import one\n", extra=" + one()"),
             "lib/__init__.py": "", "lib/more.py": "def one():\n    return 1\n"},
            "(prep.py edited; lib/more.py now used",
        ),
    ],
)  # fmt: skip
def test_the_files_that_differ_are_named(tmp_path: Path, edit: dict[str, str], said: str) -> None:
    _tree(tmp_path, {"prep.py": PREP.format(more="", extra=""),
                     "helpers.py": "def scale(x):\n    return x * 2\n"})  # fmt: skip
    assert (made := _create(tmp_path))[0] == 0, made[1]
    recorded = json.loads((tmp_path / "out" / "manifest.json").read_text())["pipeline"]
    assert sorted(recorded["files"]) == ["helpers.py", "prep.py"]
    _tree(tmp_path, edit)
    code, stderr = _create(tmp_path)
    assert code == 1 and f"made with different pipeline code {said}" in stderr, stderr


def test_a_module_no_longer_used_is_named_and_a_record_of_none_says_what_it_did() -> None:
    then = {"prep.py": "a", "helpers.py": "b"}
    assert files_changed(then, {"prep.py": "c"}) == "prep.py edited; helpers.py no longer used"
    for old in (None, {}, {"prep.py": 3}, ["prep.py"]):  # (older snaps, or not ours)
        assert files_changed(old, {"prep.py": "c"}) == ""
    many = {f"m{i}.py": "x" for i in range(8)}
    assert files_changed(many, dict.fromkeys(many, "y")).endswith("m4.py edited; and 3 more")


SCRIPT = """
import sys
sys.path.insert(0, "lib")
import snapshot_cli as snap
import helpers


def f(x):  # (defined in the script: sent by value)
    yield {"v": helpers.scale(x)}


if __name__ == "__main__":
    try:
        snap.create(f, "out", inputs=[1, 2], progress=False)
    except snap.SnapshotExistsError as err:
        print(err)
"""


def test_a_function_sent_by_value_names_the_module_file_that_changed(tmp_path: Path) -> None:
    """A notebook's or script's function that uses a module of the user's: editing that
    module said only the generic "(for a function sent by value: its source or a value it
    uses ...)" (a probe), though a function sent by name named the file."""
    _tree(tmp_path, {"run.py": SCRIPT, "lib/helpers.py": "def scale(x):\n    return x * 2\n"})

    def run() -> str:
        done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=True)  # fmt: skip
        return done.stdout

    assert run() == ""
    recorded = json.loads((tmp_path / "out" / "manifest.json").read_text())["pipeline"]
    assert recorded["shipped"] == "by value" and list(recorded["files"]) == ["helpers.py"]
    _tree(tmp_path, {"lib/helpers.py": "def scale(x):\n    return x * 3\n"})
    assert "made with different pipeline code (helpers.py edited);" in run()
    _tree(
        tmp_path,
        {
            "lib/helpers.py": "def scale(x):\n    return x * 2\n",  # (as it was)
            "run.py": SCRIPT.replace("helpers.scale(x)", "helpers.scale(x) + 1"),
        },
    )
    said = run()  # (the function's own source: no file of the user's modules differs)
    assert "made with different pipeline code (its code changed);" in said, said
