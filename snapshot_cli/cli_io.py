"""How the command line answers: a SnapError or an OS fault as one ``snap: error:`` line (a
traceback only with ``--debug``), log lines on stderr, JSON documents on stdout, and paths
printed as the bytes the user typed."""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import select
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import click

from . import cli_exit, console, signals
from .cli_exit import CLOSED_STDOUT, fd_closed, quiet_exit_on_closed_stdout
from .cli_logs import route_library_logs, setup_logging
from .cli_words import in_command_words
from .errors import SnapError, absolute_path
from .progress import Round
from .render import one_line, plain, printable
from .shortages import short_of_memory  # (here: with no room, importing it would fail too)
from .signals import received, termination_as_interrupt

F = TypeVar("F", bound=Callable[..., Any])


def stopped(stop: KeyboardInterrupt, resumes: bool = False) -> NoReturn:
    """Exit as ``stop`` (Ctrl-C, or a SIGTERM/SIGHUP raised as :class:`~.signals.Terminated`)
    asks: one line (to run it again where that resumes, ``create``; or where it was, a
    ``snap_while`` its layer set) and 128 + the signal's number (the one received)."""
    signum = received[0] if received else getattr(stop, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({name})"
    if (where := getattr(stop, "snap_while", None)) is not None:  # (a layer said where)
        said = f"{said} {where}"
    elif resumes:
        said = f"{said}; run the same command again to resume"
    with contextlib.suppress(OSError):  # (SIGHUP: the terminal may be gone)
        click.echo(f"snap: {said}", err=True)
    sys.exit(128 + signum)


def _say_after_work() -> None:
    """Say a signal that came as the command's work was committed or after
    (:func:`.signals.settle`), which it did not stop: the command ends as made, exit 0."""
    if signals.after_work:
        name = signal.Signals(signals.after_work[0]).name
        said = "a Ctrl-C (SIGINT)" if name == "SIGINT" else name
        with contextlib.suppress(OSError):
            click.echo(f"snap: warning: {said} came as the work was committed, which it did "
                       "not stop: it is done", err=True)  # fmt: skip


def _in_its_words(err: SnapError) -> str:
    """``err``'s message, the loader's advice in it named as this command's flags."""
    return in_command_words(str(err), click.get_current_context().info_name)


def answer_errors(fn: F) -> F:
    """Run a command; any error → one line on stderr and its exit code (traceback with
    --debug): a SnapError's message, an OS error's cause, or an unexpected error's class."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool((click.get_current_context().obj or {}).get("debug"))
        resumes = click.get_current_context().info_name == "create"  # (run again, it resumes)
        cli_exit.answered = False  # (one process may run several: CliRunner, a notebook)
        try:
            with termination_as_interrupt(resumes), console.command():
                result = fn(*args, **kwargs)
                _say_after_work()
            if sys.stdout is None:  # (closed by the shell, `>&-`: the answer went nowhere)
                raise OutputError(CLOSED_STDOUT)
            with _writing_stdout():  # a closed pipe shows here, not at the interpreter's exit
                sys.stdout.flush()
            return result
        except SnapError as err:
            if debug:
                raise
            click.echo(f"snap: error: {plain(_in_its_words(err))}", err=True)
            sys.exit(err.exit_code)
        except KeyboardInterrupt as stop:
            if debug:
                raise
            if cli_exit.answered:  # (after the command's answer: its work is done)
                sys.exit(0)
            stopped(stop, resumes=resumes and not signals.after_work)  # (not: work committed)
        except OSError as err:  # a fault no layer below named: still one line, not a trace
            if isinstance(err, BrokenPipeError) and _stdout_closed():
                quiet_exit_on_closed_stdout()
            if debug:
                raise
            from . import storage  # (fsspec: not imported by `snap --help`)

            reading = click.get_current_context().info_name not in ("create", "gc")
            click.echo(f"snap: error: {storage.fault(err, 'the snapshot', reading)}", err=True)
            sys.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors (exit 2), --help, aborts
        except Exception as err:  # none of the above: a bug in snap, still not a traceback
            if debug:
                raise
            short: SnapError | None = short_of_memory(err)  # (memory, threads, room to load)
            if short is None and not isinstance(err, ImportError):
                from .faults import no_answer  # (fsspec: not imported by `snap --help`)

                short = no_answer(err, "the snapshot")  # (a silent storage no layer named)
            if short is not None:
                click.echo(f"snap: error: {plain(_in_its_words(short))}", err=True)
                sys.exit(short.exit_code)
            if isinstance(err, ImportError):  # (the pipeline's are PipelineLoadErrors)
                said = plain(" ".join(str(err).split()))
                click.echo(f"snap: error: a library snap needs cannot be imported: {said} "
                           "(the installed packages' versions do not work together: install "
                           "versions that do, as the message says, then run the same command "
                           "again)", err=True)  # fmt: skip
                sys.exit(1)
            text = str(err)
            if "Traceback (most recent call last):" in text:  # (a worker's, said in full: 182 KB
                lines = [line for line in text.splitlines() if line.strip()]  # on one line)
                text = f"{lines[0]} {lines[-1]}"  # what it is, and the error it ends with
            text = " ".join(text.split())
            if isinstance(err, Warning):  # a warning this process's filter made an error
                click.echo(
                    f"snap: error: {type(err).__name__}: {text} (a warning, made an error by "
                    "the warnings filter: -W or PYTHONWARNINGS; use 'default' for it to be "
                    "said and the command to go on)",
                    err=True,
                )
                sys.exit(1)
            click.echo(
                f"snap: error: unexpected {type(err).__name__}{f': {text}' if text else ''} "
                "(a bug in snap: run with --debug for the traceback, and please report it)",
                err=True,
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _stdout_closed() -> bool:
    """Whether the reader of stdout went away (``snap head ... | head``), not some other pipe."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(mask & select.POLLERR for _, mask in poller.poll(0))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the user's code runs here (importing the pipeline, ``--inputs-from``, tasks with
    ``--workers 0``), what it prints goes to stderr, from Python and from C (file descriptor
    1): stdout holds the command's result only, which ``--json`` scripts parse. (Worker
    processes send theirs to stderr on their own.) A stdout the shell closed (``>&-``) is
    stderr meanwhile too, then closed again."""
    if sys.stdout is not None:
        sys.stdout.flush()
    saved, opened = None, False
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        stdout_closed = sys.stdout is None and fd_closed(1)
        own = sys.stderr is None and fd_closed(2)  # `2>&-`: what C code prints goes nowhere
        # (the null device: fd 1 itself, if that is closed too; -1: under CliRunner)
        target = os.open(os.devnull, os.O_WRONLY) if own else 2 if sys.stderr.fileno() == 2 else -1
        if target >= 0:
            if stdout_closed:
                if target != 1:
                    os.dup2(target, 1)
                opened = True
            elif sys.stdout is not None and sys.stdout.fileno() == 1:
                saved = os.dup(1)
                os.dup2(target, 1)
            if own and target != 1:
                os.close(target)
    devnull = None if sys.stderr is not None else open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    try:  # (its prints round a progress line drawn there: progress.Round)
        with contextlib.redirect_stdout(devnull or Round(sys.stderr)):
            yield
    finally:
        if devnull is not None:
            devnull.close()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
        elif opened:
            os.close(1)


class OutputError(SnapError):
    """Standard output could not be written (``> /dev/full``, a full disk, a closed file):
    said as such, not as a fault of the snapshot the command read."""


@contextlib.contextmanager
def _writing_stdout() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise  # (its reader went away: the quiet exit 141 of answer_errors)
    except OSError as err:
        raise OutputError(f"cannot write to standard output: {cannot_write(err)}") from err


def cannot_write(err: OSError) -> str:
    """An OS error as "No space left on device (ENOSPC)"."""
    name = errno.errorcode.get(err.errno or 0)
    return f"{err.strerror or err}{f' ({name})' if name else ''}"


def stdout_failed(err: OSError, debug: bool) -> None:
    """An OS error out of click's own writes (``snap --help > /dev/full``): one line."""
    if debug:
        raise err
    if isinstance(err, BrokenPipeError):
        quiet_exit_on_closed_stdout()
    with contextlib.suppress(OSError, AttributeError):
        print(f"snap: error: cannot write to standard output: {cannot_write(err)}",
              file=sys.stderr)  # fmt: skip
    sys.exit(1)


def echo_lines(lines: list[str]) -> None:
    """A command's lines, each on one line: a newline or tab in a name it shows (a path)
    escaped, as input names are (it split ``inspect``'s row of a snapshot in two)."""
    cli_exit.answered = True  # (before: a signal while it is written interrupts no work)
    with _writing_stdout():
        for line in lines:
            _echo(printable(one_line(line)) + "\n")


def emit_json(doc: Any) -> None:
    cli_exit.answered = True
    with _writing_stdout():
        _echo(json.dumps(_as_utf8(doc), indent=2, sort_keys=False) + "\n")


PIPE_CHUNK = 4096  # characters written at a time (a pipe takes at least 4 KiB whole)


def _echo(text: str) -> None:
    """``text`` to stdout, a part at a time: at once, a document larger than the pipe (``snap
    head -n 5000 --json | head -c 100``) was cut short when the reader went away, Python
    reported the write whole and snap exited 0, where it exits 141 (the next part fails)."""
    for start in range(0, len(text), PIPE_CHUNK):
        click.echo(text[start : start + PIPE_CHUNK], nl=False)


def _as_utf8(value: Any) -> Any:
    """``value`` with its text as the bytes the OS gave, read as UTF-8: a path Python decoded
    under a locale that is not UTF-8 (``LC_ALL=C PYTHONUTF8=0``) holds lone surrogates, which
    JSON gave as ``"\\udcc3\\udcbc"`` for ``ü`` (jq showed garbage, strict parsers refused
    it); bytes that are no UTF-8 are written ``\\xff``, as text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raw = value.encode("utf-8", "surrogateescape")
            return raw.decode("utf-8", "backslashreplace")
        return value
    if isinstance(value, dict):
        return {_as_utf8(k): _as_utf8(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_utf8(v) for v in value]
    return value


def route_warnings(debug: bool) -> None:
    """snap's own Python warnings (raised by snap's code, or pointing at a line of it) as
    one ``snap: warning:`` line each, not Python's two lines of a file, a line number and a
    line of snap's source; with ``--debug``, Python's own form. Every other warning (the
    pipeline's, at ``--workers 0``, as its worker processes print it) in Python's own form:
    its category and the file and line that raised it, which are the user's to look at."""
    if debug:
        return

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:  # fmt: skip
        stream = file if file is not None else sys.stderr
        if stream is None:  # (stderr closed: as Python's own, nothing)
            return
        with contextlib.suppress(OSError):
            if _snaps_warning(filename):
                stream.write(f"snap: warning: {' '.join(str(message).split())}\n")
            else:
                stream.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _snaps_warning(filename: str) -> bool:
    """Whether the warning being shown is snap's: it points at a line of snap, or the code
    that called ``warnings.warn`` is snap's (which points it at its caller's line)."""
    if absolute_path(filename).startswith(_PACKAGE):
        return True
    frame: Any = sys._getframe(2)  # (show's caller: warnings' own machinery, then warn's)
    while frame is not None and frame.f_globals.get("__name__") == "warnings":
        frame = frame.f_back
    here = frame.f_code.co_filename if frame is not None else ""
    return absolute_path(here).startswith(_PACKAGE)


def configure_output(debug: bool) -> None:
    """Before any command: paths printed as given, logs and snap's warnings one line each,
    no colour where ``NO_COLOR`` is set (no-color.org) or the terminal is dumb."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and (os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb"):
        ctx.color = False
    console.print_paths_as_given()
    setup_logging(quiet=True)  # (create's own call makes it say its progress)
    route_library_logs(debug)
    route_warnings(debug)
