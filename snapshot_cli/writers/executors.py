"""Executors run tasks. The writer only knows the :class:`Executor` interface.

- ``InProcessExecutor`` (``workers=0``): tasks run one after another in this process; for
  tests, debugging (breakpoints work) and functions that cannot be imported by name.
- ``LocalExecutor`` (``workers=N``): N spawned worker processes on this machine.

- ``RayExecutor`` (``executor="ray"``, in :mod:`.ray_executor`): Ray tasks on a cluster; it
  ships :class:`Job` and :class:`TaskSpec` as the JSON values they are.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import errors
from ..errors import PipelineError, SnapError
from .task import Job, ProgressFn, TaskSpec, run_task

ResultFn = Callable[[dict[str, Any]], None]


class Executor(ABC):
    """Runs tasks of a job and reports each result as it completes."""

    name = "abstract"

    @abstractmethod
    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        """Run every task; call ``on_result`` per finished task (any order).

        Raises the first task's error (a SnapError) after stopping the remaining tasks.
        """


class InProcessExecutor(Executor):
    name = "inprocess"

    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        for task in tasks:
            on_result(run_task(job, task, on_progress))


# --- worker process side -------------------------------------------------------------------

_progress_queue: Any = None


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the parent dies (even by kill -9)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _init_worker(progress_queue: Any, parent_pid: int) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C


def _report(records: int, nbytes: int) -> None:
    if _progress_queue is not None:
        _progress_queue.put((records, nbytes))


def _worker_run(job: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """Entry point in the worker: never raises, returns the result or the error as data."""
    try:
        return {"ok": run_task(Job(**job), TaskSpec(**task), _report)}
    except SnapError as err:
        return {"error": {"type": type(err).__name__, "message": str(err)}}
    except OSError as err:
        return {"error": {"type": "StorageError", "message": f"task {task['index']}: {err}"}}
    except Exception:
        return {"error": {"type": "internal", "message": traceback.format_exc()}}


def _rebuild_error(err: dict[str, Any]) -> BaseException:
    cls = getattr(errors, err["type"], None)
    if isinstance(cls, type) and issubclass(cls, SnapError):
        return cls(err["message"])
    return RuntimeError(f"internal error in a worker process (a bug in snap):\n{err['message']}")


class LocalExecutor(Executor):
    """Runs tasks in ``workers`` spawned processes (spawn: no state inherited across fork)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1 for the local executor, got {workers}")
        self.workers = workers

    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        if not tasks:
            return
        ctx = multiprocessing.get_context("spawn")
        progress_q = ctx.Queue()
        drain = threading.Thread(
            target=_drain_progress,
            args=(progress_q, on_progress),
            name="snap-progress",
            daemon=True,
        )
        drain.start()
        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(tasks)),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(progress_q, os.getpid()),
        )
        pending = list(reversed(tasks))
        in_flight: dict[Future[dict[str, Any]], TaskSpec] = {}
        job_json = job.to_json()
        clean = False
        try:
            while pending or in_flight:
                while pending and len(in_flight) < 2 * self.workers:
                    task = pending.pop()
                    in_flight[pool.submit(_worker_run, job_json, task.to_json())] = task
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    task = in_flight.pop(future)
                    try:
                        outcome = future.result()
                    except BrokenProcessPool as err:
                        raise PipelineError(
                            f"a worker process died while running task {task.index} "
                            f"(inputs {task.inputs[:3]}{'...' if len(task.inputs) > 3 else ''}): "
                            "killed, out of memory, or a crash in native code; run the same "
                            "command again to resume"
                        ) from err
                    if "error" in outcome:
                        raise _rebuild_error(outcome["error"])
                    on_result(outcome["ok"])
            clean = True
        finally:
            if clean:
                pool.shutdown(wait=True)
            else:
                for process in list(getattr(pool, "_processes", {}).values()):
                    with contextlib.suppress(Exception):
                        process.terminate()
                pool.shutdown(wait=True, cancel_futures=True)
            progress_q.put(None)
            drain.join(timeout=10)  # a worker killed mid-put can leave the queue unusable
            progress_q.close()
            if not clean:
                progress_q.cancel_join_thread()
            progress_q.join_thread()


def _drain_progress(q: Any, on_progress: ProgressFn) -> None:
    while True:
        try:
            item = q.get()
        except (EOFError, OSError, queue.Empty):
            return
        if item is None:
            return
        on_progress(*item)


def make_executor(name: str, workers: int, ray_address: str | None = None) -> Executor:
    """The executor called ``name`` with ``workers`` workers (0: in this process).

    For ``"ray"``, ``workers`` (if > 0) bounds the tasks in flight on the cluster.
    """
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(ray_address, max_in_flight=workers or None)
    if name != "local":
        raise errors.OptionError(
            f"executor {name!r} is not available; this version of snap has: local, ray"
        )
    if ray_address is not None:
        raise errors.OptionError("--ray-address applies to --executor ray only")
    if workers == 0:
        return InProcessExecutor()
    if workers < 0:
        raise errors.OptionError(f"--workers must be >= 0, got {workers}")
    return LocalExecutor(workers)


__all__ = ["Executor", "InProcessExecutor", "LocalExecutor", "make_executor"]
