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
processes are told to unmap it, and when a loader is closed or gone to close its shard
files (a snapshot deleted since frees its disk space): at once, or with the next message of
a read thread talking to them; a finalizer in the main thread (a batch, a loader let go of)
leaves it to a sender thread (a Ctrl-C in its send was swallowed and cut the message).
A decode process that dies (the OOM killer, a signal) loses nothing: its unfinished share of
the window is decoded in the read thread, with a warning, and the pool starts another for
the next pass (:mod:`.handoff` is a window's exchange with one process).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import queue
import socket
import subprocess
import threading
import time
import warnings
import weakref
from collections import deque
from typing import Any

from ..child import how_it_died, python_command
from . import limits, shm
from .wire import recv, send

KEEP_READERS = 8  # reader sets a decode process keeps open (one per loader that used it)
_keys = itertools.count(1)


class DecodeProcessError(RuntimeError):
    """A decode process did not start, or answered out of protocol."""


class Died(Exception):
    """The decode process died; its one argument says how (its exit status or signal)."""


class Child:
    """One decode process and this side of its socket. ``lock`` is held by whoever talks
    to it (the read thread exchanging a window with it); ``readers`` and ``arrays`` are the
    reader sets and shared arrays it has, ``freed`` and ``forgotten`` the arrays it is yet
    to unmap and the reader sets it is yet to close."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                python_command(
                    "snapshot_cli.readers.decoder", "main(sys.argv)", str(theirs.fileno())
                ),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock, self.pid = mine, os.getpid()  # (a forked child never talks on it)
        self.lock = threading.Lock()
        self.ready = False
        self.dead = False  # died while in use (its socket is not used again)
        # The reader sets it has open (as its last answer listed them): the next window's
        # first message carries the spec of one it lacks.
        self.readers: set[int] = set()
        self.arrays: set[int] = set()  # shm handle ids it has mapped
        self.freed: deque[int] = deque()  # handle ids to tell it to unmap
        self.forgotten: deque[int] = deque()  # reader sets to tell it to close
        self.stale = False  # it answered an error: send the arrays again with the next job

    def drop(self, handle: int) -> None:
        """This process dropped shared array ``handle``: the process unmaps it (:meth:`_flush`)."""
        if handle not in self.arrays:
            return
        self.arrays.discard(handle)
        self.freed.append(handle)
        self._flush()

    def forget(self, key: int) -> None:
        """Reader set ``key`` is closed here: the process closes its files (:meth:`_flush`)."""
        self.readers.discard(key)
        self.forgotten.append(key)
        self._flush()

    def _flush(self) -> None:
        """Tell it now, unless a read thread is talking to it (its next message does); from the
        main thread (a finalizer's, where a Ctrl-C is swallowed), the pool's sender thread."""
        if threading.current_thread() is threading.main_thread():
            _unsent.put(self)
        else:
            self.flush()

    def flush(self) -> None:
        """Send what it is to unmap and close, if no read thread is talking to it."""
        if os.getpid() == self.pid and self.lock.acquire(blocking=False):
            try:
                self.send_freed()
            except Died:
                self.dead = True
            finally:
                self.lock.release()

    def take_freed(self) -> dict[str, list[int]]:
        """(holding ``lock``) What to unmap and which reader sets to close, for a message."""
        out: dict[str, list[int]] = {}
        for name, todo in (("free", self.freed), ("forget", self.forgotten)):
            while todo:
                out.setdefault(name, []).append(todo.popleft())
        return out

    def send_freed(self) -> None:
        """(holding ``lock``) A message with nothing but what to unmap and which reader sets
        to close; it has no answer."""
        if (self.freed or self.forgotten) and not self.dead:
            told = self.take_freed()
            try:
                self.send(told, [])
            except BaseException:  # (a Ctrl-C: told again with the next; twice does no harm)
                self.freed.extend(told.get("free", ()))
                self.forgotten.extend(told.get("forget", ()))
                raise

    def open_readers(self) -> list[int]:
        """The reader sets the process has open, asked of it (so it has read every message
        sent before: tests)."""
        with self.lock:
            self.send({**self.take_freed(), "ask": True}, [])
            reply, _ = self.recv()
            if not self.ready and reply == ("ready",):  # (its hello came first)
                self.ready = True
                reply, _ = self.recv()
            self.readers = set(reply[-1])
            return list(reply[-1])

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
            raise Died(self._how()) from err

    def recv(self) -> tuple[Any, list[int]]:
        try:
            return recv(self.sock)
        except (EOFError, OSError) as err:
            raise Died(self._how()) from err

    def _how(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # alive, but its socket failed: stop it
            self.proc.kill()
            code = self.proc.wait()
        return how_it_died(code)[0]

    def close(self) -> None:
        self.sock.close()
        self.reap(time.monotonic() + 5)

    def reap(self, deadline: float) -> None:
        """Wait for it to exit (its socket closed) until ``deadline``, then kill it."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class DecodePool:
    """This process's decode processes (see the module docstring)."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.broken = False  # a process died starting: none is started again
        shm.listeners.append(self._dropped)

    def _dropped(self, handle: int) -> None:
        if os.getpid() != self.pid:  # a forked child's copy: the processes are not its own
            return
        for c in list(self.children):
            c.drop(handle)

    def forget(self, key: int) -> None:
        if os.getpid() != self.pid:
            return
        for c in list(self.children):
            c.forget(key)

    def flush(self) -> None:
        """Tell every process now what it is to unmap and close (``Loader.close()``)."""
        if os.getpid() == self.pid:
            for c in list(self.children):
                c.flush()

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
                    self.children.append(Child())
                except OSError as err:  # no memory, no process slots, too many open files
                    warnings.warn(
                        f"snap cannot start a decode process ({err}): the read threads "
                        "decode instead",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    return

    def ready(self, n: int) -> list[Child]:
        """Up to ``n`` of the processes that have started (none yet: decode in threads)."""
        with self._lock:
            children = list(self.children)
        for c in children:
            if self._failed_start(c):
                continue
            if c.ready and not c.dead and c.proc.poll() is not None:
                c.dead = True
                warnings.warn(
                    f"snap's {c.name} {c._how()} between windows; the others (or the "
                    "threads) decode this pass, and the next pass starts another",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return [c for c in children if c.alive() and c.poll_ready()][:n]

    def _failed_start(self, c: Child) -> bool:
        """Whether ``c`` exited before it could start (said once: the pool is then broken,
        as the next one would most likely fail the same way)."""
        if c.ready or c.proc.poll() is None or c.poll_ready():  # (its hello unread: it had
            return False  # started, then died: said as that, and replaced by the next pass)
        if not self.broken:
            self.broken = c.dead = True
            above = " (its error is above)" if c.proc.returncode > 0 else ""  # (not a signal)
            warnings.warn(
                f"snap's {c.name} {c._how()} before it could start{above}; "
                "the read threads decode instead, in this process from now on",
                RuntimeWarning,
                stacklevel=3,
            )
        return True

    def wait_ready(self, n: int, timeout: float = 60.0) -> list[Child]:
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
        """End the processes: every socket closed, then each waited for (they exit at once,
        together: about half a second in all, not that for each in turn)."""
        with self._lock:
            children, self.children = self.children, []
        for c in children:
            c.sock.close()
        deadline = time.monotonic() + 5
        for c in children:
            c.reap(deadline)


_pool: DecodePool | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _forked() -> None:  # a forked child's own (one held at the fork stays held)
    globals().update(_pool_lock=threading.Lock(), _unsent=queue.SimpleQueue())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def pool() -> DecodePool:
    """This process's pool (a forked child makes its own: sockets do not survive fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool, _pool_pid = DecodePool(), os.getpid()
            atexit.register(_at_exit, _pool)  # the processes exit as their sockets close
            threading.Thread(target=_send_unsent, name="decode-frees", daemon=True).start()
        return _pool


_unsent: queue.SimpleQueue[Child] = queue.SimpleQueue()  # what the main thread let go of


def _send_unsent() -> None:  # (no signal is handled here: a Ctrl-C lands in the main thread)
    while True:
        _unsent.get().flush()


def _at_exit(pool: DecodePool) -> None:
    """The interpreter exits: so do the processes. A Ctrl-C while they are waited for kills
    them, quietly (it was "Exception ignored in atexit callback" and a traceback)."""
    children: list[Child] = []
    try:
        children = list(pool.children)
        pool.close()
    except KeyboardInterrupt:
        for c in children:
            with contextlib.suppress(OSError, KeyboardInterrupt, subprocess.TimeoutExpired):
                c.proc.kill()
                c.proc.wait(timeout=1)


def reader_key(readers: Any) -> int:
    """A number naming ``readers`` to the processes (open until :func:`forget_readers`)."""
    key = getattr(readers, "process_key", None)
    if key is None:
        key = readers.process_key = next(_keys)
        done = weakref.finalize(readers, _forget, key)
        done.atexit = False  # at exit the processes go anyway
        readers.process_forget = done
    return int(key)


def forget_readers(readers: Any) -> None:
    """``readers`` closed its files: the processes close theirs (a later pass, a new key)."""
    done = getattr(readers, "process_forget", None)
    if done is not None:
        readers.process_key = readers.process_forget = None
        done()
        if _pool is not None and _pool_pid == os.getpid():
            _pool.flush()  # (not a finalizer: told now, also from the main thread)


def _forget(key: int) -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.forget(key)
