"""A user who is not root, for the tests of what snap says when a permission is denied
(root may read and write anything: its runs would test nothing). This process's own user
when the suite runs unprivileged; else one that :class:`tests.infra.users.Users` adds. Either
way the tests run, as root and as not: none is skipped for want of a user.

``with unprivileged() as user:`` gives :class:`User`: ``user.home`` (a directory of its own),
``user.run([...])`` (``python ...`` as that user, importing the snap under test),
``user.chmod(path, mode)`` (as that user: its own files) and ``user.own(path)`` (make a file
the test wrote that user's).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.infra.users import SOURCE, Users


class User:
    """This process's user (not root): its runs are plain subprocesses."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.name = pwd.getpwuid(os.geteuid()).pw_name

    def run(
        self, args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``python args...`` as this user, in ``cwd`` (its home by default)."""
        return subprocess.run(
            [sys.executable, *args], cwd=cwd or self.home, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": SOURCE, **(env or {})}, timeout=180, check=False,
        )  # fmt: skip

    def chmod(self, path: Path, mode: str) -> None:
        """``chmod mode path`` (``-R`` where ``mode`` says so: ``"-R a-w"``) as this user."""
        done = self.run(["-c", f"import subprocess, sys; sys.exit(subprocess.run(['chmod', "
                               f"*{mode.split()!r}, {str(path)!r}]).returncode)"])  # fmt: skip
        assert done.returncode == 0, done.stderr

    def own(self, path: Path) -> None:
        """Make ``path`` (and what is in it) this user's: it is already."""


class AddedUser(User):
    """A user :class:`Users` added (the suite runs as root)."""

    def __init__(self, users: Users) -> None:
        self.users, self.name = users, users.user("u")
        self.home = users.dir / "home" / self.name

    def run(
        self, args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.users.run("u", args, umask=0o022, cwd=cwd or self.home, env=env)

    def own(self, path: Path) -> None:
        for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
            shutil.chown(p, self.name, self.name)


@contextlib.contextmanager
def unprivileged() -> Iterator[User]:
    """A user who is not root (see the module's docstring), removed afterwards."""
    if os.geteuid() != 0:
        home = Path(tempfile.mkdtemp(prefix="snap-unprivileged-"))
        try:
            yield User(home)
        finally:
            subprocess.run(["chmod", "-R", "u+rwX", str(home)], check=False)
            shutil.rmtree(home, ignore_errors=True)
        return
    with Users(["u"]) as users:
        yield AddedUser(users)
