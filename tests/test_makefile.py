"""``make demo``'s venv on a Python that cannot make it: a Python older than snap needs is
refused before a venv is made, and a venv whose making failed is removed. Both were kept,
and every later ``make demo`` (with another PYTHON, or after ``apt install python3-venv``)
failed as the first did, saying nothing of the venv (an install probe)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _make(tmp_path: Path, python: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(REPO), "demo", f"PYTHON={python}", f"VENV={tmp_path / 'venv'}",
         f"DEMO_DIR={tmp_path / 'demo'}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text(f'#!/bin/sh\n{body}\nexec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_a_python_older_than_3_10_is_refused_before_a_venv_is_made(tmp_path: Path) -> None:
    old = _fake_python(tmp_path, 'case "$2" in *version_info*) exit 1;; esac\n'
                                 '[ "$1" = -V ] && { echo "Python 3.9.18"; exit 0; }')  # fmt: skip
    done = _make(tmp_path, old)
    assert done.returncode != 0
    assert (
        f"make: snap needs Python 3.10 or newer; {old} is Python 3.9.18: give another, e.g. "
        "make demo PYTHON=python3.11"
    ) in done.stderr
    assert not (tmp_path / "venv").exists()


def test_a_venv_whose_making_failed_is_removed(tmp_path: Path) -> None:
    broken = _fake_python(  # as Debian's python3 without python3-venv: a venv half made
        tmp_path,
        'if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; '
        'echo "ensurepip is not available" >&2; exit 1; fi',
    )
    done = _make(tmp_path, broken)
    assert done.returncode != 0
    assert "(on Debian and Ubuntu: apt install python3-venv);" in done.stderr
    assert not (tmp_path / "venv").exists()
