"""``--json`` under a locale that is not UTF-8 (``LC_ALL=C PYTHONUTF8=0``, as a minimal
container has): Python decodes a path's bytes with lone surrogates, and JSON gave them as
``"\\udcc3\\udcbc"`` for ``ü``, which jq showed as garbage and strict parsers refuse (a CLI
probe). Every command's JSON now holds the path as its bytes read as UTF-8, and bytes that
are no UTF-8 as ``\\xff`` text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import REPO

PIPE = "def f(i):\n    yield {'i': i}\n\ndef items():\n    return [1, 2]\n"


def c_locale(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """``python -m snapshot_cli ARGS`` under ``LC_ALL=C PYTHONUTF8=0`` (paths as bytes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "snapshot_cli", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "shown"), [(b"\xc3\xbcn\xc3\xaf", "ünï"), (b"bad\xff", "bad\\xff")],
    ids=["utf-8", "not utf-8"],
)  # fmt: skip
def test_every_commands_json_is_utf8_text_in_any_locale(
    tmp_path: Path, name: bytes, shown: str
) -> None:
    (tmp_path / "p.py").write_text(PIPE)
    where = os.fsencode(tmp_path) + b"/" + name
    os.mkdir(where)
    # (made at a plain path, then moved: no name with surrogates in this process's logs,
    # which pytest-xdist's workers cannot send)
    snap.create(lambda i: [{"i": i}], str(tmp_path / "plain"), inputs=[1, 2], workers=0)
    os.rename(os.fsencode(tmp_path / "plain"), where + b"/s")
    raw_out = where + b"/s"
    made = c_locale("create", "p.py:f", where + b"/t", "--inputs-from", "p.py:items",
                    "--workers", "0", "--json", cwd=tmp_path)  # fmt: skip
    runs = {"create": made}
    for command in ("inspect", "head", "verify", "bench", "gc"):
        extra = ["--epochs", "1"] if command == "bench" else []
        runs[command] = c_locale(command, raw_out, *extra, "--json", cwd=tmp_path)
    for command, done in runs.items():
        assert done.returncode == 0, (command, done.stderr)
        text = done.stdout.decode("utf-8")  # (strict: no lone surrogate, no stray byte)
        doc = json.loads(text)
        assert f"{tmp_path}/{shown}/" in doc["path"], (command, doc["path"])
        text.encode("utf-8")
