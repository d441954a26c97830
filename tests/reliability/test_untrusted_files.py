"""Only regular files inside the snapshot are read as shards or manifests: a FIFO (which would
block a reader forever), a directory, or a symlink out of the snapshot is refused without
reading it, by the loader, ``head`` and ``verify``, and ``snap.open``. Probes run in their
own processes with a time limit, so that a hang fails the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from tests.conftest import REPO

PROBE = """
import sys
import snapshot_cli as snap
path, how = sys.argv[1], sys.argv[2]
try:
    s = snap.open(path)
    if how == "head":
        s.head(100)
    elif how == "loader":
        list(s.loader(4, shuffle=True))
except (snap.CorruptShardError, snap.ManifestError) as err:
    print(type(err).__name__ + ":", err)
else:
    print("read without an error")
"""


def probe(path: Path, how: str) -> str:
    res = subprocess.run([sys.executable, "-c", PROBE, str(path), how], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.fixture
def out(tmp_path: Path) -> Path:
    def preprocess(i: int) -> Any:
        yield {"x": i}

    snap.create(preprocess, str(tmp_path / "snap"), inputs=[0, 1, 2], workers=0,
                inputs_per_task=1)  # fmt: skip
    return tmp_path / "snap"


def shard_path(out: Path, index: int = 1) -> Path:
    return out / json.loads((out / "manifest.json").read_text())["shards"][index]["path"]


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def link_out(path: Path) -> None:
    outside = path.parent.parent.parent / "outside.arrow"  # the very same bytes, elsewhere
    shutil.move(path, outside)
    path.symlink_to(outside)


SHARD_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (fifo, "not a regular file"),
    "directory": (directory, "is a directory"),
    "symlink out of the snapshot": (link_out, "outside the snapshot"),
}


@pytest.mark.parametrize("case", SHARD_CASES)
def test_a_shard_that_is_no_regular_file_inside_is_refused(out: Path, case: str) -> None:
    make, said = SHARD_CASES[case]
    target = shard_path(out)
    make(target)
    for how in ("head", "loader"):
        got = probe(out, how)
        assert got.startswith("CorruptShardError:") and said in got and target.name in got, got
    verify = [sys.executable, "-m", "snapshot_cli", "verify", str(out), "--json"]
    res = subprocess.run(verify, cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    damaged = doc["damaged"]
    assert len(damaged) == 1 and said in damaged[0]["problem"]
    # refused before any byte was read: its bytes were counted as read and checked
    read = sum(s["bytes"] for s in doc["shards"] if s["path"] != damaged[0]["path"])
    assert doc["bytes_checked"] == read, (doc["bytes_checked"], read)


def test_a_symlink_inside_the_snapshot_is_read(out: Path) -> None:
    target = shard_path(out)
    (out / "moved").mkdir()
    shutil.move(target, out / "moved" / target.name)
    target.symlink_to(out / "moved" / target.name)
    assert probe(out, "loader") == "read without an error"


def test_a_shard_directory_linked_out_of_the_snapshot_is_refused(out: Path) -> None:
    """A link above the file, not at it: every component below the root counts."""
    target = shard_path(out)
    moved = out.parent / "elsewhere"
    shutil.move(target.parent, moved)
    target.parent.symlink_to(moved)
    got = probe(out, "loader")
    assert got.startswith("CorruptShardError:") and "outside the snapshot" in got, got
    assert "copy what the link points to into the snapshot (cp -rL)" in got, got
    # verify's advice was to delete the damaged shards: through the link, the real ones
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", "verify", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 1
    assert "do not delete them: the files they link to may be intact" in res.stdout, res.stdout
    assert "delete the damaged shards" not in res.stdout


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc"])
def test_a_copy_of_links_says_only_to_copy_what_they_point_to(
    out: Path, tmp_path: Path, command: str
) -> None:
    """``cp -rs`` makes every file a link out of the copy: the error told to copy what the
    link points to (cp -rL), then that the manifest was damaged or edited by hand and to put
    back a _versions copy, itself a link out (a probe)."""
    links = tmp_path / "links"
    subprocess.run(["cp", "-rs", str(out), str(links)], check=True)
    assert (links / "manifest.json").is_symlink()
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", command, str(links)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    said = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{links}/manifest.json is a link to {out}/manifest.json, outside" in said, said
    assert "(cp -rL)" in said and said.endswith("; it is not read"), said
    assert "edited by hand" not in said and "_versions" not in said, said


def test_a_snapshot_opened_through_a_link_to_it_is_read(out: Path) -> None:
    link = out.parent / "latest"
    link.symlink_to(out)
    assert probe(link, "loader") == "read without an error"
    assert probe(link, "head") == "read without an error"


@pytest.mark.parametrize("where", ["beside it", "elsewhere"])
def test_a_snapshot_through_a_link_from_anywhere_verifies_and_lists_its_versions(
    out: Path, tmp_path: Path, where: str
) -> None:
    """OUTPUT itself a link (as README advises for a snapshot on a bigger disk): a link
    whose target is not in the link's own directory failed ``snap verify`` and
    ``inspect --versions``, its manifest.json taken for "a link out of the snapshot" (the
    check was made against the link's parent; a probe)."""
    from snapshot_cli.readers.verify import verify

    parent = out.parent if where == "beside it" else tmp_path / "work" / "runs"
    parent.mkdir(parents=True, exist_ok=True)
    link = parent / "latest"
    link.symlink_to(out)
    opened = snap.open(str(link))
    assert verify(opened).ok
    assert [v["version"] for v in opened.versions()] == [1]
    command = [sys.executable, "-m", "snapshot_cli", "verify", str(link)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and ": ok (" in done.stdout, done.stderr


@pytest.mark.parametrize("case", ["fifo", "directory"])
def test_a_manifest_that_is_no_regular_file_is_refused(out: Path, case: str) -> None:
    manifest = out / "manifest.json"
    fifo(manifest) if case == "fifo" else directory(manifest)
    got = probe(out, "open")
    assert got.startswith("ManifestError:") and "manifest.json" in got, got


def test_inspect_and_create_refuse_a_fifo_manifest_at_once(out: Path) -> None:
    fifo(out / "manifest.json")
    pipe = out.parent / "pipe.py"
    pipe.write_text("def f():\n    yield {'x': 1}\n")
    for args in (["inspect", str(out)], ["create", f"{pipe}:f", str(out), "--workers", "0"]):
        res = subprocess.run([sys.executable, "-m", "snapshot_cli", *args], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert "manifest.json is not a regular file" in res.stderr, res.stderr
        # and what to do: the kept copy of the newest version, or the snapshot made again
        assert "put back the newest copy, the highest-numbered _versions/" in res.stderr


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "gc", "create"])
@pytest.mark.parametrize("case", ["fifo", "directory"])
def test_every_command_says_what_to_do_of_a_manifest_that_is_no_file(
    out: Path, case: str, command: str
) -> None:
    """Found by a new-user probe: "manifest.json is a directory (mode drwxr-xr-x); it is not
    read" and nothing more, from every command."""
    manifest = out / "manifest.json"
    fifo(manifest) if case == "fifo" else directory(manifest)
    pipe = out.parent / "pipe.py"
    pipe.write_text("def f():\n    yield {'x': 1}\n")
    args = [command, str(out)] if command != "create" else ["create", f"{pipe}:f", str(out)]
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "manifest.json is" in line and "it is not read: " in line, line
    assert "_versions/vNNNNNNNN.json" in line and "snap create --overwrite" in line, line
