"""``python -m snapshot_cli ...`` run in a child forked from a server that imported snap once.

A sweep that kills a command at each of a hundred points started a Python for each, and the
imports of a command (pyarrow, numpy, fsspec: ~0.45 CPU-s) were most of those tests' time.
Here one server process imports snap's CLI and ``faulty://``
(:mod:`tests.reliability.faultfs`) once; each command is a child forked from it that takes
the command's arguments, environment and working directory, with stdin from /dev/null and
stdout and stderr in files, and runs ``snapshot_cli`` as ``-m`` runs it
(:func:`runpy.run_module`). The child is a process of its own, as a command started anew:
SIGKILL ends it, a worker it starts is a new Python that registers ``faulty://`` itself (the
environment's ``sitecustomize``), and its exit status is given as :mod:`subprocess` gives
one (minus the signal that ended it).

What an interpreter's start reads from the environment (locale, ``PYTHONWARNINGS``, ``-X``
options, the hash seed) is the server's, not the command's: the tests of those start a
process of their own. The server holds no thread when it forks (checked at each fork)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class Forks:
    """The client: a server started at the first command, stopped by :meth:`close`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.said = Path(tempfile.mkdtemp(prefix="snap-forks-"))  # the children's output
        self.runs = 0
        self.pending: Callable[[], subprocess.CompletedProcess[str]] | None = None

    def _server(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.forks import serve; serve()"],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        return self.proc

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``args`` as ``subprocess.run([python, "-m", "snapshot_cli", *args], cwd=cwd,
        env=env, capture_output=True, text=True, timeout=timeout)`` gives them."""
        return self.start(args, cwd, env, timeout)()

    def start(
        self, args: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> Callable[[], subprocess.CompletedProcess[str]]:
        """:meth:`run` started: the command runs while the caller goes on; the function
        returned waits for it (else the next command's start does, before it starts)."""
        if self.pending is not None:  # left by a test that failed while it ran
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                self.pending()
        server = self._server()
        assert server.stdin is not None and server.stdout is not None
        self.runs += 1
        out = self.said / str(self.runs)
        request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "timeout": timeout}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()

        def finish() -> subprocess.CompletedProcess[str]:
            assert server.stdout is not None and self.pending is finish, "waited for twice"
            self.pending = None
            ready, _, _ = select.select([server.stdout], [], [], timeout + 30)
            if not ready:  # (its answer would come late, for the next command: a new server)
                server.kill()
                server.wait()
            assert ready, f"the fork server did not answer for {args}"
            line = server.stdout.readline()
            assert line, f"the fork server ended (exit {server.poll()})"
            code: int = json.loads(line)["status"]
            said = [Path(f"{out}.{name}") for name in ("stdout", "stderr")]
            stdout, stderr = (p.read_text(errors="replace") for p in said)
            for p in said:
                p.unlink()
            if code == -signal.SIGALRM:  # the child's own alarm: as subprocess.run's timeout
                raise subprocess.TimeoutExpired(args, timeout, stdout, stderr)
            return subprocess.CompletedProcess(args, code, stdout, stderr)

        self.pending = finish
        return finish

    def close(self) -> None:
        shutil.rmtree(self.said, ignore_errors=True)
        if self.proc is not None:
            stop_server(self.proc)
            self.proc = None


def stop_server(proc: subprocess.Popen[str]) -> None:
    """End a server that reads requests from its stdin: its stdin closed, it ends (killed if
    it has not within 30 s); its pipes closed."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


_shared: Forks | None = None


def shared() -> Forks:
    """This process's server (the ``forks`` fixture's too), closed as the process ends."""
    global _shared
    if _shared is None:
        _shared = Forks()
        atexit.register(_shared.close)
    return _shared


def serve() -> None:
    """Answer requests (JSON lines on stdin, see :meth:`Forks.run`) with ``{"status"}``."""
    import snapshot_cli.cli  # noqa: F401  (what every command imports, before the forks)
    import snapshot_cli.writers.create  # noqa: F401
    from tests.reliability import faultfs

    faultfs.register()
    for line in sys.stdin:
        request = json.loads(line)
        assert threading.active_count() == 1, threading.enumerate()  # nothing to fork half of
        pid = os.fork()
        if pid == 0:
            _command(request)  # (never returns: the command's exit ends the child)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


def _command(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m snapshot_cli *args`` and run it. Its exit
    (SystemExit, or an exception's traceback and status 1) is the interpreter's, as there."""
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, f"{request['out']}.stdout", written),
                                (2, f"{request['out']}.stderr", written)):  # fmt: skip
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, encoding=sys.stdin.encoding, closefd=False)  # noqa: SIM115 (for good)
        sys.argv = ["-m", *request["args"]]
        signal.alarm(max(1, int(request["timeout"])))
    except BaseException:  # the child must never go back to the server's loop
        os._exit(70)
    runpy.run_module("snapshot_cli", run_name="__main__", alter_sys=True)
    sys.exit(0)
