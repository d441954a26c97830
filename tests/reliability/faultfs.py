"""``faulty://``: the local disk as an fsspec filesystem that fails on purpose.

snap treats it as any other fsspec filesystem (not local, not an object store, not HDFS), so
faults reach the generic code paths every third-party backend takes. What fails is given by
a :class:`Plan` in the environment variable ``SNAP_TEST_FAULTS`` (JSON), read at every call,
so worker processes inherit it and a test can change it between commands:

- ``error``: an errno name (``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EACCES``, ``EIO``, ...), or
  ``timeout`` (a ``TimeoutError``, as a stalled network store gives), or one of the failures
  storage libraries raise with neither an errno nor an HTTP status: ``nocreds`` (a
  :class:`NoCredentialsError`, as botocore raises without credentials), ``foreign`` (a
  :class:`BackendError` of two lines, as a library's own validation error), ``nodns`` (a
  ``socket.gaierror``, a host name that does not resolve), ``denied`` (a ``PermissionError``
  without an errno, as s3fs raises for S3's AccessDenied); or ``kill`` (the process that makes
  the call is killed with SIGKILL: a crash at a chosen point), or ``none`` (only count).
- ``ops``: the kinds of call that count: ``write`` (opening for writing, pipe, put, copy,
  rename, mkdir, touch), ``read`` (opening for reading, cat), ``list`` (ls, info), ``delete``.
- ``after_calls``: that many calls of those kinds succeed first (counted over every process
  of the test, in the ``counter`` file); ``after_bytes``: writes succeed until that many
  bytes went through files opened for writing, then fail mid-file (a disk filling up).
- ``times``: how many calls fail (``null``: all later ones; ``1``: a transient fault).

Each fault fired is appended to ``<counter>.fired`` (pid, op, path), so a test can check it
fired. Register the protocol in a process with :func:`register`; :func:`subprocess_env`
gives an environment whose Python processes (snap's workers too) register it at start-up.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

PROTOCOL = "faulty"
ENV = "SNAP_TEST_FAULTS"
REPO = Path(__file__).resolve().parents[2]
OPS = ("write", "read", "list", "delete")


@dataclass(frozen=True)
class Plan:
    error: str
    counter: str
    ops: tuple[str, ...] = ("write",)
    after_calls: int = 0
    after_bytes: int | None = None
    times: int | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @property
    def fired_log(self) -> Path:
        return Path(f"{self.counter}.fired")

    def fired(self) -> list[dict[str, Any]]:
        """The faults this plan fired so far, in every process."""
        if not self.fired_log.exists():
            return []
        return [json.loads(line) for line in self.fired_log.read_text().splitlines()]

    def calls(self) -> int:
        """Calls of the plan's kinds made so far, in every process."""
        return _load(Path(self.counter))["calls"]


def _active() -> Plan | None:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    doc = json.loads(raw)
    doc["ops"] = tuple(doc["ops"])
    return Plan(**doc)


def _load(counter: Path) -> dict[str, int]:
    text = counter.read_text() if counter.exists() else ""
    return json.loads(text) if text else {"calls": 0, "bytes": 0, "fired": 0}


@contextmanager
def _counted(plan: Plan) -> Iterator[dict[str, int]]:
    """The shared counts, locked against the test's other processes while held."""
    counter = Path(plan.counter)
    with open(f"{counter}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _load(counter)
        yield state
        counter.write_text(json.dumps(state))


class NoCredentialsError(Exception):
    """Named as botocore's: the client found no credentials (no errno, no HTTP status)."""


class BackendError(Exception):
    """A storage library's own failure that snap knows nothing about."""


# What each of the errors that are not an errno says (the CLI's line must carry it).
SAYS = {
    "timeout": "the storage did not answer in time",
    "nocreds": "Unable to locate credentials",
    "foreign": "BackendError: the backend refused the call (a second line)",
    "nodns": "Name or service not known",
    "denied": "Access Denied",
}


def _fire(plan: Plan, op: str, path: str) -> None:
    with open(plan.fired_log, "a") as log:
        log.write(json.dumps({"pid": os.getpid(), "op": op, "path": path}) + "\n")
    if plan.error == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if plan.error == "timeout":
        raise TimeoutError(errno.ETIMEDOUT, SAYS["timeout"], path)
    if plan.error == "nocreds":
        raise NoCredentialsError(SAYS["nocreds"])
    if plan.error == "foreign":
        raise BackendError("the backend refused the call\n(a second line)")
    if plan.error == "nodns":
        raise socket.gaierror(socket.EAI_NONAME, SAYS["nodns"])
    if plan.error == "denied":  # as s3fs says S3's AccessDenied: no errno
        raise PermissionError(SAYS["denied"])
    code = getattr(errno, plan.error)
    raise OSError(code, os.strerror(code), path)


def _gate(op: str, path: str, nbytes: int = 0) -> None:
    """Count one call (or ``nbytes`` written); fail it if the plan says so."""
    plan = _active()
    if plan is None or op not in plan.ops:
        return
    with _counted(plan) as state:
        if nbytes:
            state["bytes"] += nbytes
            due = plan.after_bytes is not None and state["bytes"] > plan.after_bytes
        else:
            state["calls"] += 1
            due = plan.after_bytes is None and state["calls"] > plan.after_calls
        due = due and plan.error != "none" and (plan.times is None or state["fired"] < plan.times)
        if due:
            state["fired"] += 1
    if due:
        _fire(plan, op, path)


class FaultyFile(LocalFileOpener):
    def write(self, data: Any) -> int:
        if "r" not in self.mode:
            _gate("write", self.path, max(1, len(memoryview(data).cast("B"))))
        return super().write(data)


class FaultFileSystem(LocalFileSystem):
    protocol = PROTOCOL

    def unstrip_protocol(self, name: str) -> str:
        return f"{PROTOCOL}://{self._strip_protocol(name)}"

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        _gate("read" if mode.startswith("r") else "write", path)
        if self.auto_mkdir and "w" in mode:
            self.makedirs(self._parent(path), exist_ok=True)
        return FaultyFile(path, mode, fs=self, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:  # fmt: skip
        _gate("read", self._strip_protocol(path))
        return super().cat_file(path, start=start, end=end, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        _gate("write", self._strip_protocol(path))
        super().pipe_file(path, value, mode=mode, **kwargs)

    def ls(self, path: str, detail: bool = False, **kwargs: Any) -> Any:
        _gate("list", self._strip_protocol(path))
        return super().ls(path, detail=detail, **kwargs)

    def info(self, path: Any, **kwargs: Any) -> Any:
        _gate("list", self._strip_protocol(path))
        return super().info(path, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        _gate("write", self._strip_protocol(path))
        super().makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        _gate("write", self._strip_protocol(path))
        super().mkdir(path, create_parents=create_parents, **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        _gate("write", self._strip_protocol(path2))
        super().cp_file(path1, path2, **kwargs)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: Any = None,
           **kwargs: Any) -> None:  # fmt: skip
        _gate("write", self._strip_protocol(path2))
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        _gate("write", self._strip_protocol(rpath))
        super().put_file(lpath, rpath, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        _gate("write", self._strip_protocol(path))
        super().touch(path, truncate=truncate, **kwargs)

    def rm_file(self, path: str) -> None:
        _gate("delete", self._strip_protocol(path))
        super().rm_file(path)

    def rmdir(self, path: str) -> None:
        _gate("delete", self._strip_protocol(path))
        super().rmdir(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for p in path if isinstance(path, list) else [path]:
            _gate("delete", self._strip_protocol(p))
        super().rm(path, recursive=recursive, maxdepth=maxdepth)


def register() -> None:
    fsspec.register_implementation(PROTOCOL, FaultFileSystem, clobber=True)


def subprocess_env(tmp: Path, plan: Plan | None) -> dict[str, str]:
    """An environment whose Python processes register ``faulty://`` at start-up (through a
    ``sitecustomize`` module on PYTHONPATH) and follow ``plan``."""
    site = tmp / "faultfs-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "from tests.reliability import faultfs\nfaultfs.register()\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    env.pop(ENV, None)
    if plan is not None:
        env[ENV] = plan.to_env()
    return env


def url(path: Path) -> str:
    return f"{PROTOCOL}://{path}"


__all__ = ["OPS", "Plan", "FaultFileSystem", "register", "subprocess_env", "url"]
