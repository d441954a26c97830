"""What a pipeline prints in a worker process is written as the command writes it.

The command's own streams were made forgiving (a path that is not UTF-8 written as its
bytes, a character the encoding lacks escaped); a worker's were not: its ``sys.stdout``
(pointed at stderr) kept Python's ``strict``, and a module-level ``print("loading café")``
under ``PYTHONIOENCODING=ascii`` or ``LC_ALL=C`` failed the pipeline's import with a
UnicodeEncodeError in workers only (``--workers 0`` worked). Now a worker's streams are set
up as the command's are, and a line reads the same whichever process printed it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPE = """
import os
import sys

print("loading café")


def g(path):
    print("reading", path)
    print("to stderr …", file=sys.stderr)
    yield {"n": os.path.getsize(path)}
"""
LOCALES = {
    "ascii": {"PYTHONIOENCODING": "ascii"},
    "c": {"LC_ALL": "C", "PYTHONUTF8": "0"},
    "utf8": {"LC_ALL": "C.UTF-8"},
}


def printed(tmp_path: Path, env: dict[str, str], workers: int) -> list[bytes]:
    """The pipeline's lines on the stderr of ``snap create`` (status 0 asserted), each once
    (with workers, both the command and the worker import the pipeline)."""
    out = tmp_path / f"s{workers}"
    base = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_CTYPE", "PYTHONUTF8")}
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "r.py:g", str(out), "--input",
         "raw/*", "--workers", str(workers), "--quiet"],
        cwd=tmp_path, env={**base, **env}, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert res.stdout.startswith(b"created: ")  # (the prints went to stderr)
    return sorted({line for line in res.stderr.splitlines() if not line.startswith(b"snap: ")})


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_a_workers_prints_are_the_commands(tmp_path: Path, locale: str) -> None:
    (tmp_path / "r.py").write_text(PIPE, encoding="utf-8")
    (tmp_path / "raw").mkdir()
    with open(os.path.join(os.fsencode(tmp_path), b"raw", b"caf\xc3\xa9 \xff.bin"), "wb") as f:
        f.write(b"12")
    env = LOCALES[locale]
    in_worker = printed(tmp_path, env, workers=1)
    assert in_worker == printed(tmp_path, env, workers=0)
    name = os.path.join(os.fsencode(tmp_path), b"raw", b"caf\xc3\xa9 \xff.bin")
    assert in_worker == sorted([b"loading caf\xc3\xa9", b"reading " + name, "to stderr …".encode()])
