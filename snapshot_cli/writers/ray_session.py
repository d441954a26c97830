"""Ray's calls off the main thread: a stop signal never lands inside Ray's native code.

Python runs a signal's handler in the main thread, between two bytecodes, wherever that
thread is: Ctrl-C or a SIGTERM that arrived while the driver was inside Ray (``ray.init``
building its core worker, ``ray.get`` turning objects into values, ``ray.cancel``) raised
KeyboardInterrupt in the middle of Ray's Cython code, and the process died at exit with a
segmentation fault (exit 139), an abort (134) or a failed check of Ray's own
(``task_manager.cc``), leaving Ray's processes behind. ``ray.init`` in the main thread also
set its own SIGTERM handler (``sys.exit(15)``) for as long as it ran.

So the executor runs everything that calls Ray (connect, checks, scheduling, shutdown) as
the ``body`` of a :class:`Session`: a thread of its own, which lives until Ray is shut down
(a local Ray's processes are its children, and Linux ends them when the thread that started
them ends). The main thread only takes what the body hands over (:meth:`Session.outcomes`)
and calls the executor's callbacks; a signal raises there, at a point of snap's choosing.
On the way out (a signal, an error of a callback) the session asks the body to stop
(:attr:`Session.stopping`, which it looks at between waits of at most :data:`POLL_S`), and
waits for it: the Ray a run started is shut down before the process goes on to exit.
A second Ctrl-C while it waits stops waiting.

Connecting, Ray's core worker puts handlers of its own for SIGTERM (and for crashes) in
the process, below Python's: a SIGTERM was said as a crash ("*** SIGTERM received ...
PC: @ ...", six lines) before the process stopped. Once the body emits :data:`CONNECTED`,
the main thread sets the process's own SIGTERM handler back (Ray's for crashes stay). Where
snap imports Ray, it tells Ray's core worker not to put one there at all (see
ray_executor._ray): a SIGTERM that came while the core worker was being built (which holds
the GIL) found Ray's.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

POLL_S = 0.25  # the longest a body waits on Ray before it looks at `stopping` again

_DONE = object()
CONNECTED = object()  # emitted by a body once Ray is connected (see above)


class Session:
    """``body(emit, stopping)`` run in a thread: ``emit(x)`` hands ``x`` to the main thread,
    ``stopping`` is set when the main thread stops taking (the body should return soon)."""

    def __init__(self, body: Callable[[Callable[[Any], None], threading.Event], None]) -> None:
        self.stopping = threading.Event()
        self._handed: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self._body = body
        # (in the caller's context: what it says depends on it, flags or keywords)
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name="snap-ray", daemon=True
        )

    def _run(self) -> None:
        try:
            self._body(lambda item: self._handed.put((item, None)), self.stopping)
        except BaseException as err:  # (handed to the main thread, raised there)
            self._handed.put((_DONE, err))
        else:
            self._handed.put((_DONE, None))

    def __enter__(self) -> Session:
        self._thread.start()
        return self

    def outcomes(self) -> Iterator[Any]:
        """What the body emits, in order, until it returns; its error is raised here."""
        while True:
            item, err = self._handed.get()  # (a signal raises here, in the main thread)
            if err is not None:
                raise err
            if item is _DONE:
                return
            if item is CONNECTED:
                _own_handler_back(signal.SIGTERM)
                continue
            yield item

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopping.set()
        self._thread.join()  # (Ray shut down: interruptible, a second Ctrl-C goes on)


def _own_handler_back(sig: signal.Signals) -> None:
    """Set the process's own handler for ``sig`` (as Python knows it) back in the C library,
    over one a native library put there below Python (see above)."""
    handler = signal.getsignal(sig)
    if handler is not None:  # (None: not set from Python; nothing to set back)
        with contextlib.suppress(ValueError):  # (not the main thread: no handler of its own)
            signal.signal(sig, handler)
