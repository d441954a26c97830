"""Log records of a worker process, handled by the parent: snap's own, and every record that
finds no handler in the worker (the pipeline's, a storage library's), sent over the worker's
protocol (``{"record": {...}}``) and handled there as if logged there.

The pipeline's logging configuration is the parent's: a notebook (or a script) that called
``logging.basicConfig(level=logging.INFO)`` before ``snap.create(f, workers=2)`` got its
format and its INFO lines from ``workers=0`` only; in workers, where nothing configured
logging, Python's last resort printed the WARNING ones bare, on a stderr the notebook does
not show. A worker starts at the parent's root level and sends what no handler of its own
takes; a pipeline that configures logging in the worker itself (in its module, or its
function) keeps its own handlers there. snap's own warnings are said once per create, not
once per worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import cli_logs

Send = Callable[[dict[str, Any]], None]
_PLAIN = ("name", "levelno", "levelname", "pathname", "filename", "module", "lineno",
          "funcName", "created", "msecs", "process", "processName", "thread",
          "threadName")  # fmt: skip


class ToParent(logging.Handler):
    """Sends each record to the parent; where it can no longer (the pipe gone: the parent
    ended), handles it here as a command would, on stderr."""

    def __init__(self, send: Send) -> None:
        super().__init__(logging.NOTSET)
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send({"record": as_message(record)})
        except Exception:  # noqa: BLE001 - said on stderr instead
            restore()
            logging.getLogger(record.name).handle(record)


def as_message(record: logging.LogRecord) -> dict[str, Any]:
    """``record`` as JSON values: its message formatted, its traceback as text."""
    plain = {key: getattr(record, key, None) for key in _PLAIN}
    text = record.exc_text
    if record.exc_info and not text:
        text = logging.Formatter().formatException(record.exc_info)
    return {**plain, "msg": record.getMessage(), "exc_text": text,
            "stack_info": record.stack_info}  # fmt: skip


def install(send: Send, level: int) -> None:
    """In a worker: snap's records, and those no handler takes, to the parent; the root
    logger at the parent's ``level`` (records below it are not made)."""
    ours = logging.getLogger("snapshot_cli")
    ours.handlers[:] = [ToParent(send)]
    ours.setLevel(logging.WARNING)  # (snap's INFO lines are the command's to say)
    ours.propagate = False
    logging.getLogger().setLevel(level)
    cli_logs.drop_unconfigured()  # (a storage library's records: the parent's to say)
    logging.lastResort = ToParent(send)


def restore() -> None:
    """In a worker whose parent reads no more: records on its stderr, as a command's."""
    cli_logs.setup_logging(quiet=True)
    cli_logs.route_library_logs(debug=False)


class Relayed:
    """The parent's side: a worker's record handled as if logged here (this process's
    handlers and levels); snap's own said once for the whole create."""

    def __init__(self) -> None:
        self.said: set[tuple[int, str]] = set()

    def handle(self, message: dict[str, Any]) -> None:
        record = logging.makeLogRecord({**message, "args": None})
        logger = logging.getLogger(record.name)
        if not logger.isEnabledFor(record.levelno):
            return
        if record.name.split(".", 1)[0] == "snapshot_cli":  # (once, not once per worker)
            if (key := (record.levelno, record.msg)) in self.said:
                return
            self.said.add(key)
        logger.handle(record)
