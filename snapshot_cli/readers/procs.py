"""Decode processes: windows decoded outside this process's GIL (``processes=N``).

A training step that runs Python (kernel launches, logging, optimizer code) holds the GIL,
and the loader's read threads need it between the C calls that decode: CPython hands it over
every 5 ms, so a Python-heavy step starves them and waits for data (``benchmarks/replay.py``,
"busy step"). With ``processes=N`` the loader starts N decode processes (once per Python
process; loaders share them) and the read threads hand each its part of a window: the
process decodes the record batches, checks their checksums and writes each record to its
slot in the window, which lives in shared memory (:mod:`.shm`). The read threads only wait on
a socket, which needs no GIL, and the batches served are views of the same memory as before.

Each process is a fresh interpreter running :mod:`.decoder`, not a fork: nothing of this
process (threads, locks, CUDA context, a model's memory) is copied, nor its script re-run.
A process takes about half a second to start; until it is ready the read threads decode as
before, so the first batch is not delayed. The processes leave in a new session (Ctrl-C
reaches the loader, not them) and exit when this process closes their socket, or dies.

Messages are pickles framed by length over a Unix stream socket; descriptors of shared
memory travel with them (SCM_RIGHTS), and when this process drops a window's memory the
processes are told to unmap it (at once, or with their next message if busy), so memory is
not held after a loader is gone. A decode process that dies (the OOM killer, a signal) loses
nothing: its unfinished share of the window is decoded in the read thread, with a warning,
and the pool starts another for the next pass.
"""

from __future__ import annotations

import atexit
import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import limits, shm
from .wire import recv, send

KEEP_READERS = 8  # reader sets a decode process keeps open (one per loader that used it)
_keys = itertools.count(1)


class DecodeProcessError(RuntimeError):
    """A decode process did not start, or answered out of protocol."""


class _Died(Exception):
    """The decode process died; ``how`` says how (its exit status or signal)."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class _Child:
    """One decode process and this side of its socket. ``lock`` is held by whoever talks
    to it (the read thread exchanging a window with it); ``readers`` and ``arrays`` are the
    reader sets and shared arrays it has, ``freed`` the arrays it is yet to unmap."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_parent = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; sys.path.insert(0, {package_parent!r}); "
            "from snapshot_cli.readers.decoder import main; sys.exit(main(sys.argv))"
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock = mine
        self.lock = threading.Lock()
        self.ready = False
        self.dead = False  # died while in use (its socket is not used again)
        # The reader sets it has open (as its last answer listed them): the next window's
        # first message carries the spec of one it lacks.
        self.readers: set[int] = set()
        self.arrays: set[int] = set()  # shm handle ids it has mapped
        self.freed: deque[int] = deque()  # handle ids to tell it to unmap
        self.stale = False  # it answered an error: send the arrays again with the next job

    def drop(self, handle: int) -> None:
        """This process dropped shared array ``handle``: tell the decode process to unmap
        it now if no read thread is talking to it, else with the next message."""
        if handle not in self.arrays:
            return
        self.arrays.discard(handle)
        self.freed.append(handle)
        if self.lock.acquire(blocking=False):
            try:
                self.send_freed()
            except _Died:
                self.dead = True
            finally:
                self.lock.release()

    def take_freed(self) -> list[int]:
        out = []
        while self.freed:
            out.append(self.freed.popleft())
        return out

    def send_freed(self) -> None:
        """(holding ``lock``) A message with nothing but what to unmap; it has no answer."""
        if self.freed and not self.dead:
            self.send({"free": self.take_freed()}, [])

    def poll_ready(self) -> bool:
        """Whether the process has started (reads its hello without waiting)."""
        if self.ready:
            return True
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self.ready and limits.readable(self.sock, 0):
                try:
                    msg, _ = recv(self.sock)
                except (EOFError, OSError):  # it died starting: the next pass replaces it
                    self.dead = True
                    return False
                if msg != ("ready",):
                    raise DecodeProcessError(f"{self.name} said {msg!r} instead of hello")
                self.ready = True
        finally:
            self.lock.release()
        return self.ready

    @property
    def name(self) -> str:
        return f"decode process {self.proc.pid}"

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def send(self, msg: Any, fds: list[int]) -> None:
        try:
            send(self.sock, msg, fds)
        except OSError as err:
            raise _Died(self._how()) from err

    def recv(self) -> tuple[Any, list[int]]:
        try:
            return recv(self.sock)
        except (EOFError, OSError) as err:
            raise _Died(self._how()) from err

    def _how(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # alive, but its socket failed: stop it
            self.proc.kill()
            code = self.proc.wait()
        return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class DecodePool:
    """This process's decode processes (see the module docstring)."""

    def __init__(self) -> None:
        self.children: list[_Child] = []
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.broken = False  # a process died starting: none is started again
        shm.listeners.append(self._dropped)

    def _dropped(self, handle: int) -> None:
        if os.getpid() != self.pid:  # a forked child's copy: the processes are not its own
            return
        for c in list(self.children):
            c.drop(handle)

    def start(self, n: int) -> None:
        """At least ``n`` processes alive or starting (dead ones replaced), unless one has
        died before it could start: then the read threads decode from now on."""
        with self._lock:
            children = list(self.children)
        if any(self._failed_start(c) for c in children) or self.broken:
            return
        with self._lock:
            for c in [c for c in self.children if not c.alive() and not c.lock.locked()]:
                self.children.remove(c)
                c.close()
            while len(self.children) < n:
                try:
                    self.children.append(_Child())
                except OSError as err:  # no memory, no process slots, too many open files
                    warnings.warn(
                        f"snap cannot start a decode process ({err}): the read threads "
                        "decode instead",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    return

    def ready(self, n: int) -> list[_Child]:
        """Up to ``n`` of the processes that have started (none yet: decode in threads)."""
        with self._lock:
            children = list(self.children)
        for c in children:
            if self._failed_start(c):
                continue
            if c.ready and not c.dead and c.proc.poll() is not None:
                c.dead = True
                warnings.warn(
                    f"snap's {c.name} {c._how()} between windows (out of memory?); the "
                    "others decode this pass, and the next pass starts another",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return [c for c in children if c.alive() and c.poll_ready()][:n]

    def _failed_start(self, c: _Child) -> bool:
        """Whether ``c`` exited before it could start (said once: the pool is then broken,
        as the next one would most likely fail the same way)."""
        if c.ready or c.proc.poll() is None:
            return False
        if not self.broken:
            self.broken = c.dead = True
            warnings.warn(
                f"snap's {c.name} {c._how()} before it could start (its error is above); "
                "the read threads decode instead, in this process from now on",
                RuntimeWarning,
                stacklevel=3,
            )
        return True

    def wait_ready(self, n: int, timeout: float = 60.0) -> list[_Child]:
        """Start ``n`` processes and wait until they are ready (tests, benchmarks)."""
        self.start(n)
        deadline = time.monotonic() + timeout
        with self._lock:
            children = list(self.children)
        for c in children[:n]:
            with c.lock:
                if not c.ready:
                    left = max(0.0, deadline - time.monotonic())
                    if not limits.readable(c.sock, left):
                        raise DecodeProcessError(f"{c.name} did not start in {timeout} s")
            c.poll_ready()
        return self.ready(n)

    def close(self) -> None:
        with self._lock:
            children, self.children = self.children, []
        for c in children:
            c.close()


_pool: DecodePool | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def pool() -> DecodePool:
    """This process's pool (a forked child makes its own: sockets do not survive fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool, _pool_pid = DecodePool(), os.getpid()
            atexit.register(_pool.close)  # the processes exit as their sockets close
        return _pool


def reader_key(readers: Any) -> int:
    """A number naming ``readers`` to the decode processes (they keep it open)."""
    key = getattr(readers, "process_key", None)
    if key is None:
        key = readers.process_key = next(_keys)
    return int(key)


def describe(window: Any) -> tuple[dict[str, Any], list[shm.Handle]]:
    """What a decode process needs to map ``window``: each column's array and the slot
    table, by shared-memory handle, and the handles themselves."""
    arrays: dict[str, tuple[int, int, str, tuple[int, ...]]] = {}
    handles: list[shm.Handle] = []
    parts = dict(window.fixed)
    if window.slot_of is not None:
        parts["\0slots"] = window.slot_of
    for name, view in parts.items():
        h = shm.handle_of(view)
        if h is None:
            raise DecodeProcessError(f"window column {name!r} is not in shared memory")
        rows = h.nbytes // max(1, view.dtype.itemsize * int(np.prod(view.shape[1:])))
        arrays[name] = (h.id, h.nbytes, view.dtype.str, (rows, *view.shape[1:]))
        handles.append(h)
    return {"rows": window.rows, "arrays": arrays}, handles


def decode_window(
    child: _Child,
    key: int,
    spec: Callable[[], dict[str, Any]],
    window: Any,
    chunks: Callable[[], np.ndarray | None],
    stop: threading.Event,
    fallback: Callable[[np.ndarray], None],
    in_flight: int = 2,
) -> tuple[float, float, int]:
    """Have ``child`` decode chunks of ``window`` (rows of ``[offset, shard, batch, rows,
    start, stop, check]``, check 0 for a record batch already checked) until ``chunks()``
    gives None or ``stop`` is set, ``in_flight`` chunks at once → (time done, the
    process's CPU seconds, bytes it read). ``key`` names the reader set, ``spec()``
    describes it (sent once to each process). A decoding error (CorruptShardError, ...) is
    raised here as the process raised it.

    If the process dies (the OOM killer, a signal), nothing is lost: the chunks it did not
    finish and the rest of its share are decoded here by ``fallback(chunk)``, with a warning
    naming it, and the pool starts another for the next pass."""
    desc, handles = describe(window)
    cpu, nbytes, error = 0.0, 0, None
    sent: deque[np.ndarray] = deque()  # chunks the process has not answered yet
    with child.lock:
        try:
            while True:
                job = None if stop.is_set() or error is not None else chunks()
                if job is not None:
                    msg: dict[str, Any] = {"key": key, "window": desc, "jobs": job}
                    fds: list[int] = []
                    new = [h for h in handles if h.id not in child.arrays or child.stale]
                    child.stale = False
                    if key not in child.readers:
                        msg["spec"] = spec()
                        child.readers.add(key)
                    if new:
                        msg["fds"], fds = [h.id for h in new], [h.fd for h in new]
                    if child.freed:
                        msg["free"] = child.take_freed()
                    sent.append(job)
                    child.send(msg, fds)
                    child.arrays.update(h.id for h in new)
                    if len(sent) < in_flight:
                        continue
                if not sent:
                    child.send_freed()  # dropped meanwhile: unmapped now, not next window
                    break
                reply, _ = child.recv()
                sent.popleft()
                child.readers = set(reply[-1])  # what it has open now
                if reply[0] == "ok":
                    cpu, nbytes = cpu + reply[1], nbytes + reply[2]
                else:  # it may not have mapped what came with the message: send it again
                    child.stale = True
                    error = error or _error(child, reply[1], reply[2])
        except _Died as died:
            child.dead = True
            warnings.warn(
                f"snap's {child.name} {died.how} (out of memory?); this pass decodes its "
                "share in threads, and the next pass starts another",
                RuntimeWarning,
                stacklevel=2,
            )
            while sent:
                fallback(sent.popleft())
            while error is None and not stop.is_set() and (job := chunks()) is not None:
                fallback(job)
    if error is not None:
        raise error
    return time.perf_counter(), cpu, nbytes


def _error(child: _Child, error: Any, trace: str) -> BaseException:
    """The exception a decode process reported (its traceback as a note, for bugs)."""
    if not isinstance(error, BaseException):
        return DecodeProcessError(f"{child.name} failed: {error}\n{trace}")
    if not getattr(error, "exit_code", None) and hasattr(error, "add_note"):
        error.add_note(f"raised in snap's {child.name}:\n{trace}")
    return error
