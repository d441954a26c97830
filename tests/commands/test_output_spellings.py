"""OUTPUT spelled as a local URL or with a ``~user``, the same for every command
(:func:`snapshot_cli.os_paths.local_path` says what each spelling names).

- ``file:v2``, ``file://v2``, ``local:v2`` are ``./v2``, as fsspec reads them; a pipeline
  that changes directory as it is imported made ``snap create`` write them under the
  pipeline's directory, where ``inspect`` and the others, run from the same directory, found
  nothing (a plain ``v2`` was already taken from where the command started).
- ``~nouser/s``, ``~nouser`` no user of this machine: ``fsspec`` left it unexpanded and every
  command took it as a relative path, so ``create`` made ``./~nouser/s``. It is an error
  naming it now, in each command, and nothing is made; ``./~nouser/s`` names such a
  directory.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from tests.commands.conftest import run, run_json

NOUSER = "snap-no-such-user"
READERS = ("inspect", "head", "verify", "gc")
STAYS = 'def f(x):\n    yield {"x": x}\n\ndef items():\n    return [1, 2, 3]\n'
MOVES = "import os\nos.chdir(os.path.dirname(os.path.abspath(__file__)))\n" + STAYS


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The working directory, with the pipelines in ``code/``."""
    (tmp_path / "work" / "code").mkdir(parents=True)
    (tmp_path / "work" / "code" / "stays.py").write_text(STAYS)
    (tmp_path / "work" / "code" / "moves.py").write_text(MOVES)
    monkeypatch.chdir(tmp_path / "work")
    yield tmp_path / "work"


def create(work: Path, pipeline: str, output: str, *more: str) -> tuple[int, str, str]:
    spec = f"code/{pipeline}.py"
    done = run("create", f"{spec}:f", output, "--inputs-from", f"{spec}:items",
               "--workers", "0", "--quiet", *more)  # fmt: skip
    os.chdir(work)  # (each command starts in the user's directory; a pipeline moved this one)
    return done


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in str(p))


@pytest.mark.parametrize("pipeline", ["stays", "moves"])
@pytest.mark.parametrize("spelling", ["file:v2", "file://v2", "local:v2"])
def test_a_local_url_without_a_root_is_relative_to_where_each_command_starts(
    work: Path, spelling: str, pipeline: str
) -> None:
    code, _, stderr = create(work, pipeline, spelling)
    assert code == 0, stderr
    assert sorted(os.listdir(work)) == ["code", "v2"]  # not code/v2, nor ./file:v2
    assert "v2" not in os.listdir(work / "code")
    for command in READERS:
        assert run_json(command, spelling)["path"] == str(work / "v2"), command
    opened = snap.open(spelling)
    assert opened.num_records == 3 and opened.url == str(work / "v2")
    for again in ("v2", spelling):  # one snapshot, however it is spelled
        code, stdout, stderr = create(work, pipeline, again, "--json")
        assert (code, json.loads(stdout)["reused"]) == (0, True), stderr


@pytest.fixture
def nouser() -> str:
    try:
        pwd.getpwnam(NOUSER)
    except KeyError:
        return NOUSER
    pytest.skip(f"this machine has a user {NOUSER}")


def said(spelling: str, path: str) -> str:
    return (
        f"{spelling!r} starts with '~{NOUSER}', but there is no user '{NOUSER}' on this "
        f"machine, so '~{NOUSER}' names no home directory: give the path meant (an absolute "
        f"one, or ~/... for your own home), or ./{path} for a directory really named "
        f"'~{NOUSER}'"
    )


@pytest.mark.parametrize("pipeline", ["stays", "moves"])
@pytest.mark.parametrize("scheme", ["", "file:", "file://"])
def test_a_home_of_no_user_is_an_error_naming_it_in_every_command(
    work: Path, nouser: str, scheme: str, pipeline: str
) -> None:
    spelling = f"{scheme}~{nouser}/s"
    code, stdout, stderr = create(work, pipeline, spelling)
    assert (code, stdout, stderr) == (1, "", f"snap: error: {said(spelling, f'~{nouser}/s')}\n")
    for command in READERS:
        assert run(command, spelling) == (1, "", f"snap: error: {said(spelling, f'~{nouser}/s')}\n")
    with pytest.raises(OptionError) as caught:
        snap.open(spelling)
    assert str(caught.value) == said(spelling, f"~{nouser}/s")
    assert tree(work) == ["code", "code/moves.py", "code/stays.py"]  # nothing made anywhere


def test_a_directory_named_like_a_home_is_given_from_dot(work: Path, nouser: str) -> None:
    code, _, stderr = create(work, "stays", f"./~{nouser}/s")
    assert code == 0, stderr
    assert (work / f"~{nouser}" / "s").is_dir()
    for command in READERS:
        assert run_json(command, f"./~{nouser}/s")["path"] == str(work / f"~{nouser}" / "s")


def test_a_tilde_where_this_user_has_no_home_is_said_so(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME unset and no entry in the password database (a container's uid): ``~`` stays."""
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)
    code, _, stderr = run("inspect", "~/s")
    assert code == 1
    assert stderr == (
        "snap: error: '~/s' starts with '~', but this user has no home directory (HOME is not "
        "set, and the user is not in the password database), so '~' names no home directory: "
        "give the path meant (an absolute one, or ~/... for your own home), or ./~/s for a "
        "directory really named '~'\n"
    )
    assert tree(work) == ["code", "code/moves.py", "code/stays.py"]
