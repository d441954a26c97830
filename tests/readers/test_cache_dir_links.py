"""A ``cache_dir`` / ``--cache-dir`` that is (or lies under) a symbolic link to nothing (the
fast disk not mounted) or a loop of links: named as such, with what to do. ``exists()`` calls
a dangling link not there, so its parent was blamed: "cannot use cache_dir 'cache': . is a
file, not a directory" (given absolute, the parent directory was named a file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.cache import ShardCache
from tests.commands.conftest import run

MISSING = "/nonexistent-snap-disk/snapcache"


@pytest.fixture
def links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken").symlink_to(MISSING)
    (tmp_path / "chain").symlink_to("broken")  # (a link to the broken link)
    (tmp_path / "loopA").symlink_to("loopB")
    (tmp_path / "loopB").symlink_to("loopA")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "tofile").symlink_to("afile")
    return tmp_path


def said(name: str, base: Path, given: str) -> list[str]:
    """What the error says of ``name`` (the link), where cache_dir is ``given``."""
    shown = given.split("/sub")[0]  # (the link itself, as given: relative or absolute)
    if name in ("broken", "chain"):
        return [f"cannot use cache_dir {given!r}: {shown} is a broken symbolic link (to "
                f"{MISSING}, which does not exist); create {MISSING} (or mount the disk it is "
                f"on), point the link at a directory that exists (ln -sfn DIR {shown}), or "
                "choose another cache_dir (or none)"]  # fmt: skip
    if name == "loopA":
        return [f"{shown} is a loop of symbolic links (to loopB, which leads back to itself)",
                f"(ln -sfn DIR {shown})"]  # fmt: skip
    return [f"{shown} is a symbolic link to afile, a file, not a directory; choose another"]


NAMES = ["broken", "chain", "loopA", "tofile"]


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
@pytest.mark.parametrize("below", [False, True], ids=["it", "below"])
@pytest.mark.parametrize("name", NAMES)
def test_a_cache_dir_that_is_a_link_to_no_directory(
    links: Path, name: str, absolute: bool, below: bool
) -> None:
    given = (str(links / name) if absolute else name) + ("/sub" if below else "")
    with pytest.raises(OptionError) as caught:
        ShardCache(given)
    text = str(caught.value)
    assert all(part in text for part in said(name, links, given)), text
    assert f"{links.parent if absolute else '.'} is a file" not in text, text


@pytest.mark.parametrize("name", NAMES)
def test_the_loader_and_bench_say_it_too(links: Path, name: str) -> None:
    snap.create(lambda i: [{"x": i}], str(links / "s"), inputs=range(3), workers=0)
    with pytest.raises(OptionError) as caught:
        snap.open(str(links / "s")).loader(2, cache_dir=name)
    assert all(part in str(caught.value) for part in said(name, links, name)), caught.value
    code, stdout, stderr = run("bench", str(links / "s"), "--epochs", "1", "--cache-dir", name)
    assert code == 1 and stdout == "" and "Traceback" not in stderr, stderr
    flag = [p.replace("cache_dir", "--cache-dir") for p in said(name, links, name)]
    assert all(part in stderr for part in flag), stderr  # (the option as given: --cache-dir)


def test_a_locks_directory_that_is_a_broken_link_is_named(tmp_path: Path) -> None:
    """The cache's own ``.locks``: the cache_dir itself was called a file."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / ".locks").symlink_to(MISSING)
    with pytest.raises(OptionError) as caught:
        ShardCache(tmp_path / "c")
    assert f"{tmp_path / 'c' / '.locks'} is a broken symbolic link" in str(caught.value)
    assert os.path.isdir(tmp_path / "c")


def test_a_relative_link_is_followed_from_its_own_directory(links: Path) -> None:
    """A link's relative target is from the link's directory, not the working directory:
    ``disks/cache -> fast`` said "create fast" (a review's finding)."""
    (links / "disks").mkdir()
    (links / "disks" / "cache").symlink_to("fast")
    with pytest.raises(OptionError) as caught:
        ShardCache("disks/cache")
    text = str(caught.value)
    assert "disks/cache is a broken symbolic link (to fast, which does not exist)" in text
    assert "create disks/fast (or mount" in text, text  # (from here, as it was given)
