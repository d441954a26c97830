"""Reading another user's snapshot without read permission: the error names what this user
may not read (the directory it may not enter, the shard it may not read), its owner and the
chmod that lets others read it; never a writer's advice ("check that you may write there,
or choose another OUTPUT": inspect, head, verify and bench have no OUTPUT). Real users
(``useradd``), each command a process of its own user."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.users import ROOT_ONLY, Users

pytestmark = [ROOT_ONLY, pytest.mark.slow]

CREATE = """
import sys
import snapshot_cli as snap

snap.create(lambda i: [{"x": i}], sys.argv[1], inputs=range(4), workers=0, progress=False)
"""

OPEN = """
import sys
import snapshot_cli as snap

try:
    snap.open(sys.argv[1])
except Exception as err:
    print(type(err).__name__, isinstance(err, snap.SnapError), err)
"""

READERS = [["inspect"], ["head"], ["verify"], ["bench", "--batch-size", "2"]]


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    with Users(["ana", "ben"]) as made:
        (made.dir / "create.py").write_text(CREATE)
        (made.dir / "open.py").write_text(OPEN)
        yield made


@pytest.fixture
def private(users: Users, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A snapshot ana made with umask 077: its directory 0700, its files 0600."""
    home = users.dir / f"ana-{request.node.name[:40].replace('[', '-').strip(']')}"
    home.mkdir()
    shutil.chown(home, users.user("ana"))
    made = users.run("ana", [str(users.dir / "create.py"), str(home / "s")], umask=0o077)
    assert made.returncode == 0, made.stderr
    assert (home / "s").stat().st_mode & 0o777 == 0o700
    yield home / "s"
    shutil.rmtree(home)


def snap(users: Users, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    return users.run(who, ["-m", "snapshot_cli", *args])


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stdout == "", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [s for s in done.stderr.splitlines() if s.startswith("snap: error: ")]
    return line


@pytest.mark.parametrize("command", READERS, ids=[c[0] for c in READERS])
def test_a_snapshot_this_user_may_not_enter(
    users: Users, private: Path, command: list[str]
) -> None:
    line = error_line(snap(users, "ben", *command, str(private)))
    ana, ben = users.user("ana"), users.user("ben")
    assert line.startswith(f"snap: error: {private}/manifest.json: Permission denied (EACCES); ")
    assert f"this user ({ben}) may not enter {private} ({ana}'s, mode drwx------)" in line
    assert f"ask {ana} to let others read it (chmod -R o+rX {private})" in line
    assert "OUTPUT" not in line and "write" not in line
    assert snap(users, "ana", *command, str(private)).returncode == 0  # (hers to read)


def test_shards_this_user_may_not_read(users: Users, private: Path) -> None:
    """The snapshot's directories and manifest readable, its shards 0600: verify said
    "check that you may write there, or choose another OUTPUT"; head and bench "the storage
    failed, not necessarily the snapshot ... (and that this process may read the file)"."""
    for path in (private, private / "shards", private / "_versions"):
        path.chmod(0o755)
    (private / "manifest.json").chmod(0o644)
    line = error_line(snap(users, "ben", "verify", str(private)))
    shard = next((private / "shards").iterdir())
    assert line.startswith(f"snap: error: {private}/shards/") and str(shard.parent) in line
    assert "Permission denied (EACCES); this user (" in line
    assert f"may not read it ({users.user('ana')}'s, mode -rw-------)" in line
    assert f"chmod -R o+rX {private}/shards)" in line
    assert "OUTPUT" not in line and "write" not in line
    for command in (["head"], ["bench", "--batch-size", "2"]):  # (as verify says it)
        line = error_line(snap(users, "ben", *command, str(private)))
        assert line.startswith(f"snap: error: {private}/shards/") and "(EACCES); this " in line
        assert f"may not read it ({users.user('ana')}'s, mode -rw-------)" in line
        assert line.endswith(f"(chmod -R o+rX {private}/shards)") and "OUTPUT" not in line
    inspected = snap(users, "ben", "inspect", str(private), "--json")
    assert inspected.returncode == 0 and json.loads(inspected.stdout)["num_records"] == 4


def test_open_names_the_path_this_user_may_not_read(users: Users, private: Path) -> None:
    """``snap.open`` raised a bare PermissionError ("[Errno 13] Permission denied:
    '.../manifest.json'", from an lstat) instead of a SnapError saying what to do."""
    said = users.run("ben", [str(users.dir / "open.py"), str(private)]).stdout.strip()
    assert said.startswith(f"StorageError True {private}/manifest.json: Permission denied "), said
    assert f"may not enter {private} ({users.user('ana')}'s, mode drwx------)" in said


def test_a_home_directory_above_the_snapshot_is_only_let_through(
    users: Users, private: Path
) -> None:
    """ana's snapshot readable, her home directory (above it) not: it said "ask ana to let
    others read it (chmod -R o+rX <her home>)", every file of hers."""
    for path in (private, *private.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    private.parent.chmod(0o700)
    line = error_line(snap(users, "ben", "inspect", str(private)))
    assert line.endswith(
        f"may not enter {private.parent} ({users.user('ana')}'s, mode drwx------): run as a "
        f"user who may, or ask {users.user('ana')} to let others through it (chmod o+x "
        f"{private.parent})"
    )
    assert "-R" not in line
