"""How the command line answers: a SnapError or an OS fault as one ``snap: error:`` line (a
traceback only with ``--debug``), log lines on stderr, JSON documents on stdout, and paths
printed as the bytes the user typed."""

from __future__ import annotations

import functools
import io
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import storage
from .errors import SnapError

F = TypeVar("F", bound=Callable[..., Any])


def answer_errors(fn: F) -> F:
    """Run a command; SnapError → message on stderr and exit 1 (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool((click.get_current_context().obj or {}).get("debug"))
        try:
            return fn(*args, **kwargs)
        except SnapError as err:
            if debug:
                raise
            click.echo(f"snap: error: {err}", err=True)
            sys.exit(err.exit_code)
        except KeyboardInterrupt:
            if debug:
                raise
            click.echo("snap: interrupted; run the same command again to resume", err=True)
            sys.exit(130)
        except OSError as err:  # a fault no layer below named: still one line, not a trace
            if debug:
                raise
            click.echo(f"snap: error: {storage.fault(err, 'the snapshot')}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def setup_logging(quiet: bool) -> None:
    logger = logging.getLogger("snapshot_cli")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("snap: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def print_paths_as_given() -> None:
    """Print a path that is not UTF-8 (Python holds its bytes as lone surrogates) as the bytes
    the user typed, as a UTF-8 locale's ``surrogateescape`` does, instead of failing on it."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            utf8 = stream.encoding.lower().replace("-", "") == "utf8"
            stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")
