"""A kept copy in ``_versions/`` that holds another version's manifest than its name says
(docs/format.md §6): no copy of that version. ``open(version=k)`` refuses it, and
``versions()`` and ``snap inspect --versions`` do not list it as a second version of the
number it holds, but name it as a bad copy."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.errors import ManifestError


def days(item: int) -> Iterator[dict[str, int]]:
    yield {"day": item}


@pytest.fixture
def grown(tmp_path: Path) -> Path:
    """Versions 1 to 4, whose copy of version 2 holds version 3's manifest."""
    root = tmp_path / "s"
    for n in (2, 3, 4, 5):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    kept = root / "_versions"
    shutil.copyfile(kept / "v00000003.json", kept / "v00000002.json")
    return root


BAD = "v00000002.json holds the manifest of version 3, not 2: a bad copy, not listed"


def test_versions_do_not_list_a_copy_of_another_version(grown: Path) -> None:
    s = snap.open(str(grown))
    with pytest.warns(UserWarning, match=BAD):
        listed = s.versions()
    assert [v["version"] for v in listed] == [1, 3, 4]
    assert [v["current"] for v in listed] == [False, False, True]
    with pytest.raises(ManifestError, match="keeps no version 2") as caught:
        snap.open(str(grown), version=2)
    assert "it keeps [1, 3, 4]" in str(caught.value), caught.value  # (not [1, 3, 3, 4])
    assert snap.open(str(grown), version=3).num_records == 4


def test_inspect_versions_names_the_bad_copy(grown: Path) -> None:
    with warnings.catch_warnings():  # (as the command shows it: one line on stderr)
        warnings.simplefilter("always")
        result = CliRunner().invoke(cli, ["inspect", str(grown), "--versions"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith("3 versions kept")
    assert [line.split()[0] for line in lines[1:]] == ["v1", "v3", "v4"]
    assert f"snap: warning: {grown}/_versions/{BAD}" in result.stderr


def test_versions_of_a_sound_snapshot_say_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for n in (2, 3):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    assert [v["version"] for v in snap.open(str(root)).versions()] == [1, 2]
