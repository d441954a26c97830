"""``slow://``: a local directory served like an object store, with injected latency.

Every request first waits a time to first byte, then transfers at a per-stream bandwidth:
it returns no earlier than ``ttfb + nbytes / bandwidth`` after it started (the local read
happens inside that time). Requests are independent: each one is its own stream, so N
concurrent requests get N times the bandwidth, like N sockets to a store that is never the
bottleneck. ``time.sleep`` releases the GIL, so threads overlap as they would on sockets.

What is a request: ``cat_file(path, start, end)`` (one GET, ranged or whole), each read of
a file from ``open(path, "rb")`` that reaches the store (one ranged GET; how many depends on
``cache_type``), ``info`` (a HEAD; also behind ``exists``, ``isdir``, ``size``) and ``ls``
(one LIST). The filesystem is synchronous (as ``LocalFileSystem`` is), so there is no
``_cat_file``: fsspec calls ``cat_file``. Read-only: writes raise ``PermissionError``.

Settings are storage options, or else environment variables read when a filesystem is made
(so ``snap`` subprocesses and spawned benchmark children behave the same):

    SNAP_SLOW_ROOT     the local directory served; slow:///a/b is ROOT/a/b (default "/",
                       so slow:///abs/path is the local file /abs/path)
    SNAP_SLOW_TTFB_MS  time to first byte of every request, ms (default 50)
    SNAP_SLOW_MBPS     bandwidth of one stream, MB/s = 1e6 bytes/s (default 100)
    SNAP_SLOW_STATS    a file to which each process appends one JSON line of its counters
                       when it exits (requests and bytes, by kind and by path)

Importing this module registers the ``slow`` protocol with fsspec (``clobber=True``).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections import defaultdict
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

DEFAULT_TTFB_MS = 50.0
DEFAULT_MBPS = 100.0
ENV_ROOT, ENV_TTFB, ENV_MBPS, ENV_STATS = (
    "SNAP_SLOW_ROOT",
    "SNAP_SLOW_TTFB_MS",
    "SNAP_SLOW_MBPS",
    "SNAP_SLOW_STATS",
)


# --- per-process counters -------------------------------------------------------------------


class _Counters:
    """Requests and bytes served by every ``slow://`` filesystem of this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()  # also after fork: the parent may have held it
        self.requests: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.paths: dict[str, int] = defaultdict(int)

    def add(self, kind: str, path: str, nbytes: int) -> None:
        with self.lock:
            self.requests[kind] += 1
            self.bytes[kind] += nbytes
            if nbytes:
                self.paths[path] += nbytes

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "pid": os.getpid(),
                "requests": sum(self.requests.values()),
                "bytes": sum(self.bytes.values()),
                "by_kind": {k: [self.requests[k], self.bytes[k]] for k in sorted(self.requests)},
                "paths": dict(self.paths),
            }


_counters = _Counters()
_atexit_registered = False
_atexit_lock = threading.Lock()
os.register_at_fork(after_in_child=_counters.reset)  # a child counts only its own requests


def stats() -> dict[str, Any]:
    """This process's counters: ``{pid, requests, bytes, by_kind: {kind: [n, bytes]},
    paths: {path: bytes}}`` (kinds: range, info, ls)."""
    return _counters.snapshot()


def reset_stats() -> None:
    _counters.reset()


def dump_stats(path: str | None = None) -> None:
    """Append this process's counters as one JSON line to ``path`` (or $SNAP_SLOW_STATS)."""
    path = path or os.environ.get(ENV_STATS)
    if not path:
        return
    line = json.dumps(stats()) + "\n"
    # One write of an O_APPEND file: lines of concurrent processes do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_stats(path: str) -> list[dict[str, Any]]:
    """The JSON lines of a stats file (one per process that exited); [] if none."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _dump_at_exit() -> None:
    if stats()["requests"]:
        dump_stats()


def _register_atexit() -> None:
    global _atexit_registered
    with _atexit_lock:
        if not _atexit_registered:
            atexit.register(_dump_at_exit)
            _atexit_registered = True


# --- the filesystem ---------------------------------------------------------------------------


def _setting(value: Any, env: str, default: float) -> float:
    raw = value if value is not None else os.environ.get(env)
    try:
        number = float(raw) if raw not in (None, "") else default
    except ValueError as err:
        raise ValueError(f"{env} must be a number, got {raw!r}") from err
    if number < 0:
        raise ValueError(f"{env} must be >= 0, got {number}")
    return number


class SlowFileSystem(AbstractFileSystem):
    """A local directory behind a latency and bandwidth model; see the module docstring.

    Args:
        root: the local directory served ($SNAP_SLOW_ROOT, default "/").
        ttfb_ms: time to first byte per request ($SNAP_SLOW_TTFB_MS, default 50).
        mbps: bandwidth per stream in MB/s ($SNAP_SLOW_MBPS, default 100; 0: unlimited).
    """

    protocol = "slow"
    root_marker = "/"

    def __init__(
        self,
        root: str | None = None,
        ttfb_ms: float | None = None,
        mbps: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(root=root, ttfb_ms=ttfb_ms, mbps=mbps, **kwargs)
        self.root = os.path.abspath(root or os.environ.get(ENV_ROOT) or "/")
        self.ttfb = _setting(ttfb_ms, ENV_TTFB, DEFAULT_TTFB_MS) / 1e3
        mb_per_s = _setting(mbps, ENV_MBPS, DEFAULT_MBPS)
        self.bandwidth = mb_per_s * 1e6 if mb_per_s > 0 else float("inf")
        self._local = LocalFileSystem()
        _register_atexit()

    # --- paths: slow:///a/b <-> ROOT/a/b

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        stripped = super()._strip_protocol(path)
        return "/" + stripped.lstrip("/")

    def _local_path(self, path: str) -> str:
        return os.path.join(self.root, self._strip_protocol(path).lstrip("/"))

    def _remote_path(self, local: str) -> str:
        rel = os.path.relpath(local, self.root)
        return "/" if rel == "." else "/" + rel.replace(os.sep, "/")

    # --- the latency model

    def _wait(self, started: float, nbytes: int) -> None:
        """Sleep until ``ttfb + nbytes / bandwidth`` after ``started``."""
        remaining = started + self.ttfb + nbytes / self.bandwidth - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)

    def _request(self, kind: str, path: str, started: float, nbytes: int) -> None:
        self._wait(started, nbytes)
        _counters.add(kind, path, nbytes)

    # --- requests

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        started = time.perf_counter()
        try:
            out = self._local.info(self._local_path(path))
        finally:  # a 404 costs a round trip too
            self._request("info", path, started, 0)
        return {**out, "name": path}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        started = time.perf_counter()
        try:
            entries = self._local.ls(self._local_path(path), detail=True)
        finally:
            self._request("ls", path, started, 0)
        out = [{**e, "name": self._remote_path(e["name"])} for e in entries]
        return out if detail else [e["name"] for e in out]

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        """Bytes ``[start, end)`` of ``path`` (negative: from the end), in one request."""
        path = self._strip_protocol(path)
        started = time.perf_counter()
        data = b""
        try:
            with open(self._local_path(path), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                lo = 0 if start is None else (max(0, size + start) if start < 0 else start)
                hi = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
                f.seek(lo)
                data = f.read(max(0, hi - lo))
        finally:
            self._request("range", path, started, len(data))
        return data

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Any = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SlowFile:
        if mode != "rb":
            raise PermissionError(f"slow:// is read-only; cannot open {path!r} with mode {mode!r}")
        return SlowFile(
            self,
            self._strip_protocol(path),
            mode,
            block_size=block_size or "default",
            cache_type=kwargs.get("cache_type", "readahead"),
            cache_options=cache_options,
            size=kwargs.get("size"),
        )

    def ukey(self, path: str) -> str:
        return self._local.ukey(self._local_path(path))

    # Writes: refuse (the benchmark only reads).
    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        raise PermissionError("slow:// is read-only")

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        raise PermissionError("slow:// is read-only")

    def rm_file(self, path: str) -> None:
        raise PermissionError("slow:// is read-only")

    def _rm(self, path: str) -> None:
        raise PermissionError("slow:// is read-only")


class SlowFile(AbstractBufferedFile):
    """A file opened for reading: each fetch of its cache is one ranged request."""

    fs: SlowFileSystem

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start, end)


def url_of(local_path: str) -> str:
    """The ``slow://`` URL of a local path, served with the default root "/"."""
    return "slow://" + os.path.abspath(local_path)


fsspec.register_implementation("slow", SlowFileSystem, clobber=True)
