"""A shard this user may not read (EACCES) is said as verify said it, by every reader: its
path, whose it is, its mode and the chmod that lets this user read it. head, bench, the
loader (threads, decode processes, unshuffled) and ``Snapshot.head`` said "the storage
failed, not necessarily the snapshot: check the disk or file system (and that this process
may read the file)". Run as a user who is not root (:mod:`tests.unprivileged`), on its own
snapshot with one shard made unreadable (another user's shards: test_permission_words)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unprivileged import User, unprivileged

CREATE = """
import sys
import snapshot_cli as snap

snap.create(lambda i: [{"x": i}], sys.argv[1], inputs=range(4), workers=0, progress=False)
"""

READ = """
import sys
import warnings
import snapshot_cli as snap

warnings.simplefilter("ignore")  # (more decode processes than cores, on a small machine)
s = snap.open(sys.argv[1])
for kw in ({}, {"processes": 1}, {"shuffle": False}, None):
    try:
        if kw is None:
            s.head(4)
        else:
            sum(len(b["x"]) for b in s.loader(batch_size=2, **kw))
        print("read with", kw)
    except snap.SnapError as err:
        print(f"snap: error: {err}")
"""


@pytest.fixture(scope="module")
def denied() -> Iterator[tuple[User, Path, Path]]:
    """The user, its snapshot, and the shard of it it made mode 000."""
    with unprivileged() as user:
        s = user.home / "s"
        made = user.run(["-c", CREATE, str(s)])
        assert made.returncode == 0, made.stderr
        shard = sorted((s / "shards").iterdir())[1]
        user.chmod(shard, "000")
        yield user, s, shard


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [s for s in (done.stdout + done.stderr).splitlines() if s.startswith("snap: error: ")]


def expected(user: User, s: Path, shard: Path) -> str:
    return (
        f"snap: error: {shard}: Permission denied (EACCES); this user ({user.name}) may not "
        f"read it (its own, mode ----------): restore its permission (chmod -R u+rX {s}/shards)"
    )


@pytest.mark.parametrize("command", [["head"], ["bench", "--batch-size", "2"], ["verify"]])
def test_a_command_names_the_shard_and_the_chmod(
    denied: tuple[User, Path, Path], command: list[str]
) -> None:
    user, s, shard = denied
    done = user.run(["-m", "snapshot_cli", *command, str(s)])
    assert done.returncode == 1 and said(done) == [expected(user, s, shard)]


def test_the_loader_and_head_name_the_shard_and_the_chmod(
    denied: tuple[User, Path, Path],
) -> None:
    user, s, shard = denied
    done = user.run(["-c", READ, str(s)])
    assert done.returncode == 0 and "read with" not in done.stdout, done.stdout
    assert said(done) == [expected(user, s, shard)] * 4
