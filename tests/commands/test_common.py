"""What every inspection and upkeep command does alike: not a snapshot, an unreadable manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.conftest import run


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc"])
@pytest.mark.parametrize("where", ["empty", "missing"])
def test_not_a_snapshot_exits_1_without_traceback(tmp_path: Path, command: str, where: str) -> None:
    path = tmp_path / "nothing"
    if where == "empty":
        path.mkdir()
    code, stdout, stderr = run(command, str(path))
    assert code == 1
    assert stderr.startswith("snap: error: ") and str(path) in stderr
    assert "is not a snapshot" in stderr or (command == "gc" and "does not exist" in stderr)
    assert "Traceback" not in stderr and stdout == ""


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "gc"])
def test_manifest_that_cannot_be_read_exits_1_naming_it(snapshot: Path, command: str) -> None:
    """A failure root gets too: manifest.json is a directory."""
    manifest = snapshot / "manifest.json"
    manifest.unlink()
    manifest.mkdir()
    code, stdout, stderr = run(command, str(snapshot))
    assert code == 1 and stdout == ""
    assert stderr.startswith("snap: error: ") and str(manifest) in stderr
    assert "Traceback" not in stderr
