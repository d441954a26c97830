"""``--executor ray``: the tasks of a run as Ray tasks, on a local or remote Ray cluster.

Each Ray task is :func:`snapshot_cli.writers.worker.outcome`, the same entry point the
local executor's processes run: it writes its task's shards straight to the snapshot's
storage and its result file, and returns the result (or the error) as JSON values. The driver
(this process) only schedules, collects results and commits the manifest, as it does locally,
so resume, the fingerprint and the manifest are the same whichever executor ran the tasks.

- **Cluster.** ``address`` (``--ray-address``), else ``RAY_ADDRESS``, else a local Ray is
  started for the run (``ray.init(address="local")``), with this machine's CPUs: never the
  cluster a ``ray start`` recorded in ``/tmp/ray/ray_current_cluster``, which ``ray.init()``
  joins, however long ago it stopped (a create then waited on its address for good).
- **Code.** A pipeline given as ``path/to/file.py:fn`` is shipped with the job: the ``.py``
  files of its directory and of its packages, so the workers import the same code, on any
  node, ahead of nothing in the standard library (see ray_code.py). A
  ``package.module:fn`` pipeline must be installed on the cluster, like snap itself. A
  function that cannot be imported by name (a notebook's, a closure) travels pickled by
  value inside the job (see shipping.py). The job (and the code) is put in Ray's object
  store once per run, not sent with each task.
- **Backpressure.** At most ``2 x`` the cluster's CPUs tasks are submitted at a time (or
  ``max_in_flight``); the progress bar moves on each task's completion.
- **Failures.** A task whose worker process dies (killed, out of memory, node lost) is
  retried by Ray up to ``max_retries`` times; its shards have fixed names
  (``<run>-<task>-<seq>``), so a retry overwrites what the dead attempt wrote and the
  manifest lists each task's shards once. An error raised by the user's function is not
  retried: it stops the run with the input's name and the user's traceback, as locally.
- **Snap.** Each worker runs the snap installed where it runs: before the first task the
  driver asks one for its version and code (ray_probe.py) and refuses another snap's.
- **Storage.** Workers on other machines cannot see this machine's disk: a local OUTPUT is
  refused on a cluster of more than one node (use ``gs://``, ``s3://``, ``hdfs://``, ...).
  Where snap starts the job, what configures storage in its environment goes to the job's
  workers (:func:`storage_environment`); after the user's own ``ray.init`` their job's
  ``runtime_env`` does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .. import storage
from ..console import named
from ..errors import OptionError, PipelineError
from . import ray_code, ray_output, ray_probe, ray_session, worker
from .executors import Executor, ResultFn
from .options import address_problem
from .task import Job, ProgressFn, TaskSpec

MAX_RETRIES = 3


def _needs_ray() -> str:
    said = named("--executor ray", "executor='ray'")
    return f"{said} needs Ray: pip install 'ray>=2.9' (and snap installed on the cluster's nodes)"


def check_installed() -> None:
    """Refuse ``executor="ray"`` where Ray is not installed, before any work: found by the
    run, the snapshot's directory held a run to resume that no run could finish."""
    if importlib.util.find_spec("ray") is None:
        raise OptionError(_needs_ray())


# Read once, as Ray's native library loads: whether the core worker of a driver puts
# handlers of its own for SIGTERM (and for crashes) below Python's (see ray_session.py).
_NO_HANDLERS = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


def _ray() -> Any:
    """Ray, imported; where snap imports it first, the driver's core worker will put no
    handler of its own for SIGTERM in the process (the workers' are Ray's to set)."""
    mine = "ray" not in sys.modules and _NO_HANDLERS not in os.environ
    if mine:
        os.environ[_NO_HANDLERS] = "1"
    try:
        import ray
    except ImportError as err:
        raise OptionError(_needs_ray()) from err
    finally:
        if mine:  # (the processes the driver starts do not inherit it)
            os.environ.pop(_NO_HANDLERS, None)
    return ray


REACH_TIMEOUT = 10.0  # seconds to open a TCP connection to a given Ray address


def _check_reachable(address: str | None) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) nothing answers at: ``ray.init`` would
    retry for minutes, printing its own warnings, before it gave up."""
    if not address:
        return
    host, sep, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return  # "auto", "local" or another form: Ray's to judge
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT):
            pass
    except OSError as err:
        raise OptionError(
            f"cannot reach the Ray cluster at {address} ({err.strerror or err}): start it "
            f"(ray start --head) or give its address ({named('--ray-address', 'ray_address=')}, "
            "RAY_ADDRESS)"
        ) from err


class RayExecutor(Executor):
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        max_in_flight: int | None = None,
        max_retries: int = MAX_RETRIES,
    ) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.address_from = "" if address or not self.address else " (from RAY_ADDRESS)"
        if self.address_from and (problem := address_problem(self.address)):  # (as early as
            problem = problem.replace("leave it out for RAY_ADDRESS, else", "unset it for")
            raise OptionError(f"RAY_ADDRESS (in this environment) {problem}")  # the flag's)
        self.max_in_flight, self.max_retries = max_in_flight, max_retries
        self._code: dict[str, ray_code.Code | None] = {}  # by pipeline: what prepare found

    def prepare(self, pipeline: str) -> None:
        """Before the run begins: the cluster's address answers, and the pipeline's code can
        be shipped (found after, a create left a run to resume that could not go on)."""
        _check_reachable(self.address)
        self._code[pipeline] = ray_code.collect(pipeline)

    def run(
        self, job: Job, tasks: Sequence[TaskSpec], on_result: ResultFn, on_progress: ProgressFn
    ) -> None:
        if not tasks:
            return
        ray = _ray()
        if job.pipeline not in self._code:
            self.prepare(job.pipeline)
        code = self._code[job.pipeline]
        with tempfile.TemporaryDirectory(prefix="snap-ray-job-") as job_dir:
            # the code goes in the job's working_dir where snap starts the job, else (after
            # the user's own ray.init) in the object store with the job
            working_dir = job_dir if code is not None and not ray.is_initialized() else None
            if working_dir and code is not None:
                code.write(working_dir)

            def body(emit: Callable[[Any], None], stopping: threading.Event) -> None:
                owned = self._connect(ray, working_dir)
                emit(ray_session.CONNECTED)
                try:
                    self._check_storage(ray, job)
                    ray_probe.check(ray, stopping)
                    shared = {
                        "job": job.to_json(),
                        "code": None if code is None else code.shared(working_dir is None),
                    }
                    self._schedule(ray, ray.put(shared), job, code, tasks, emit, stopping, owned)
                finally:
                    if owned:
                        ray.shutdown()

            with ray_session.Session(body) as session:  # (Ray's calls: not in this thread)
                for result in session.outcomes():
                    on_progress(
                        sum(s["records"] for s in result["shards"]),
                        sum(s["bytes"] for s in result["shards"]),
                    )
                    on_result(result)

    def _connect(self, ray: Any, working_dir: str | None) -> bool:
        """Connect (or start a local Ray), in the session's thread (where Ray sets no signal
        handler of its own); whether this call did (and so shuts it down after)."""
        if ray.is_initialized():  # the user's own ray.init(): their job runs the tasks
            return False
        env = storage_environment(os.environ)
        runtime_env = {
            **({"working_dir": working_dir} if working_dir else {}),
            **({"env_vars": env} if env else {}),
        }
        try:
            with _notes_unsaid(local=not self.address):
                ray.init(
                    address=self.address or "local",
                    runtime_env=runtime_env or None,
                    include_dashboard=False,
                    configure_logging=False,
                    log_to_driver=True,
                )
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as err:
            where = f"{self.address}{self.address_from}" if self.address else "a new local Ray"
            tokens = getattr(ray.exceptions, "AuthenticationError", None)  # (Ray >= 2.5x)
            if tokens is not None and isinstance(err, tokens):  # (Ray's says 5 sentences)
                raise OptionError(
                    f"cannot connect to Ray at {where}: RAY_AUTH_MODE=token, but this process "
                    f"has no token: give the cluster's {TOKEN_FROM}"
                ) from err
            text = str(err).rstrip(".").replace("`--address` flag", "--ray-address")  # (Ray's)
            said = f"cannot connect to Ray at {where}: {text}"
            found = not _NOT_A_CLUSTER.search(text)  # (no cluster there: no token can help)
            advice = token_advice(self.address, os.environ) if tokens is not None and found else ""
            raise OptionError(said + advice) from err
        return True

    def _check_storage(self, ray: Any, job: Job) -> None:
        fs, _ = storage.resolve(job.output, job.storage_options)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if storage.is_local(fs) and len(nodes) > 1:
            raise OptionError(
                f"OUTPUT {job.output} is on this machine's disk, but the Ray cluster has "
                f"{len(nodes)} nodes whose workers cannot see it: write to shared storage "
                "(gs://, s3://, hdfs://, ...) instead"
            )

    def _schedule(
        self,
        ray: Any,
        shared: Any,
        job: Job,
        code: ray_code.Code | None,
        tasks: Sequence[TaskSpec],
        emit: Callable[[Any], None],
        stopping: threading.Event,
        owned: bool,
    ) -> None:
        """Run ``tasks``, each given the run's one ``shared`` object (the job and the code)
        by reference (a by-value function of 40 MiB was sent again with every task), and
        ``emit`` each one's result, until done or ``stopping``."""
        options = {"max_retries": self.max_retries, "retry_exceptions": False}
        remote = ray.remote(**options)(ray_code.task_outcome)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        limit = self.max_in_flight or max(2, 2 * cpus)
        pending = list(reversed(tasks))
        in_flight: dict[Any, TaskSpec] = {}
        try:
            while (pending or in_flight) and not stopping.is_set():
                while pending and len(in_flight) < limit:
                    task = pending.pop()
                    in_flight[remote.remote([shared], task.to_json())] = task
                refs = list(in_flight)
                done, rest = ray.wait(refs, num_returns=1, timeout=ray_session.POLL_S)
                if done and rest:  # collect everything else already finished in the same call
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    done += more
                for ref in done:
                    task = in_flight.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as err:
                        crashed = isinstance(err, ray.exceptions.WorkerCrashedError)
                        raise PipelineError(failed(task, err, self.max_retries, crashed)) from err
                    ray_output.say(outcome.pop("printed", ""))  # (what the task printed)
                    if "error" in outcome:
                        error = ray_code.explain(outcome["error"], job.pipeline, code)
                        raise worker.rebuild_error(error)
                    emit(outcome["ok"])
        finally:
            # Ray ends the tasks of a driver that disconnects (and a Ray this run started
            # goes with them); in the user's own session they would go on writing
            for ref in in_flight if not owned else ():
                with contextlib.suppress(Exception):  # finished or gone: nothing to stop
                    ray.cancel(ref, force=True)


def failed(task: TaskSpec, err: BaseException, retries: int, crashed: bool) -> str:
    """What to say of ``task``, which Ray gave up on with ``err`` after ``retries``
    retries; ``crashed``: its worker process died each time (Ray's WorkerCrashedError, which
    says neither how nor what to do: "The worker died unexpectedly"). Pure."""
    inputs = f"{task.inputs[:3]}{'...' if len(task.inputs) > 3 else ''}"
    if not crashed:
        return (
            f"task {task.index} (inputs {inputs}) failed on Ray after {retries} retries: "
            f"{err}; run the same command again to resume"
        )
    return (
        f"task {task.index} (inputs {inputs}) failed on Ray: its worker process died each of "
        f"the {retries + 1} times it ran it: the function, or code it called, ended the "
        "process (os._exit(), exit() in native code) or the node killed it (out of memory, a "
        "crash in native code), as Ray's worker logs say (python-core-worker-*.log in its "
        f"session's logs); run these inputs with {named('--executor local', 'executor=')} "
        "to see how they end, or, if the node was short of memory, run the same command "
        f"again with fewer tasks at a time ({named('--workers', 'workers=')}) to resume"
    )


# Ray's notes that say nothing to a snap user, by the logger that says them: that ray.init
# set no SIGTERM handler outside the main thread (snap's own, in the main thread, stops the
# run), and that the Ray a run starts for itself asks for a token (nobody else connects to
# it: said even under --quiet --json).
_UNSAID = {
    "ray._private.worker": "SIGTERM handler is not set",
    "ray._private.authentication.authentication_token_setup": "Token authentication is enabled",
}


@contextlib.contextmanager
def _notes_unsaid(local: bool) -> Iterator[None]:
    """Within: Ray's notes above are not said (the token's only for a ``local`` Ray)."""
    filters = []
    for name, words in _UNSAID.items():
        if local or "Token" not in words:

            def kept(record: logging.LogRecord, words: str = words) -> bool:
                return words not in record.getMessage()

            logging.getLogger(name).addFilter(kept)
            filters.append((name, kept))
    try:
        yield
    finally:
        for name, kept in filters:
            logging.getLogger(name).removeFilter(kept)


TOKEN_FROM = (
    "token (`ray get-auth-token` on its head node) in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
    "~/.ray/auth_token"
)


# Ray's words where no cluster answered at all, or the address is none: no token can help
_NOT_A_CLUSTER = re.compile(r"Invalid address|Could not find any running Ray instance")


def token_advice(address: str | None, environ: Mapping[str, str]) -> str:
    """What to say of tokens after a failed connection to the cluster at ``address``. A
    cluster ``ray start`` starts asks for one by default, and a driver given an address sends
    none unless RAY_AUTH_MODE=token (Ray's choice: a token is never sent unasked to a cluster
    named by address); Ray said only "Failed to connect to Ray cluster", after 20 s of
    "InvalidAuthToken" lines of its own. Pure."""
    if not address:
        return ""  # (a Ray the run starts makes its own token)
    if environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return f"; if it refused this process's token, give the cluster's {TOKEN_FROM}"
    return (
        "; a cluster that `ray start` started asks for a token by default: set "
        f"RAY_AUTH_MODE=token where snap runs, with the cluster's {TOKEN_FROM}"
    )


# What configures storage in this process's environment, passed to the job's workers where
# snap starts the job (a cluster's own environment lacked them: its tasks wrote shards to
# storage.googleapis.com while the driver used the emulator, or found no S3 endpoint):
# fsspec's configuration (FSSPEC_<PROTOCOL>_<OPTION>, README), gcsfs's, the GCS emulator and
# S3 endpoints, HDFS's user. Not credentials of the cloud's own (AWS_ACCESS_KEY_ID, ...): a
# cluster has its own identity; storage_options= or fsspec's configuration carry others.
_STORAGE_PREFIXES = ("FSSPEC_", "GCSFS_")
_STORAGE_NAMES = ("STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                  "HADOOP_USER_NAME")  # fmt: skip


def storage_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that configure storage (see above). Pure."""
    return {
        k: v for k, v in environ.items() if k.startswith(_STORAGE_PREFIXES) or k in _STORAGE_NAMES
    }
