"""A ``..`` after a symbolic link names what the OS names (:mod:`snapshot_cli.os_paths`): with
``proj/lnk`` a link to ``../data/deep``, ``lnk/..`` is ``data`` to ``ls`` and ``open()``, and
snap read ``proj/raw/wrong.bin`` for ``--input 'lnk/../raw/*.bin'``, found no
``lnk/../raw/right.bin``, wrote OUTPUT ``lnk/../snapA`` to ``proj/snapA`` and found no
PIPELINE ``lnk/../prep2.py``. A path without such a ``..`` is as before: the same text, and
a snapshot made with it stays up to date."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli.cli import cli
from snapshot_cli.os_paths import absolute, resolved

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
        assert resolved(path) == os.path.normpath(path), path
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
