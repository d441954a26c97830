"""A bounded, resizable hand-off between the producer thread and the consumer.

Items travel as ``(value, error)``: an exception raised in a background thread reaches the
consumer unchanged (with its original traceback; snap's own frames in it without their
locals: :func:`forget_own_locals`). The buffer also measures how long the consumer waited
for data and how long the producer waited for room. What the threads use of the consumer's
side (the map, the tracer) they hold weakly (:func:`weakly`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
import types
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_CLOSED = object()
T = TypeVar("T")


class Closed(Exception):
    """The buffer was closed (the loader is shutting down)."""


class PrefetchBuffer:
    """FIFO of at most ``depth`` items; ``depth`` may change while in use."""

    def __init__(self, depth: int) -> None:
        self.depth = max(1, depth)
        self._items: collections.deque[tuple[Any, BaseException | None]] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.consumer_wait = 0.0  # seconds the consumer waited for an item
        self.producer_wait = 0.0  # seconds the producer waited for room
        self.consumer_waits = 0  # how many gets found the buffer empty
        self._waiting = False  # the consumer is waiting for an item
        self._taken = 0  # items the consumer has taken

    def resize(self, depth: int) -> None:
        with self._cond:
            self.depth = max(1, depth)
            self._cond.notify_all()

    def put(self, value: Any, error: BaseException | None = None) -> None:
        """Add an item, waiting for room. Raises Closed if the buffer was closed."""
        with self._cond:
            if len(self._items) >= self.depth and not self._closed:
                started = time.perf_counter()
                while len(self._items) >= self.depth and not self._closed:
                    self._cond.wait()
                self.producer_wait += time.perf_counter() - started
            if self._closed:
                raise Closed
            self._items.append((value, error))
            self._cond.notify_all()

    def get(self) -> Any:
        """Next item; re-raises a producer's error. Raises Closed once closed and empty."""
        with self._cond:
            if not self._items and not self._closed:
                self.consumer_waits += 1
                started = time.perf_counter()
                self._waiting = True
                self._cond.notify_all()  # for drained()
                while not self._items and not self._closed:
                    self._cond.wait()
                self._waiting = False
                self.consumer_wait += time.perf_counter() - started
            if not self._items:
                raise Closed
            value, error = self._items.popleft()
            self._taken += 1
            self._cond.notify_all()
        if error is not None:
            forget_own_locals(error)
            try:
                raise error
            finally:  # (as below: this frame's local, the error, would hold the frame)
                del error
        return value

    def taken(self) -> None:
        """Wait until the consumer takes an item, or waits for one with none left, or the
        buffer is closed."""
        with self._cond:
            mark = self._taken
            while self._taken == mark and not (self._waiting and not self._items):
                if self._closed:
                    return
                self._cond.wait()

    def drained(self) -> None:
        """Wait until the consumer has taken every item and asks for the next (or the buffer
        is closed): by then it holds nothing from before the last item but what it kept."""
        with self._cond:
            while not (self._waiting and not self._items) and not self._closed:
                self._cond.wait()

    def close(self) -> None:
        """Wake everyone; later puts raise Closed, gets drain what is left then raise Closed."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def discard(self) -> None:
        """Close and drop what is buffered (frees memory at shutdown)."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


def forget_own_locals(error: BaseException) -> None:
    """Clear the locals of snap's own finished frames in ``error``'s traceback (and its
    causes'): a background thread's frame that waited on a future holds it, and the future
    holds the error, whose traceback holds the frame: a cycle that kept a loader whose
    ``map`` or read raised (its windows, shard files and shared memory) until the cyclic
    collector ran. The user's frames (a ``map``'s) keep theirs, for a debugger."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb: TracebackType | None = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
                with contextlib.suppress(RuntimeError):  # (a frame still running)
                    tb.tb_frame.clear()
            tb = tb.tb_next
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def weakly(obj: T | None) -> Callable[[], T | None]:
    """How a pass's threads reach what its loader holds for them (the map, the tracer):
    weakly, so that they never keep alive whoever holds the loader (a trainer whose method is
    the map, holding the loader and its iterator: running threads are roots, so the trainer
    was never collected, nor its threads stopped); a strong reference for what has no weak
    one (a builtin function)."""
    if obj is None:
        return _none
    try:  # (a method of an object without weak references, a slots class's: held strongly)
        if isinstance(obj, types.MethodType):
            return weakref.WeakMethod(obj)
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _none() -> None:
    return None


def weak_thread(owner: Any, method: str, name: str) -> threading.Thread:
    """A daemon thread that runs ``owner.<method>()``, holding ``owner`` weakly until it
    runs: one that never started (a Ctrl-C in ``Thread.start`` before its OS thread was made
    leaves it listed as starting, by CPython) keeps no pass and its window alive."""
    ref = weakref.ref(owner)

    def work() -> None:
        if (this := ref()) is not None:
            getattr(this, method)()

    return threading.Thread(target=work, name=name, daemon=True)
