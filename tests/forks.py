"""``python ARGS...`` run in a child forked from a server that imported snap once.

A sweep that kills a command at each of a hundred points started a Python for each, and the
imports of a command (pyarrow, numpy, fsspec: ~0.45 CPU-s; torch ~3 more) were most of those
tests' time. Here one server process imports snap's CLI, ``faulty://``
(:mod:`tests.reliability.faultfs`) and any module it is asked to (``preload``) once; each
command is a child forked from it that takes the command's arguments, environment and working
directory, with stdin from /dev/null and stdout and stderr in files, and runs as the
interpreter runs ``-m MODULE``, ``-c CODE`` or a script (:mod:`runpy`). The child is a
process of its own, as a command started anew: SIGKILL ends it, a worker it starts is a new
Python that registers ``faulty://`` itself (the environment's ``sitecustomize``), and its
exit status is given as :mod:`subprocess` gives one (minus the signal that ended it).
Commands run at once as processes started together do (the ranks of a job): each answer
names its request.

What an interpreter's start reads from the environment (locale, ``PYTHONWARNINGS``, ``-X``
options, the hash seed, a preloaded library's settings such as ``OMP_NUM_THREADS``: give the
server those with ``env``) is the server's, not the command's: the tests of those start a
process of their own. The server holds no Python thread when it forks (checked at each fork;
torch's import starts one native thread of its own, as in every DataLoader that forks)."""

from __future__ import annotations

import atexit
import importlib
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
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

Finish = Callable[[], "subprocess.CompletedProcess[str]"]


class Forks:
    """The client: a server started at the first command, stopped by :meth:`close`."""

    def __init__(self, preload: tuple[str, ...] = (), env: Mapping[str, str] | None = None) -> None:
        self.preload, self.env = preload, dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.said = Path(tempfile.mkdtemp(prefix="snap-forks-"))  # the children's output
        self.runs = 0
        self.answers: dict[int, int] = {}  # answered, not yet waited for: id -> status
        self.buffer = b""

    def _server(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.answers, self.buffer = {}, b""
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.forks import serve; serve()", *self.preload],
                cwd=REPO,
                env={**os.environ, **self.env, "PYTHONPATH": str(REPO)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        return self.proc

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``args`` as ``subprocess.run([python, "-m", "snapshot_cli", *args], cwd=cwd,
        env=env, capture_output=True, text=True, timeout=timeout)`` gives them."""
        return self.start(args, cwd, env, timeout)()

    def start(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Finish:
        """:meth:`run` started: the command runs while the caller goes on; the function
        returned waits for it."""
        return self.start_python(["-m", "snapshot_cli", *args], cwd, env, timeout)

    def python(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([python, *argv], ...)`` as :meth:`run`: ``argv`` is ``-m MODULE
        ARGS...``, ``-c CODE ARGS...`` or ``SCRIPT ARGS...``."""
        return self.start_python(argv, cwd, env, timeout)()

    def start_python(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> Finish:
        """:meth:`python` started, as :meth:`start`."""
        server = self._server()
        assert server.stdin is not None
        self.runs += 1
        n, out = self.runs, self.said / str(self.runs)
        request = {"id": n, "argv": argv, "cwd": str(cwd), "env": env, "out": str(out),
                   "timeout": timeout}  # fmt: skip
        server.stdin.write(json.dumps(request).encode() + b"\n")
        server.stdin.flush()
        waited: list[bool] = []

        def finish() -> subprocess.CompletedProcess[str]:
            assert not waited, "waited for twice"
            waited.append(True)
            code = self._answer(server, n, timeout + 30, argv)
            said = [Path(f"{out}.{name}") for name in ("stdout", "stderr")]
            stdout, stderr = (p.read_text(errors="replace") for p in said)
            for p in said:
                p.unlink()
            cmd = [sys.executable, *argv]
            if code == -signal.SIGALRM:  # the child's own alarm: as subprocess.run's timeout
                raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
            return subprocess.CompletedProcess(cmd, code, stdout, stderr)

        return finish

    def _answer(self, server: subprocess.Popen[bytes], n: int, timeout: float, argv: Any) -> int:
        """The status of request ``n``; the answers read before it are kept for theirs."""
        end = time.monotonic() + timeout
        while n not in self.answers:
            line = self._line(server, end)
            if line is None:  # (its answer would come late: the next command gets a new server)
                server.kill()
                server.wait()
            assert line is not None, f"the fork server did not answer for {argv}"
            assert line, f"the fork server ended (exit {server.poll()})"
            answer = json.loads(line)
            self.answers[answer["id"]] = answer["status"]
        return self.answers.pop(n)

    def _line(self, server: subprocess.Popen[bytes], end: float) -> bytes | None:
        """The server's next answer; b"" if it ended, None if none came by ``end``."""
        assert server.stdout is not None
        fd = server.stdout.fileno()
        while b"\n" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            data = os.read(fd, 1 << 16)
            if not data:
                return b""
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self) -> None:
        shutil.rmtree(self.said, ignore_errors=True)
        if self.proc is not None:
            stop_server(self.proc)
            self.proc = None


def stop_server(proc: subprocess.Popen[Any]) -> None:
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


_shared: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], Forks] = {}


def shared(preload: tuple[str, ...] = (), env: Mapping[str, str] | None = None) -> Forks:
    """This process's server that preloads these modules with this environment (the
    ``forks`` fixture's has none), closed as the process ends."""
    key = (preload, tuple(sorted((env or {}).items())))
    if key not in _shared:
        _shared[key] = Forks(preload, env)
        atexit.register(_shared[key].close)
    return _shared[key]


def serve() -> None:
    """Answer requests (JSON lines on stdin, see :meth:`Forks.start_python`) with
    ``{"id", "status"}`` as each child ends; at the end of stdin, kill what still runs."""
    for name in ("snapshot_cli.cli", "snapshot_cli.writers.create", *sys.argv[1:]):
        importlib.import_module(name)  # (what every command imports, before the forks)
    from tests.reliability import faultfs

    faultfs.register()
    running: dict[int, tuple[int, int]] = {}  # a child's pidfd -> its pid, its request's id
    buffer, reading = b"", True
    while reading:
        ready, _, _ = select.select([0, *running], [], [])
        for fd in ready:
            if fd != 0:
                pid, n = running.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                answer = {"id": n, "status": os.waitstatus_to_exitcode(status)}
                os.write(1, json.dumps(answer).encode() + b"\n")
                continue
            data = os.read(0, 1 << 16)
            reading = bool(data)
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                request = json.loads(line)
                assert threading.active_count() == 1, threading.enumerate()  # none half-forked
                pid = os.fork()
                if pid == 0:
                    for pidfd in running:
                        os.close(pidfd)
                    _command(request)  # (never returns: the command's exit ends the child)
                running[os.pidfd_open(pid)] = (pid, request["id"])
    for pid, _ in running.values():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _command(request: dict[str, Any]) -> None:
    """In the forked child: become ``python *argv`` and run it. Its exit (SystemExit, or an
    exception's traceback and status 1) is the interpreter's, as there."""
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
        signal.alarm(max(1, int(request["timeout"])))
    except BaseException:  # the child must never go back to the server's loop
        os._exit(70)
    try:
        _main(request["argv"])
    except SystemExit:
        raise
    except BaseException as err:  # as the interpreter ends on an uncaught exception
        sys.excepthook(type(err), err, err.__traceback__)
        sys.exit(1)
    sys.exit(0)


def _main(argv: list[str]) -> None:
    """Run ``argv`` as ``python`` does: ``-m MODULE``, ``-c CODE`` (``sys.path[0]`` the
    working directory) or a script (its directory)."""
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)  # noqa: S102 (as -c does)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
