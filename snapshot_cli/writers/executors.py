"""Executors run tasks. The writer only knows the :class:`Executor` interface.

- ``InProcessExecutor`` (``workers=0``): tasks run one after another in this process; for
  tests and debugging (breakpoints work).
- ``LocalExecutor`` (``workers=N``): N worker processes on this machine, each a fresh
  interpreter that runs only snap's worker loop (:mod:`.worker`) and the pipeline function,
  its native libraries' thread pools capped at its share of the cores (:mod:`.native_threads`).

- ``RayExecutor`` (``executor="ray"``, in :mod:`.ray_executor`): Ray tasks on a cluster; it
  ships :class:`Job` and :class:`TaskSpec` as the JSON values they are.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .. import errors, progress, signals
from ..child import how_it_died, python_command
from ..console import named
from ..cores import cores
from ..errors import PipelineError
from ..hidden_frames import HIDDEN
from . import worker_logs
from .native_threads import worker_environment
from .options import RAY_ONLY
from .task import Job, ProgressFn, TaskSpec, run_task
from .worker import rebuild_error

log = logging.getLogger(__name__)

ResultFn = Callable[[dict[str, Any]], None]


class Executor(ABC):
    """Runs tasks of a job and reports each result as it completes."""

    name = "abstract"

    def prepare(self, pipeline: str) -> None:  # noqa: B027 (most have nothing to do)
        """Before the run begins (its lease taken, its state written): refuse what would fail
        it at once, for the job of ``pipeline`` (the job's spec)."""

    @abstractmethod
    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        """Run every task; call ``on_result`` per finished task (any order).

        Raises the first task's error (a SnapError) after stopping the remaining tasks.
        """


class InProcessExecutor(Executor):
    """Runs the tasks one after another in this process, calling ``function`` directly."""

    name = "inprocess"

    def __init__(self, function: Callable[..., Any] | None = None) -> None:
        self.function = function

    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        __tracebackhide__ = HIDDEN  # (snap's frames in a notebook: hidden_frames.py)
        for task in tasks:
            on_result(run_task(job, task, on_progress, function=self.function))


def _on_a_terminal() -> bool:
    """Whether the command's stderr is a terminal, where a progress line is drawn in place."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def _relay(pipe: Any) -> None:
    """Copy a worker's output (its prints, logs, warnings) to the terminal as it comes, round
    the progress line (:func:`.progress.interject`), until the worker and the processes it
    started have closed it."""
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(pipe.fileno(), 1 << 16):
            try:
                progress.interject(chunk, sys.stderr)
            except Exception:  # (a sys.stderr of the pipeline's: never stop reading, or
                with contextlib.suppress(OSError):  # the worker blocks on a full pipe)
                    os.write(2, chunk)
    with contextlib.suppress(OSError):
        pipe.close()


class _WorkerProcess:
    """One worker process (see worker.py) and the thread that reads its messages."""

    def __init__(
        self, index: int, hello: bytes, events: queue.Queue[Any], env: dict[str, str]
    ) -> None:
        # A new session: the terminal's Ctrl-C reaches only the parent, which stops us.
        relay = _on_a_terminal()  # (its output goes round the progress line drawn there)
        try:
            self.proc = subprocess.Popen(
                python_command("snapshot_cli.writers.worker", f"main({os.getpid()})"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if relay else None,
                start_new_session=True,
                env=env,
            )
        except OSError as err:  # no memory, no process slots, too many open files
            fewer = named("fewer --workers, or --workers 0", "a smaller workers=, or workers=0")
            raise PipelineError(
                f"cannot start a worker process ({err}); pass {fewer} to run in this process"
            ) from err
        self.events = events
        self.task: TaskSpec | None = None
        self._send(hello)
        self.reader = threading.Thread(target=self._read, name=f"snap-worker-{index}", daemon=True)
        self.reader.start()
        if relay and self.proc.stderr is not None:
            name = f"snap-worker-{index}-output"
            threading.Thread(
                target=_relay, args=(self.proc.stderr,), name=name, daemon=True
            ).start()

    def _read(self) -> None:
        # A broken pipe or a torn line means the process is gone: reported as its end.
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout or ():
                self.events.put((self, json.loads(line)))
        self.events.put((self, None))

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # it died: its reader reports that
            if self.proc.stdin is not None:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()

    def send_task(self, task: TaskSpec) -> None:
        self.task = task
        self._send(json.dumps({"task": task.to_json()}).encode() + b"\n")

    def how_it_ended(self) -> tuple[str, bool]:
        """How it ended, and whether that names the cause (:func:`..child.how_it_died`)."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "stopped answering", False
        return how_it_died(code)

    def close_input(self) -> None:
        """End its input: a worker between tasks then exits."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()

    def kill(self) -> None:
        """Kill it and every process the pipeline started in it (its session's group):
        a pipeline's own pool or subprocess would otherwise live on, orphaned, holding our
        stderr. Its group is its pid (``start_new_session``), not reusable while any member
        of it lives."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:  # the group is gone (or not ours): the worker alone
            with contextlib.suppress(OSError):
                self.proc.kill()

    def stop(self, kill: bool) -> None:
        """End its input (a worker between tasks then exits), or kill it; reap it."""
        self.close_input()
        if kill:
            self.kill()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class LocalExecutor(Executor):
    """Runs tasks in ``workers`` worker processes on this machine, one task each at a time."""

    name = "local"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1 for the local executor, got {workers}")
        self.workers = workers

    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        __tracebackhide__ = HIDDEN
        if not tasks:
            return
        level = logging.getLogger().getEffectiveLevel()  # (the workers' records: as here)
        said = {"sys_path": sys.path, "job": job.to_json(), "log_level": level}
        hello = json.dumps(said).encode() + b"\n"
        events: queue.Queue[Any] = queue.Queue()
        procs: list[_WorkerProcess] = []
        relayed = worker_logs.Relayed()
        clean = False
        started = min(self.workers, len(tasks))
        if started > (available := cores()):  # (as torch's DataLoader warns)
            log.warning(
                "%s on %d cores: each worker is a Python process with the pipeline's imports "
                "and memory, and workers beyond the cores speed up only a pipeline that waits "
                "(on downloads, a service); else pass %s (the default: one per core)",
                named(f"--workers {self.workers}", f"workers={self.workers}"), available,
                named(f"--workers {available}", f"workers={available}"),
            )  # fmt: skip
        env = worker_environment(os.environ, started)  # (native thread pools: cores / started)
        try:
            procs.extend(_WorkerProcess(i, hello, events, env) for i in range(started))
            pending = deque(tasks)
            idle: list[_WorkerProcess] = []
            while pending or any(p.task is not None for p in procs):
                while pending and idle:
                    idle.pop().send_task(pending.popleft())
                proc, message = events.get()
                signals.raise_received()  # (a Ctrl-C a garbage collector's callback took)
                if message is None:
                    raise PipelineError(_died(proc))
                if "progress" in message:
                    on_progress(*message["progress"])
                elif "record" in message:  # a worker's log record (worker_logs)
                    relayed.handle(message["record"])
                elif "error" in message:
                    raise rebuild_error(message["error"])
                elif "ok" in message:
                    proc.task = None
                    idle.append(proc)
                    on_result(message["ok"])
                else:  # ready: the function is loaded
                    idle.append(proc)
            clean = True
        finally:
            for proc in procs:  # all told first, so that they exit side by side
                proc.close_input()
            for proc in procs:
                proc.stop(kill=not clean)


def _died(proc: _WorkerProcess) -> str:
    how, named = proc.how_it_ended()
    task = proc.task
    if task is None:
        return f"a worker process {how} before it could run a task; see the messages above"
    inputs = f"{task.inputs[:3]}{'...' if len(task.inputs) > 3 else ''}"
    code = proc.proc.returncode
    if code is not None and code >= 0:  # an exit, not a signal: code in the worker called it
        return (
            f"the pipeline ended its worker process with exit code {code} while running task "
            f"{task.index} (inputs {inputs}): the function, or code it called, exited the "
            f"process (os._exit({code}), or exit() in native code or a library) instead of "
            "returning; return from the function, or raise an exception to fail the input, "
            "then run the same command again to resume"
        )
    causes = "" if named else ": killed, out of memory, or a crash in native code"
    return (
        f"a worker process {how} while running task {task.index} (inputs {inputs}){causes}; "
        "run the same command again to resume"
    )


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
        raise errors.OptionError(named(*RAY_ONLY))
    if workers == 0:
        return InProcessExecutor()
    if workers < 0:
        raise errors.OptionError(f"{named('--workers', 'workers=')} must be >= 0, got {workers}")
    return LocalExecutor(workers)


__all__ = ["Executor", "InProcessExecutor", "LocalExecutor", "make_executor"]
