"""The HDFS clients as :mod:`snapshot_cli.storage` makes them (fsspec's ``hdfs``, through
pyarrow's libhdfs, and ``webhdfs``, over HTTP): where they may be made, their failures named,
and their user. :mod:`snapshot_cli.hdfs` holds the workarounds of their operations.

- **Fork.** libhdfs runs a JVM inside the process. A process forked after it started has the
  JVM's memory but none of its threads: a client made there blocks for good inside libhdfs
  (or crashes), as torch ``DataLoader`` workers did. snap refuses ``hdfs://`` in such a child
  at once (:func:`refuse_after_fork`), naming what to do instead.
- **libhdfs's errno 255.** libhdfs gives a few Java exceptions an errno (missing, forbidden);
  every other failure, a NameNode that is down or in safe mode included, reaches Python as
  ``[Errno 255] Unknown error 255``, its Java exception printed on stderr where snap cannot
  read it. pyarrow also answers "not found" for a path it failed to stat. So on either, snap
  asks the NameNode's RPC port itself (:func:`unreachable`): one that takes no connection is a
  ``ConnectionError`` naming it (retried by :mod:`snapshot_cli.retry`); one that does, a
  refusal said with what to check (its safe mode, its DataNodes).
- **WebHDFS's refusals.** A write is redirected to a DataNode, whose 403 fsspec raises as a
  bare ``HTTPError``; its body is the NameNode's RemoteException, raised here as what it is
  (a ``PermissionError``, a :class:`SafeModeError`), by a hook on the client's session.
- **The user.** ``HADOOP_USER_NAME`` names the user of a WebHDFS client given none, as it
  does for Hadoop's own clients and libhdfs; without one WebHDFS acts as ``dr.who``, its
  anonymous user, and a refusal naming it says how to give one.
"""

from __future__ import annotations

import os
import re
import socket
import urllib.parse
from typing import Any

import fsspec.config
from fsspec import AbstractFileSystem

from .errors import StorageError
from .protocols import WEBHDFS_PROTOCOLS, protocol

LIBHDFS_PROTOCOLS = frozenset({"hdfs", "arrow_hdfs"})
EINTERNAL = 255  # libhdfs's errno for a Java exception it has none for
NAMENODE_PORT = 8020  # Hadoop's default RPC port, for a URL that names none
PROBE_S = 5.0  # to connect to the NameNode's RPC port
FORK_HINT = (
    "hdfs:// (libhdfs's JVM) cannot be used in a process forked after it started: use "
    "DataLoader(..., multiprocessing_context='spawn') or webhdfs://"
)
WHO_HINT = (
    "; WebHDFS acted as dr.who, Hadoop's anonymous user, since no user was given: set "
    'HADOOP_USER_NAME, or give one (FSSPEC_WEBHDFS=\'{"user": "NAME"}\', or '
    'storage_options={"user": "NAME"})'
)
_LIBHDFS_URL = re.compile(r"(?:^|::)(?:arrow_)?hdfs://")
_JAVA_FRAME = re.compile(r"\n\s*at [\w.$]+\(")

_jvm_pid: int | None = None  # the process that made snap's first hdfs:// client (its JVM)
_forked = False  # whether this process is a fork's child


class SafeModeError(OSError):
    """The NameNode refused a change: it is in safe mode (read-only)."""


def _note_fork() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)


def refuse_after_fork(url: str) -> None:
    """Raise a StorageError if ``url`` is an ``hdfs://`` URL (libhdfs) and this process was
    forked from one that had started libhdfs's JVM: snap's own client there (recorded by
    :func:`prepared`), or any (its library mapped, in a fork's child that made none)."""
    if not _LIBHDFS_URL.search(url) or _jvm_pid == os.getpid():
        return
    if _jvm_pid is not None or (_forked and _jvm_mapped()):
        raise StorageError(f"cannot open {url} in process {os.getpid()}: {FORK_HINT}")


def _jvm_mapped() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            return "libjvm" in maps.read()
    except OSError:  # (not Linux: no way to tell)
        return False


def client_options(url: str, given: dict[str, Any]) -> dict[str, Any]:
    """Options snap adds to the client of ``url``: a WebHDFS client's user from
    ``HADOOP_USER_NAME`` unless one is given (in ``given``, the URL's ``user@``, or fsspec's
    configuration such as ``FSSPEC_WEBHDFS``) or a token or Kerberos stands for it."""
    scheme = url.partition("://")[0]
    user = os.environ.get("HADOOP_USER_NAME")
    if scheme not in WEBHDFS_PROTOCOLS or not user or urllib.parse.urlsplit(url).username:
        return {}
    configured = [given, *(fsspec.config.conf.get(p, {}) for p in WEBHDFS_PROTOCOLS)]
    if any(key in options for options in configured for key in ("user", "token", "kerberos")):
        return {}
    return {"user": user}


def prepared(fs: AbstractFileSystem) -> AbstractFileSystem:
    """``fs`` as snap uses it: an ``hdfs://`` client's calls (and its files') with their errno
    255 named, a WebHDFS client's refusals raised as what they are. Records the process that
    started libhdfs's JVM (see :func:`refuse_after_fork`). fsspec hands out one instance for
    the same options, so its own users of that instance see the same (``fs.fs`` forwards to
    pyarrow's HadoopFileSystem; the session gets one more response hook)."""
    global _jvm_pid
    name = protocol(fs)
    if name in LIBHDFS_PROTOCOLS:
        if _jvm_pid is None:
            _jvm_pid = os.getpid()
        native = getattr(fs, "fs", None)  # fsspec's wrapper: pyarrow's HadoopFileSystem
        if native is not None and not isinstance(native, _Named):
            fs.fs = _Named(native, namenode(fs), os.getpid())
    elif name in WEBHDFS_PROTOCOLS and getattr(fs, "session", None) is not None:
        hooks = fs.session.hooks.setdefault("response", [])
        if _refusal not in hooks:
            hooks.append(_refusal)
    return fs


def namenode(fs: AbstractFileSystem) -> tuple[str, int] | None:
    """The NameNode's RPC address an ``hdfs://`` client was given; None where libhdfs takes it
    from Hadoop's configuration (``hdfs://default/``, ``fs.defaultFS``)."""
    host = fs.storage_options.get("host") or "default"
    if host == "default":
        return None
    return str(host), int(fs.storage_options.get("port") or 0) or NAMENODE_PORT


def unreachable(address: tuple[str, int]) -> OSError | None:
    """The error connecting to ``address`` gives (refused, timed out, no route), or None if it
    takes the connection. A name that does not resolve is None too: an HA nameservice's
    logical name is no host, and libhdfs knows better."""
    try:
        with socket.create_connection(address, timeout=PROBE_S):
            return None
    except socket.gaierror:
        return None
    except OSError as err:
        return err


class _Named:
    """pyarrow's HadoopFileSystem, or a file it opened, every call forwarded and its failures
    named (:func:`explained`); files it opens are wrapped too. In a forked child every call
    is refused: the JVM it would enter has no threads there.

    A filesystem call that failed while the NameNode now takes connections is made once more:
    the NameNode refused it, or it came back (a restart) since; the second answer tells. (A
    file's calls are not: a failed write or close leaves the file broken.)"""

    def __init__(
        self, target: Any, address: tuple[str, int] | None, pid: int, again: bool = True
    ) -> None:
        self._target, self._address, self._pid, self._again = target, address, pid, again

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (not forwarded: copy and pickle ask before __init__ ran)
            raise AttributeError(name)
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() != self._pid:
                where = "hdfs://{}:{}/".format(*self._address) if self._address else "hdfs://"
                raise StorageError(f"cannot use {where} in process {os.getpid()}: {FORK_HINT}")
            out = self._call(value, args, kwargs)
            if name == "get_file_info" and self._not_found(out):
                out = self._call(value, args, kwargs)  # (the NameNode is back: ask again)
            elif name.startswith("open_"):
                return _Named(out, self._address, self._pid, again=False)
            return out

        return call

    def _call(self, method: Any, args: Any, kwargs: Any) -> Any:
        for last in (not self._again, True):
            try:
                return method(*args, **kwargs)
            except OSError as err:
                named = explained(err, self._address)
                if named is err:
                    raise
                if last or isinstance(named, ConnectionError | TimeoutError):
                    raise named from err
        raise AssertionError("unreachable")

    def _not_found(self, out: Any) -> bool:
        """pyarrow answers "not found" for any path it failed to stat: a NameNode that takes
        no connection makes that a ConnectionError; one that does, worth asking again (True)."""
        infos = out if isinstance(out, list) else [out]
        if self._address is None or not any(i.type.name == "NotFound" for i in infos):
            return False
        if (problem := unreachable(self._address)) is not None:
            raise _unreachable_error("HDFS get path info failed", self._address, problem)
        return True


def explained(err: OSError, address: tuple[str, int] | None) -> OSError:
    """libhdfs's ``[Errno 255] Unknown error 255`` as what it was, where the NameNode's port
    tells: ``address`` unreachable is a ConnectionError (transient), else an OSError saying
    what to check. Any other error is returned as it is."""
    if err.errno != EINTERNAL:
        return err
    what = (err.strerror or str(err)).split(". Detail:")[0].strip()
    if address is not None and (problem := unreachable(address)) is not None:
        return _unreachable_error(what, address, problem)
    where = f" at {address[0]}:{address[1]}" if address else ""
    return OSError(
        f"{what}: HDFS refused or failed it (libhdfs printed the reason, a Java exception, on "
        f"stderr): check that the NameNode{where} is not in safe mode (hdfs dfsadmin -safemode "
        "get) and that its DataNodes are up (hdfs dfsadmin -report)"
    )


def _unreachable_error(what: str, address: tuple[str, int], problem: OSError) -> OSError:
    kind = type(problem) if isinstance(problem, ConnectionError | TimeoutError) else ConnectionError
    reason = problem.strerror or str(problem) or type(problem).__name__
    return kind(
        f"{what}: the NameNode at {address[0]}:{address[1]} (its RPC port) cannot be reached "
        f"({reason})"
    )


def _refusal(response: Any, *args: Any, **kwargs: Any) -> None:
    """A ``requests`` response hook of WebHDFS sessions: a 403 whose RemoteException is a
    refusal raised as one, the DataNode's too (fsspec raises those as a bare HTTPError, "403
    Client Error: Forbidden for url: ..."); other answers are left to fsspec and snap."""
    if response.status_code != 403:
        return None
    try:
        remote = response.json()["RemoteException"]
        kind, message = str(remote["exception"]), str(remote["message"])
    except (ValueError, KeyError, TypeError):
        return None
    message = " ".join(_JAVA_FRAME.split(message, maxsplit=1)[0].split())  # (a DataNode's has them)
    if kind in ("AccessControlException", "SecurityException"):
        raise PermissionError(message + (WHO_HINT if "user=dr.who" in message else ""))
    if kind == "SafeModeException" or "in safe mode" in message:  # (a DataNode's: wrapped)
        raise SafeModeError(message)
    return None
