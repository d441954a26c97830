"""Real Unix users for the tests of snapshots and caches shared between users (root only).

:class:`Users` adds users (and a group they share) with ``useradd`` and removes them with
``userdel`` afterwards; :meth:`Users.run` runs a command as one of them (its uid, gid and
groups, and the umask given: ``subprocess.run``'s ``user=``, ``group=``, ``extra_groups=``,
``umask=``) with a Python it may execute. This repository's Python may be one only root can
reach (a pyenv under ``/root``, mode 700): then its installation is bind-mounted read-only
into the shared directory and a venv made there that adds this one's site-packages, as a
user would reach it. The shared directory is outside pytest's ``tmp_path`` (under
``/tmp/pytest-of-root``, mode 700) and removed afterwards. Every process imports the snap
under test (``PYTHONPATH``: this checkout's, also in a git worktree).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

import pytest

import snapshot_cli

# the snap under test, imported first by every process (before an editable install's finder)
SOURCE = str(Path(snapshot_cli.__file__).resolve().parent.parent)

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="adding users and running processes as them needs root"
)


class Users:
    """``with Users(["ana", "ben"]) as users:`` adds users ``snap<hex>ana``, ... (each in a
    group ``users.group`` they share); ``users.dir`` is a directory every user may enter."""

    def __init__(self, names: list[str]) -> None:
        tag = secrets.token_hex(3)
        self.group = f"snap{tag}team"
        self.names = {n: f"snap{tag}{n}" for n in names}
        self.dir = Path(tempfile.mkdtemp(prefix="snap-users-"))
        self._mounted: Path | None = None
        self._python: list[str] = [sys.executable]
        self._env: dict[str, str] = {}

    def __enter__(self) -> Users:
        try:
            self.dir.chmod(0o755)
            subprocess.run(["groupadd", self.group], check=True)
            for name in self.names.values():
                subprocess.run(["useradd", "-M", "-G", self.group, name], check=True)
                home = self.dir / "home" / name
                home.mkdir(parents=True)
                shutil.chown(home, name, name)
            (self.dir / "home").chmod(0o755)
            self._find_python()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for name in self.names.values():
            subprocess.run(["userdel", name], check=False, capture_output=True)
        subprocess.run(["groupdel", self.group], check=False, capture_output=True)
        if self._mounted is not None:
            subprocess.run(["umount", "-l", str(self._mounted)], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def user(self, name: str) -> str:
        return self.names[name]

    def run(
        self, name: str, args: list[str], umask: int = 0o002, cwd: Path | None = None,
        env: dict[str, str] | None = None, timeout: float = 180,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``python args...`` as user ``name`` with ``umask``, in the group they share."""
        user = self.names[name]
        return subprocess.run(
            [*self._python, *args], user=user, group=pwd.getpwnam(user).pw_gid,
            extra_groups=[self.group],
            umask=umask, cwd=cwd or self.dir, capture_output=True, text=True, timeout=timeout,
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.dir / "home" / user),
                 "PYTHONPATH": SOURCE, **self._env, **(env or {})},
            check=False,
        )  # fmt: skip

    def _runs(self) -> bool:
        """Whether the first user can import snap with the Python found so far."""
        try:
            probe = self.run(next(iter(self.names)), ["-c", "import snapshot_cli"], timeout=60)
        except PermissionError:  # (this Python itself, where only root may reach it)
            return False
        return probe.returncode == 0

    def _find_python(self) -> None:
        if self._runs():
            return
        # a Python only root can reach: its installation, mounted where every user may read it
        base = Path(os.path.realpath(sys.base_prefix))
        self._mounted = self.dir / "python"
        self._mounted.mkdir()
        subprocess.run(["mount", "--bind", "-o", "ro", str(base), str(self._mounted)],
                       check=True)  # fmt: skip
        subprocess.run(["mount", "-o", "remount,bind,ro", str(self._mounted)], check=True)
        self._env = {"LD_LIBRARY_PATH": str(self._mounted / "lib")}
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        venv = self.dir / "venv"
        subprocess.run([str(self._mounted / "bin" / version), "-m", "venv", "--without-pip",
                        str(venv)], env={**os.environ, **self._env}, check=True)  # fmt: skip
        ours = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
        adds = "".join(f"site.addsitedir({p!r}); " for p in ours)
        (venv / "lib" / version / "site-packages" / "snap_tests.pth").write_text(
            f"import site; {adds}\n"
        )
        self._python = [str(venv / "bin" / "python")]
        if not self._runs():
            probe = self.run(next(iter(self.names)), ["-c", "import snapshot_cli"])
            raise RuntimeError(f"no Python other users may run: {probe.stderr[-2000:]}")
