"""What keeps a PIPELINE file from being read is said as such (:mod:`.writers.importing`): a
directory this user may not enter (with its owner and mode, as ``--input`` says it; it was
"not found"), a loop of links, any other OS error by its errno; ``file://`` is taken as
OUTPUT and ``--input`` take it. And ``--input=-x.bin`` (a missing file) is no option."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli.cli import cli
from snapshot_cli.writers import importing
from tests.unprivileged import unprivileged

PIPE = "def f():\n    yield {'x': 1}\n"


def create(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["create", *args, "--workers", "0", "--quiet"])
    assert "Traceback" not in done.stderr
    return done.exit_code, done.stderr


def test_a_directory_this_user_may_not_enter() -> None:
    with unprivileged() as user:
        (user.home / "noenter").mkdir()
        (user.home / "noenter" / "p.py").write_text(PIPE)
        user.own(user.home / "noenter")
        user.chmod(user.home / "noenter", "000")
        try:
            done = user.run(["-m", "snapshot_cli", "create", "noenter/p.py:f", "out",
                             "--workers", "0", "--quiet"])  # fmt: skip
        finally:
            user.chmod(user.home / "noenter", "u+rwx")
        where = user.home / "noenter"
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert done.stderr.startswith(
            "snap: error: pipeline file 'noenter/p.py' cannot be read (from 'noenter/p.py:f'): "
        ), done.stderr
        assert (
            f"this user ({user.name}) may not enter {where} (its own, mode d---------)"
            in (done.stderr)
            and f"chmod u+x {where}" in done.stderr
        ), done.stderr


def test_a_loop_of_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    code, said = create("a.py:f", "out")
    assert code == 1 and "pipeline file 'a.py' cannot be read (from 'a.py:f')" in said
    assert "(ELOOP); the path has a loop of symbolic links" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE, errno.ENAMETOOLONG, errno.EACCES])
def test_any_other_error_by_its_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text(PIPE)
    real = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).endswith("/p.py"):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importing.os, "stat", stat)
    importing._loaded.clear()
    done, said = create("p.py:f", str(tmp_path / "out"))
    monkeypatch.undo()
    assert (
        done == 1
        and f"pipeline file 'p.py' cannot be read (from 'p.py:f'): {tmp_path}/p.py: " in said
    )
    assert f"{os.strerror(code)} ({errno.errorcode[code]})" in said, said


def test_a_directory_is_no_pipeline_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.py").mkdir()
    code, said = create("d.py:f", "out")
    assert code == 1 and "pipeline file 'd.py' is not a file (from 'd.py:f')" in said


def test_a_file_url(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(PIPE)
    code, said = create(f"file://{tmp_path}/p.py:f", str(tmp_path / "out"))
    assert code == 0, said
    assert (tmp_path / "out" / "manifest.json").exists()


def test_an_input_that_only_starts_with_a_dash_is_no_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text("def f(path):\n    yield {'x': 1}\n")
    code, said = create("p.py:f", "out", "--input=-x.bin")
    assert code == 1 and "--input '-x.bin' matched no files" in said
    assert "is an option" not in said
    for option in ("--overwrite", "--workers=2", "--quiet"):
        code, said = create("p.py:f", "out", f"--input={option}")
        assert code == 1 and f"({option} is an option: --input took it as its value" in said
