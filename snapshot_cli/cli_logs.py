"""Log records in a command (and in its worker processes): snap's own as ``snap: ...`` lines
on stderr, the storage libraries' as one line each (``snap: gcsfs: ...``), and the rest, the
pipeline's own, as Python shows them where nothing is configured, or as the pipeline's
logging configuration says.

Records of loggers that reach no handler go to Python's last-resort handler, which is
replaced here (:func:`route_library_logs`) rather than given a handler on the root logger:
one there made a pipeline's ``logging.basicConfig`` a no-op in the command (it configures
only a root logger without handlers), so its format and its INFO lines were lost with
``--workers 0`` and kept in worker processes, and its records read ``snap: mine: ...``, as if
snap had said them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .progress import around
from .render import plain

# The libraries snap drives to reach storage: their records are snap's doing, said so.
STORAGE_LIBRARIES = ("gcsfs", "s3fs", "adlfs", "fsspec", "aiobotocore", "botocore", "boto3",
                     "aiohttp", "urllib3", "requests", "google", "pyarrow", "hdfs")  # fmt: skip


def setup_logging(quiet: bool) -> None:
    """snap's log lines on stderr (``snap: warning: ...``): INFO and up, unless ``quiet``."""
    logger = logging.getLogger("snapshot_cli")
    logger.handlers.clear()
    handler = _Stderr()  # (the stderr of the command running: CliRunner swaps it)
    handler.setFormatter(_Printable("snap: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


class _Printable(logging.Formatter):
    """A log line with its control characters escaped (see :func:`printable`); a warning's
    ``snap: warning:``, as snap's ``warnings.warn`` lines are (a script that looks for them
    finds both)."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        note = line.startswith("snap: note: ")  # (a note logged as a warning says it is one)
        if record.levelno >= logging.WARNING and line.startswith("snap: ") and not note:
            line = "snap: warning: " + line[len("snap: ") :]
        return plain(line)


def storage_library(name: str) -> bool:
    """Whether logger ``name`` is one of :data:`STORAGE_LIBRARIES`' or below one."""
    return name.split(".", 1)[0] in STORAGE_LIBRARIES


class _OneLine(logging.Formatter):
    """A storage library's log record as one line (``snap: gcsfs: ...``): its traceback only
    with ``--debug``. Without a handler, Python prints such records with their traceback
    (gcsfs logs one as it gives up on a request, before snap says what failed). Any other
    record (the pipeline's) as Python's last resort shows it: its message, and its
    traceback."""

    def __init__(self, debug: bool) -> None:
        super().__init__("snap: %(name)s: %(message)s")
        self.debug = debug
        self.theirs = logging.Formatter("%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not storage_library(record.name):
            return self.theirs.format(record)
        if self.debug:
            return super().format(record)
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return plain(" ".join(super().format(record).split()))
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (as Python's last-resort
    handler does: CliRunner swaps it), round a progress line drawn there (progress.py)."""

    @property
    def stream(self) -> Any:
        return around(sys.stderr)

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


class _Once(logging.Filter):
    """A storage library's record said once a process: gcsfs logs the same line as each
    request gives up (16 of "_request out of retries on exception: Cannot connect to host"
    came before snap's one error, which says it)."""

    def __init__(self) -> None:
        super().__init__()
        self.said: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not storage_library(record.name):
            return True
        key = (record.name, " ".join(record.getMessage().split()))
        if key in self.said:
            return False
        self.said.add(key)
        return True


def one_line_handler(debug: bool) -> logging.Handler:
    """A handler of warnings and errors on stderr (see _OneLine); a storage library's record
    once (:class:`_Once`), unless ``debug``."""
    handler = _Stderr()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine(debug))
    if not debug:
        handler.addFilter(_Once())
    return handler


def route_library_logs(debug: bool) -> None:
    """Records of warnings and errors no handler takes go to stderr (see _OneLine): Python's
    last-resort handler, replaced (a second call replaces it again). The storage libraries'
    own handlers that ``import snapshot_cli`` gave them (one line where nothing is
    configured, never a traceback) are removed: here ``--debug`` decides."""
    drop_unconfigured()
    logging.lastResort = one_line_handler(debug)


def drop_unconfigured() -> None:
    """Remove the storage libraries' handlers ``import snapshot_cli`` gave them, so that
    their records reach the last-resort handler where nothing else takes them."""
    from . import _Unconfigured  # (the package is imported: this module is in it)

    for name in STORAGE_LIBRARIES:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, _Unconfigured)]:
            logger.removeHandler(handler)
