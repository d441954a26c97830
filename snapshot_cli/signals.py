"""Termination signals as interrupts while a command runs.

SIGTERM (a scheduler preempting the job, ``kill``, a container stopped) and SIGHUP (the
terminal or the SSH session closed) raise :class:`Terminated` in the main thread, as Ctrl-C
raises KeyboardInterrupt, so a command stops the same clean way; a process forked meanwhile
gets the handlers from before back.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "Terminated",
    "after_work",
    "held",
    "in_command",
    "raise_received",
    "received",
    "settle",
    "termination_as_interrupt",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler preempting the job, ``kill``, a container stopped) or SIGHUP (the
    terminal or the SSH session closed), raised in the main thread as Ctrl-C's
    KeyboardInterrupt is: a command stops the same clean way (workers stopped, the lease let
    go, one line) instead of dying where it stood."""

    def __init__(self, signum: int = signal.SIGTERM.value) -> None:
        super().__init__(signum)
        self.signum = signum


STOPPING = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
received: list[int] = []  # the stopping signals (SIGINT too) that arrived while a command ran
# The signals that arrived as the command's work was committed or after (:func:`settle`):
# noted, not raised (the first; a second stops it as before), for the command to say.
after_work: list[int] = []
_settled = [False]
_commands = [0]  # commands running (termination_as_interrupt): they say what after_work holds


def settle(noted: list[int]) -> None:
    """The running command's work is committed: from now on the first stopping signal
    (or ``noted``, one :func:`held` took in the commit) is kept in :data:`after_work`, not
    raised, so the command ends as made (its answer printed, exit 0) and says it came; a
    second one stops it as before."""
    _settled[0] = True
    after_work.extend(noted[:1])


def in_command() -> bool:
    """Whether a command runs (it says a signal :func:`settle` kept: not to be said twice)."""
    return _commands[0] > 0


@contextlib.contextmanager
def termination_as_interrupt(resumes: bool = False) -> Iterator[None]:
    """Within: SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (elsewhere,
    nothing changes), SIGINT a KeyboardInterrupt as Python's own handler does, each recorded
    in :data:`received` (:func:`raise_received`); the handlers before are restored after. A
    signal ignored before (SIGHUP under ``nohup``) stays ignored."""

    def raise_terminated(signum: int, frame: object) -> None:
        if os.getpid() != pid:
            # A process forked meanwhile, signalled before its at-fork hook (_forked) gave it
            # the handlers from before back (a pipeline's Pool ended at once, on a loaded
            # machine): raising Terminated there was said as "Exception ignored", and the
            # worker lived on while Pool.terminate() waited for it. Take the signal as the
            # handler before would: SIG_DFL ends the process.
            _restore(raise_terminated, previous)
            os.kill(os.getpid(), signum)
            return
        if _settled[0] and not after_work:  # (the work is done: ending now stops nothing)
            after_work.append(signum)
            return
        received.append(signum)  # (a layer may raise a KeyboardInterrupt of its own: Ray's)
        if len(received) == 1:  # (``resumes``: a create's, said to be run again)
            _stop_within(signum, ended, resumes=resumes)
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

    pid, ended = os.getpid(), threading.Event()
    received.clear()
    after_work.clear()
    _settled[0] = False
    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, *STOPPING):  # (Ctrl-C recorded too: raise_received)
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, raise_terminated)
    except ValueError:  # not the main thread
        pass
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_unraisable, hook)
    _commands[0] += 1
    try:
        with not_inherited(raise_terminated, previous):
            yield
    finally:
        ended.set()
        _commands[0] -= 1
        sys.unraisablehook = hook
        _restore(raise_terminated, previous)
        _settled[0] = False


STOP_GRACE_S = 10.0  # a command a signal stopped ends within this, whatever its threads wait on


def _stop_within(
    signum: int, ended: threading.Event, grace: float = STOP_GRACE_S, resumes: bool = False
) -> None:
    """End the process ``grace`` seconds after the signal ``signum`` unless the command has
    ended by then (``ended``): its threads may wait on storage that no longer answers, each
    request until its retries are spent (a SIGTERM to ``snap verify`` was obeyed after 381
    s: 16 reads in flight, past any scheduler's grace period before its SIGKILL)."""

    def watch() -> None:
        if ended.wait(grace):
            return
        name = signal.Signals(signum).name
        print(f"snap: {'interrupted' if signum == signal.SIGINT else 'terminated'} ({name}), "
              f"and still stopping {grace:g} s later (threads waiting on storage that does not "
              "answer?): exiting without waiting for them"
              + ("; run the same command again to resume" if resumes else ""),
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(128 + signum)

    threading.Thread(target=watch, name="snap-stop-watch", daemon=True).start()


def _unraisable(hook: Any, unraisable: Any) -> None:
    """An interrupt these handlers raised where Python cannot raise it (a weakref callback,
    a ``__del__``, run by the garbage collector in the main thread) was printed as
    "Exception ignored ... KeyboardInterrupt" with a traceback, and lost: it is kept in
    :data:`received` for :func:`raise_received`, said by nothing here; anything else goes
    to ``hook``, the hook from before."""
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and received):
        hook(unraisable)


@contextlib.contextmanager
def not_inherited(handler: Any, previous: dict[int, Any]) -> Iterator[None]:
    """Within: a process forked gets ``previous`` back for each signal whose handler is
    ``handler`` (the command's, or the ``snap`` program's own set outside it). A Python
    handler a child inherits runs only between two bytecodes: a fork Pool's worker sent
    Pool.terminate()'s SIGTERM just before it blocked on its task queue slept on, and the
    pool's exit waited for it (1 create in 5 on a loaded machine)."""
    _installed.append((handler, previous))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # (a forked child's: emptied at the fork)
            _installed.remove((handler, previous))


@contextlib.contextmanager
def held() -> Iterator[list[int]]:
    """Within, in the main thread: the first SIGINT, SIGTERM or SIGHUP is noted in the list
    yielded, not raised, so a step that must not stop half-way (a commit) ends; a second is
    taken as the handler before would take it (a step that hangs can still be stopped).
    After, the handlers before are back, and a noted signal whose handler before was the
    system's default (SIGTERM outside a command) is delivered again: the process ends as it
    was asked to, the step done. Elsewhere (another thread) nothing changes."""
    noted: list[int] = []
    previous: dict[int, Any] = {}

    def note(signum: int, frame: Any) -> None:
        if os.getpid() != pid or noted:  # (forked meanwhile: as before the fork; a second)
            before = previous.get(signum)
            _restore(note, previous)
            if callable(before):
                before(signum, frame)
            elif before != signal.SIG_IGN:
                os.kill(os.getpid(), signum)
            return
        noted.append(signum)
        if _settled[0] and not after_work:  # (the command's, once its work is committed)
            after_work.append(signum)

    pid = os.getpid()
    try:
        for sig in (signal.SIGINT, *STOPPING):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, note)
    except ValueError:  # not the main thread
        pass
    try:
        with not_inherited(note, previous):
            yield noted
    finally:
        _restore(note, previous)
    for signum in noted:
        if previous.get(signum) in (signal.SIG_DFL, None):
            os.kill(os.getpid(), signum)


def raise_received() -> None:
    """Stop as a signal that arrived while a command ran asked, where the code it interrupted
    swallowed its exception: a pipeline run in this process (``--workers 0``) with a bare
    ``except:`` ran every input to the end after a Ctrl-C."""
    if received:
        raise KeyboardInterrupt() if received[0] == signal.SIGINT else Terminated(received[0])


# (handler, the handlers it replaced) of each command running: a process forked while one
# runs (a multiprocessing.Pool of the pipeline's, fork start) gets the handlers before it
# back, as Pool.terminate()'s SIGTERM must end its workers: raising Terminated there hung
# the pool's exit and printed a traceback per worker.
_installed: list[tuple[Any, dict[int, Any]]] = []


def _restore(handler: Any, previous: dict[int, Any]) -> None:
    for sig, before in previous.items():  # (None: one set outside Python, not restorable)
        if signal.getsignal(sig) is handler:
            signal.signal(sig, signal.SIG_DFL if before is None else before)


# A thread forking while a command runs holds the termination signals back across the fork
# (its mask before, by thread): a child signalled before it first ran got the signal at once,
# where the command's handler only noted it, and Python forgets the signals noted before a
# fork as the child starts (they are the parent's): it lived on. The child takes them once
# it has the handlers from before back; the parent, at once.
_masks: dict[int, set[int | signal.Signals]] = {}
_CAN_HOLD = hasattr(signal, "pthread_sigmask")


def _forking() -> None:
    if _installed and _CAN_HOLD:
        _masks[threading.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)


def _let_go() -> None:
    mask = _masks.pop(threading.get_ident(), None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forked() -> None:
    while _installed:
        _restore(*_installed.pop())
    mask = _masks.pop(threading.get_ident(), None)
    _masks.clear()  # (other threads' of the parent: gone here)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_forking, after_in_parent=_let_go, after_in_child=_forked)
