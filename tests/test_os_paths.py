"""A ``..`` after a symbolic link names what the OS names (:mod:`snapshot_cli.os_paths`): with
``proj/lnk`` a link to ``../data/deep``, ``lnk/..`` is ``data`` to ``ls`` and ``open()``, and
snap read ``proj/raw/wrong.bin`` for ``--input 'lnk/../raw/*.bin'``, found no
``lnk/../raw/right.bin``, wrote OUTPUT ``lnk/../snapA`` to ``proj/snapA`` and found no
PIPELINE ``lnk/../prep2.py``. A path without such a ``..`` is as before: the same text, and
a snapshot made with it stays up to date."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.os_paths import absolute, resolved
from tests.conftest import REPO

PIPE = 'import os\ndef f(path):\n    yield {"n": os.path.getsize(path)}\n'


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for d in ("proj/raw", "data/deep", "data/raw"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "proj" / "lnk").symlink_to("../data/deep")
    (tmp_path / "proj" / "prep.py").write_text(PIPE)
    (tmp_path / "data" / "prep2.py").write_text(PIPE)
    (tmp_path / "data" / "raw" / "right.bin").write_bytes(b"RIGHT")
    (tmp_path / "proj" / "raw" / "wrong.bin").write_bytes(b"WRONG!")
    monkeypatch.chdir(tmp_path / "proj")
    return tmp_path


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli, [*args, "--workers", "0", "--quiet", "--json"])
    return done.exit_code, done.stdout, done.stderr


def records(snapshot: str) -> list[int]:
    """The sizes of the files the records were made from (right.bin 5, wrong.bin 6)."""
    done = CliRunner().invoke(cli, ["head", snapshot, "--json"])
    assert done.exit_code == 0, done.stderr
    return sorted(r["n"] for r in json.loads(done.stdout)["records"])


def test_resolved_goes_up_from_where_a_link_leads(proj: Path) -> None:
    data = str(proj / "data")
    assert resolved("lnk/..") == data == resolved("lnk/./..") == resolved("lnk//..")
    assert resolved("lnk/../raw/*.bin") == f"{data}/raw/*.bin"
    assert resolved(f"{proj}/proj/lnk/../..") == str(proj)
    assert absolute("lnk/../raw") == f"{data}/raw"
    # no link before a "..": as os.path.normpath, to the same text
    for path in ("raw/*.bin", "a/b/../c", "../x", "/..", "/a/../b", "", ".", "//a/../b",
                 "missing/../x", "lnk/", "a/*/../b", "./raw/../raw/x.bin"):  # fmt: skip
        want = os.path.normpath(path)  # (but "//" as "/": one name, see below)
        assert resolved(path) == (want[1:] if want.startswith("//") else want), path
    assert absolute("raw/../raw/x") == os.path.abspath("raw/../raw/x")


def test_inputs_output_and_pipeline_are_the_files_the_os_names(proj: Path) -> None:
    right = 5
    assert run("create", "prep.py:f", "out1", "--input", "lnk/../raw/*.bin")[0] == 0
    assert records("out1") == [right]
    assert run("create", "prep.py:f", "out2", "--input", "lnk/../raw/right.bin")[0] == 0
    assert records("out2") == [right]
    code, _, err = run("create", "prep.py:f", "lnk/../snapA", "--input", "raw/*.bin")
    assert code == 0, err
    assert (proj / "data" / "snapA" / "manifest.json").exists()
    assert not (proj / "proj" / "snapA").exists()
    done = CliRunner().invoke(cli, ["inspect", "lnk/../snapA", "--json"])
    assert done.exit_code == 0 and str(proj / "data" / "snapA") in done.stdout
    code, _, err = run("create", "lnk/../prep2.py:f", "out3", "--input", "raw/*.bin")
    assert code == 0, err


def test_a_plain_spelling_stays_up_to_date(proj: Path) -> None:
    """Names without a ``..`` after a link are recorded as before: the same create again is
    up to date, and so is one with a ``..`` after a plain directory (``raw/../raw``)."""
    assert run("create", "prep.py:f", "s", "--input", "raw/*.bin")[0] == 0
    for spelling in ("raw/*.bin", "./raw/*.bin", "raw/../raw/*.bin", f"{proj}/proj/raw/*.bin"):
        code, out, err = run("create", "prep.py:f", "s", "--input", spelling)
        assert code == 0 and json.loads(out)["reused"] is True, (spelling, out, err)
    assert records("s") == [6]


@given(st.lists(st.sampled_from(["", ".", "..", "a", "tmp", "x y"]), max_size=6))
def test_a_path_never_starts_with_two_slashes(parts: list[str]) -> None:
    """On Linux ``//tmp`` is ``/tmp``: one spelling, one input name."""
    for path in ("/".join(parts), "//" + "/".join(parts), "/".join(["", "", *parts])):
        out = resolved(path)
        assert not out.startswith("//"), (path, out)
        assert (
            os.path.normpath(out.lstrip("/")) == os.path.normpath(path.lstrip("/")) or ".." in path
        )


def test_relative_paths_from_the_root_directory_name_the_same_inputs(tmp_path: Path) -> None:
    """From ``/`` (a container's working directory) fsspec made ``tmp/x`` ``//tmp/x``: the
    same create with relative paths named every input anew (every task computed again) and
    the function was given ``//tmp/...``."""
    (tmp_path / "raw").mkdir()
    for i in range(3):
        (tmp_path / "raw" / f"{i}.txt").write_text("x" * i)
    (tmp_path / "p.py").write_text("def f(path):\n    yield {'path': path}\n")
    snapshot = tmp_path / "s"

    def create(*paths: Path, cwd: str) -> dict[str, object]:
        names = [str(p) if cwd != "/" else str(p).lstrip("/") for p in paths]
        cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{names[0]}:f", names[1],
               "--input", names[2], "--workers", "0", "--quiet", "--json"]  # fmt: skip
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)  # fmt: skip
        return json.loads(done.stdout)

    first = create(tmp_path / "p.py", snapshot, tmp_path / "raw" / "*.txt", cwd=str(tmp_path))
    again = create(tmp_path / "p.py", snapshot, tmp_path / "raw" / "*.txt", cwd="/")
    assert first["path"] == again["path"] == str(snapshot)
    assert again["reused"] is True
    loader = snap.open(snapshot).loader(3, shuffle=False)
    assert [str(p) for b in loader for p in b["path"]] == [
        str(tmp_path / "raw" / f"{i}.txt") for i in range(3)
    ]
