"""A snapshot path that is (or lies under) a link to nothing: every reading command said
"does not exist: check the path", where ``snap create`` said it is a broken link (a CLI
probe). They now name the link and where it points."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import ManifestError
from snapshot_cli.writers.gc import gc
from tests.commands.conftest import run


@pytest.mark.parametrize("where", ["the snapshot", "a directory above it"])
def test_every_command_names_a_link_to_nothing(tmp_path: Path, where: str) -> None:
    if where == "the snapshot":
        (tmp_path / "s").symlink_to("gone")
        given, link, target = tmp_path / "s", tmp_path / "s", "gone"
    else:
        (tmp_path / "d").symlink_to(tmp_path / "nowhere")
        given, link, target = tmp_path / "d" / "s", tmp_path / "d", str(tmp_path / "nowhere")
    said = f"{given} does not exist: check the path; {link} is a link to {target}, which does "
    said += "not exist"
    for command in ("inspect", "head", "verify", "bench", "gc"):
        assert run(command, str(given)) == (1, "", f"snap: error: {said}\n"), command
    for call in (lambda: snap.open(given), lambda: gc(str(given))):
        with pytest.raises(ManifestError) as caught:
            call()
        assert str(caught.value) == said
    assert os.readlink(link) == target  # (left as it was)


def test_a_missing_path_without_a_link_says_only_that(tmp_path: Path) -> None:
    assert run("inspect", str(tmp_path / "none")) == (
        1, "", f"snap: error: {tmp_path / 'none'} does not exist: check the path\n"
    )  # fmt: skip
