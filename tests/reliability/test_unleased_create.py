"""A create that fails before it holds the writer lease (its first lease file could not be
written: a name too long for the cwd it runs in, a read-only or full disk, an I/O error)
leaves nothing it made: it left ``OUTPUT/_runs/``, which ``snap gc`` then refused ("is not a
snapshot ... gc removes nothing there"). Injected at each call that writes the lease."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from tests.reliability.test_syscall_faults_writes import ERRNOS, Faults

# Each call of writing the first lease: OUTPUT/_runs/ made, the lease's temporary file opened
# (where a long cwd says ENAMETOOLONG), its hard link to lease-00000000.json
SITES = [("mkdir", "_runs"), ("open", ".lease-"), ("link", "lease-")]
CODES = [*ERRNOS, "ENAMETOOLONG"]
PIPE = "def f(x):\n    return [{'x': x}]\n\ndef items():\n    return [1, 2]\n"


def create(how: str, tmp: Path, output: Path) -> str:
    """The create's error text (it must fail)."""
    if how == "python":
        with pytest.raises(snap.SnapError) as caught:
            snap.create(lambda x: [{"x": x}], str(output), inputs=[1, 2], workers=0)
        return str(caught.value)
    (tmp / "pipe.py").write_text(PIPE)
    command = ["create", f"{tmp}/pipe.py:f", str(output), "--inputs-from", f"{tmp}/pipe.py:items",
               "--workers", "0", "--quiet"]  # fmt: skip
    done = CliRunner().invoke(cli, command)
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    return done.output


@pytest.mark.parametrize("how", ["cli", "python"])
@pytest.mark.parametrize("name", CODES)
@pytest.mark.parametrize(("call", "part"), SITES, ids=[s[0] for s in SITES])
def test_a_create_that_could_not_write_its_lease_leaves_nothing_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, name: str, call: str, part: str
) -> None:
    out = tmp_path / "new" / "deeper" / "out"  # (its parents made too)
    Faults(monkeypatch, tmp_path).inject(call, getattr(errno, name), times=None, part=part)
    text = create(how, tmp_path, out)
    assert f"({name})" in text or os.strerror(getattr(errno, name)) in text, text
    assert not (tmp_path / "new").exists(), sorted(map(str, tmp_path.rglob("*")))


@pytest.mark.parametrize("how", ["cli", "python"])
@pytest.mark.parametrize("name", ["ENAMETOOLONG", "EROFS", "EIO"])
def test_an_output_that_was_there_stays_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, name: str
) -> None:
    """The user's own (empty) OUTPUT stays, empty; one with an empty _runs/ keeps it."""
    mine, kept = tmp_path / "mine", tmp_path / "kept"
    mine.mkdir()
    (kept / "_runs").mkdir(parents=True)
    Faults(monkeypatch, tmp_path).inject("open", getattr(errno, name), times=None, part=".lease-")
    create(how, tmp_path, mine)
    create(how, tmp_path, kept)
    assert list(mine.iterdir()) == []
    assert [p.name for p in kept.iterdir()] == ["_runs"] and not list((kept / "_runs").iterdir())


def test_then_the_same_create_succeeds_and_gc_has_nothing_to_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        Faults(m, tmp_path).inject("open", errno.ENAMETOOLONG, times=None, part=".lease-")
        create("python", tmp_path, out)
    assert not out.exists()
    info = snap.create(lambda x: [{"x": x}], str(out), inputs=[1, 2], workers=0)
    assert info.num_records == 2 and info.version == 1
