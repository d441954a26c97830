"""Who snap talks to: a ``snap`` command, or Python code calling it; and the standard streams
its processes write to.

What a call says names its options the way its caller gave them: a command's flags
(``--input``), the Python API's keywords (``inputs=``); :func:`in_command` tells which (the
CLI's edge runs each command within :func:`command`). A command's process and its worker
processes write a path that is not UTF-8 as the bytes it was given, and never fail on text
their encoding lacks (:func:`print_paths_as_given`). No click here: the writers ask too.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import io
import sys
from collections.abc import Iterator

_IN_COMMAND: contextvars.ContextVar[bool] = contextvars.ContextVar("snap_command", default=False)


def in_command() -> bool:
    """Whether a ``snap`` command runs here (in this thread, within :func:`command`)."""
    return _IN_COMMAND.get()


@contextlib.contextmanager
def command() -> Iterator[None]:
    """Within: a ``snap`` command runs (see :func:`in_command`)."""
    token = _IN_COMMAND.set(True)
    try:
        yield
    finally:
        _IN_COMMAND.reset(token)


def named(flag: str, keyword: str) -> str:
    """``flag`` (``--input``) in a command, ``keyword`` (``inputs=``) in Python: an API
    error that named a flag sent its reader looking for one."""
    return flag if in_command() else keyword


AS_GIVEN = "snapshot_cli.as_given"  # the error handler of print_paths_as_given
# Python's own choices for its standard streams (a locale's, PYTHONIOENCODING's, UTF-8
# mode's): replaced; any other is the user's, and kept.
_DEFAULT_ERRORS = ("strict", "surrogateescape", "backslashreplace")


def _as_given(err: UnicodeError) -> tuple[bytes, int]:
    """Encoding error handler: a lone surrogate U+DC80..U+DCFF (a byte of a path that is not
    text, as Python decodes it) is that byte, as ``surrogateescape`` writes it; any other
    character the encoding lacks is escaped (``\\xe9``, ``\\u2026``), as
    ``backslashreplace`` writes it. Neither fails, and no path shows as ``\\udcff``."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = bytearray()
    for ch in err.object[err.start : err.end]:
        if "\udc80" <= ch <= "\udcff":
            out.append(ord(ch) - 0xDC00)
        else:
            out += ch.encode("ascii", "backslashreplace")
    return bytes(out), err.end


def print_paths_as_given() -> None:
    """Print a path that is not UTF-8 (Python holds its bytes as lone surrogates) as the bytes
    the user typed, on stdout and stderr alike (stderr showed ``o\\udcff`` where stdout
    showed the name), and text the encoding lacks escaped, never failing on either: a
    pipeline's ``print("café")`` under ``PYTHONIOENCODING=ascii`` or ``LC_ALL=C`` failed its
    import in worker processes. An ASCII stream is taken as UTF-8, as click takes it for
    what it prints (else click's lines and the log's showed one path two ways). For a
    command's process and each of its worker processes (the pipeline's prints go to their
    stderr)."""
    codecs.register_error(AS_GIVEN, _as_given)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in _DEFAULT_ERRORS:
            with contextlib.suppress(OSError, ValueError):  # (closed; LookupError: unknown)
                ascii_ = codecs.lookup(stream.encoding).name == "ascii"
                stream.reconfigure(encoding="utf-8" if ascii_ else None, errors=AS_GIVEN)
