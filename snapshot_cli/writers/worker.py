"""A worker process of the local executor, and the task entry point every executor shares.

The local executor starts each worker as a fresh interpreter running :func:`main`
(``python -c "...worker import main; main(PARENT_PID)"``), not through ``multiprocessing``:
a ``multiprocessing`` "spawn" child first re-runs the parent's ``__main__`` script, so a
script that calls ``snap.create`` without an ``if __name__ == "__main__":`` guard would call
it again in every worker, where it waits forever for the lease its parent holds. Here no
user code runs in a worker except the pipeline function (loaded by name, or unpickled by
value) and the modules it imports.

Protocol: one JSON document per line. The parent writes to the worker's stdin a hello
``{"sys_path", "job"}`` then one ``{"task"}`` per task; end of input means stop. The worker
writes to its original stdout ``{"ready"}`` once the function is loaded, ``{"progress":
[records, bytes]}`` while a task runs, and ``{"ok": result}`` or ``{"error": {type,
message}}`` when it ends, and ``{"record": {...}}`` for a log record the parent handles
(:mod:`.worker_logs`). Anything the pipeline prints (to ``sys.stdout`` or file
descriptor 1) goes to stderr, so that it cannot break the protocol or ``--json`` output,
a line at a time: see :func:`_whole_lines`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import IO, Any

from .. import cli_exit, console, errors, storage
from ..errors import SnapError
from . import worker_logs
from .cell_names import cells_named
from .task import Job, ProgressFn, TaskSpec, load_job_function, run_task

IMPORTING = False  # True while a worker loads the pipeline: a snap.create then is refused


def outcome(
    job: dict[str, Any], task: dict[str, Any], report: ProgressFn | None = None
) -> dict[str, Any]:
    """Run one task; never raises: ``{"ok": result}`` or ``{"error": {type, message}}``.

    The entry point of every executor's workers (on Ray, through ray_code.task_outcome).
    """
    try:
        return {"ok": run_task(Job(**job), TaskSpec(**task), report)}
    except SnapError as err:
        return error_outcome(err)
    except OSError as err:
        return error_outcome(storage.fault(err, f"{job['output']} (task {task['index']})"))
    except KeyboardInterrupt:  # raised by the function: an interrupt, as in the parent
        return {"error": {"type": "KeyboardInterrupt", "message": f"task {task['index']}"}}
    except Exception:
        return {"error": {"type": "internal", "message": traceback.format_exc()}}


def error_outcome(err: SnapError) -> dict[str, Any]:
    return {"error": {"type": type(err).__name__, "message": str(err)}}


def rebuild_error(err: dict[str, Any]) -> BaseException:
    """The exception a worker reported, raised again in the parent."""
    if err["type"] == "KeyboardInterrupt":
        return KeyboardInterrupt(err["message"])
    cls = getattr(errors, err["type"], None)
    if isinstance(cls, type) and issubclass(cls, SnapError):  # (a notebook's cells named)
        return cls(cells_named(err["message"]))
    return RuntimeError(f"internal error in a worker process (a bug in snap):\n{err['message']}")


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the parent dies (even by kill -9)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _protocol_streams() -> tuple[IO[bytes], IO[bytes]]:
    """Keep stdin/stdout for the protocol; point fd 0 at /dev/null and fd 1 at stderr (at
    /dev/null if the command's stderr was closed, ``2>&-``: then the protocol's duplicate
    took fd 2, and the pipeline's prints went into the parent's pipe)."""
    if cli_exit.fd_closed(2):
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 2:
            os.dup2(devnull, 2)
            os.close(devnull)
    incoming = os.fdopen(os.dup(0), "rb")
    outgoing = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return incoming, outgoing


def _whole_lines() -> None:
    """Write what the pipeline prints a line at a time. Under ``PYTHONUNBUFFERED=1`` (common in
    containers and CI) ``print("record", i)`` was four writes, and two workers' lines came out
    spliced on the command's stderr ("recordrecord 4 ... 5"); without it, ``sys.stdout`` (a
    pipe when the worker started) held 8 KiB, so prints showed up late, in bursts. A line is
    now one write, whole beside other workers' (a pipe's writes of up to 4 KiB are atomic)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # not one a sitecustomize put there
            with contextlib.suppress(OSError, ValueError):  # closed
                stream.reconfigure(line_buffering=True, write_through=False)


def main(parent_pid: int) -> None:
    """Serve tasks from the parent until it closes our stdin."""
    global IMPORTING
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    incoming, outgoing = _protocol_streams()
    _whole_lines()
    console.print_paths_as_given()  # as the command's: a print("café") under LC_ALL=C failed
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        line = json.dumps(message).encode("utf-8") + b"\n"
        with lock:  # (a record logged by another thread: one line each)
            outgoing.write(line)
            outgoing.flush()

    hello = json.loads(incoming.readline())
    # records to the parent, which handles them as its own (worker_logs): snap's warnings
    # said once for the create, the pipeline's as the parent's logging configuration says
    worker_logs.install(send, int(hello.get("log_level", logging.WARNING)))
    sys.path[:] = hello["sys_path"]  # as multiprocessing does: the parent's imports work here
    job = hello["job"]
    IMPORTING = True  # a module that calls snap.create when imported would wait for us
    try:
        load_job_function(Job(**job))
    except SnapError as err:
        send(error_outcome(err))
        return
    finally:
        IMPORTING = False
    send({"ready": True})
    for line in incoming:
        task = json.loads(line)["task"]
        send(outcome(job, task, lambda records, nbytes: send({"progress": [records, nbytes]})))
    _exit_now()


def _exit_now() -> None:
    """End the process without the interpreter's teardown, after the ``atexit`` hooks (the
    pipeline's too: logging flushes there) and stdio: every result is written and reported
    by now, and tearing down pyarrow and the pipeline's modules took 0.1-0.2 s, which the
    parent waits for at the end of every create. Threads the pipeline left running end
    with the process; its ``multiprocessing`` children get the command's grace to end
    (``multiprocessing``'s exit hook waited for them for good: the create hung)."""
    worker_logs.restore()  # (the parent reads no more: records on stderr again)
    if children := cli_exit.stray_processes():
        deadline = time.monotonic() + cli_exit.EXIT_GRACE_S
        cli_exit.end_processes(children, deadline, logging.getLogger("snapshot_cli").warning)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


__all__ = ["IMPORTING", "main", "outcome", "rebuild_error"]
