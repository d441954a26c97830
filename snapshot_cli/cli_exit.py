"""How the ``snap`` program ends: the status of a reader gone away (141, as SIGPIPE),
the wait for threads a pipeline left running (:func:`exit_watch`), and the command group
run as the program (:func:`run`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from . import signals


def quiet_exit_on_closed_stdout() -> None:
    """Stop as a Unix tool does when its reader stops reading: no message, the status of a
    process ended by SIGPIPE (141), and no second error when Python flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(128 + signal.SIGPIPE)


CLOSED_STDOUT = (  # (it was exit 0, the answer lost unsaid; `ls >&-` fails too)
    "cannot write to standard output: it is closed (>&-), so the command's answer was not "
    "shown (what it did is done); give it one: > FILE, or > /dev/null to discard it"
)


def fd_closed(fd: int) -> bool:
    """Whether file descriptor ``fd`` is closed (``>&-``, ``2>&-``)."""
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


EXIT_GRACE_S = 5.0  # how long a finished command waits for threads the pipeline left running
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
answered = False  # the command's answer was written (cli_io): a signal after it stops no work


@contextlib.contextmanager
def exit_watch(grace: float = EXIT_GRACE_S) -> Iterator[None]:
    """Exit when the command is done, even if the pipeline (run in this process with
    ``--workers 0``) left a thread running that never ends: Python waits for every such
    thread before it exits, so ``snap create`` printed its summary and hung. The threads get
    ``grace`` seconds to end; then a note names them and the process exits with the
    command's status."""
    code: object = 0
    previous: dict[int, Any] = {signum: signal.getsignal(signum) for signum in STOPS}

    def stop(signum: int, frame: Any) -> None:  # (outside a command's own handlers)
        if answered:  # (after the answer: "Aborted!", or killed by the signal, with no word)
            _leave(0)
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in STOPS:
        signal.signal(signum, stop)
    try:
        with signals.not_inherited(stop, previous):  # (a fork gets SIG_DFL back, not stop)
            yield
    except SystemExit as done:
        code = done.code
        raise
    except BaseException:  # a traceback (--debug): Python's status for it
        code = 1
        raise
    finally:
        strays = [t for t in threading.enumerate() if not t.daemon and t.is_alive()]
        strays = [t for t in strays if t is not threading.main_thread()]
        if strays or stray_processes():
            status = code if isinstance(code, int) else 0 if code is None else 1
            for signum in STOPS:  # (a Ctrl-C in the wait printed Python's traceback)
                signal.signal(signum, lambda *_: _leave(status))
            args = (strays, status, grace)
            threading.Thread(target=_exit_after, args=args, name="snap-exit", daemon=True).start()
        elif answered:  # the work done and said: a signal in the interpreter's exit, its
            for signum in STOPS:  # handlers gone, ended it by the signal (-2) after a commit
                signal.signal(signum, signal.SIG_IGN)


def stray_processes() -> list[Any]:
    """The ``multiprocessing`` processes still running that Python's exit would wait for
    (not daemon): a ``Process`` the pipeline started and never joined held ``snap create``
    (and each worker) until it ended, without a word. snap starts none of its own so."""
    mp = sys.modules.get("multiprocessing")  # (not imported: none)
    try:
        return [p for p in mp.active_children() if not p.daemon] if mp else []
    except Exception:  # (a child's state unreadable: as if none)
        return []


def end_processes(children: list[Any], deadline: float, say: Callable[[str], None]) -> None:
    """Wait for ``children`` until ``deadline``; ``say`` which are still running, then end
    them (SIGTERM, then SIGKILL a second later). Said first: once they end, the main thread
    (in ``multiprocessing``'s exit hook, joining them) ends the process, cutting the note."""
    for p in children:
        p.join(max(0.0, deadline - time.monotonic()))
    left = sorted((p for p in children if _running(p)), key=lambda p: p.pid or 0)
    if not left:
        return
    shown = ", ".join(f"{p.name}, pid {p.pid}" for p in left[:5]) + (
        ", ..." if len(left) > 5 else ""
    )
    n = f"{len(left)} process{'es' if len(left) > 1 else ''}"
    say(
        f"the pipeline left {n} running ({shown}) after its work was done; ended "
        f"{'them' if len(left) > 1 else 'it'} (join the processes it starts, or make them "
        "daemon processes)"
    )
    for p in left:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in left:
        with contextlib.suppress(Exception):
            p.join(1.0)
            if p.is_alive():
                p.kill()


def _running(p: Any) -> bool:
    """``p.is_alive()``, but not for a child the main thread reaped meanwhile (joining it in
    ``multiprocessing``'s exit hook): its poll here then finds no child and says alive."""
    if not p.is_alive():
        return False
    try:
        os.kill(p.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (EPERM: there, not ours to signal)
        return True
    return True


def _note(text: str) -> None:
    print(f"snap: note: {text}", file=sys.stderr, flush=True)


def _exit_after(strays: list[threading.Thread], status: int, grace: float) -> None:
    deadline = time.monotonic() + grace
    for thread in strays:
        thread.join(max(0.0, deadline - time.monotonic()))
    end_processes(stray_processes(), deadline, _note)
    left = [t.name for t in strays if t.is_alive()]
    if not left:
        return  # the interpreter exits as usual (multiprocessing's join: none left to wait on)
    shown = ", ".join(left[:5]) + (", ..." if len(left) > 5 else "")
    n, them = f"{len(left)} thread{'s' if len(left) > 1 else ''}", "them" if len(left) > 1 else "it"
    said = (  # (snap's own, waiting on storage gone silent: no pipeline of the user's to fix)
        f"snap's own {n} ({shown}) still ran {grace:g} s after the command ended; exiting "
        f"without waiting for {them}"
        if all(name.startswith("snap-") for name in left)
        else f"the pipeline left {n} running ({shown}) {grace:g} s after the command ended; "
        f"exiting without waiting for {them} (stop or join threads in the function, or make "
        "them daemon threads)"
    )
    print(f"snap: note: {said}", file=sys.stderr)
    _leave(status)


def _leave(status: int) -> None:
    """End the process now with ``status``, its output written: the command is done."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def run(command: click.Group) -> None:
    """Run ``snap``'s command group as the program (``main``)."""
    with exit_watch():  # not held up at exit by a thread the pipeline left running
        try:
            command(obj={"program": True})  # (click names it as it was run: snap, python -m)
        except OSError as err:  # click's own writes (--help, --version) to a full device
            from .cli_io import stdout_failed  # (it imports this module)

            stdout_failed(err, debug="--debug" in sys.argv[1:])
        except SystemExit as done:  # (click answers a broken pipe of its own writes, `snap
            # --help | head -1`, by wrapping stdout so and exiting 1: snap's commands, 141;
            # told by its class's name: click 8.3 has _PacifyFlushWrapper, and its public
            # name warns of its deprecation)
            if done.code == 1 and type(sys.stdout).__name__.lstrip("_") == "PacifyFlushWrapper":
                quiet_exit_on_closed_stdout()
            raise
