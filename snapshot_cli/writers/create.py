"""``snap create``: reuse, resume or build a snapshot, then commit it.

1. Resolve the pipeline, params and inputs; compute the fingerprint.
2. A committed snapshot with the same fingerprint is reused (no work). A different one is an
   error unless ``overwrite``.
3. Take the writer lease (wait while another live writer holds it).
4. Resume the unfinished run with the same fingerprint, or start a new one; run the tasks that
   have no result yet on the executor.
5. Commit: write manifest.json atomically, then remove what it does not reference.
"""

from __future__ import annotations

import functools
import json
import logging
import multiprocessing
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from .. import layout, storage
from ..errors import OptionError, SnapError, SnapshotExistsError
from ..manifest import Manifest, changed_parts
from ..progress import Progress
from . import commit as commit_mod
from . import inputs as inputs_mod
from . import lease as lease_mod
from . import pipeline as pipeline_mod
from . import runs as runs_mod
from . import shipping
from . import worker as worker_mod
from .executors import InProcessExecutor, make_executor
from .options import CreateOptions, WriteOptions, plan_tasks
from .task import Job, TaskSpec

log = logging.getLogger("snapshot_cli")


@dataclass(frozen=True)
class CreateInfo:
    """What ``create`` did. ``reused``: an existing snapshot matched and nothing was computed."""

    path: str
    fingerprint: str
    num_records: int
    num_shards: int
    bytes: int
    uncompressed_bytes: int
    seconds: float
    reused: bool
    tasks: int
    tasks_resumed: int
    run: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _info(
    url: str, m: Manifest, started: float, reused: bool, tasks: int = 0, resumed: int = 0
) -> CreateInfo:
    return CreateInfo(
        path=url,
        fingerprint=m.fingerprint,
        num_records=m.num_records,
        num_shards=m.num_shards,
        bytes=m.bytes,
        uncompressed_bytes=m.uncompressed_bytes,
        seconds=round(time.time() - started, 3),
        reused=reused,
        tasks=tasks,
        tasks_resumed=resumed,
        run=m.run,
    )


F = TypeVar("F", bound=Callable[..., Any])


def _faults_answered(fn: F) -> F:
    """An OS error (disk full, read-only, permission denied, ...) in any phase of ``fn``
    becomes a StorageError naming the path, the cause and what to do."""

    @functools.wraps(fn)
    def wrapper(pipeline: Any, output: str | os.PathLike[str], **options: Any) -> Any:
        try:
            return fn(pipeline, output, **options)
        except OSError as err:
            if isinstance(err, SnapError):
                raise
            raise storage.fault(err, os.fspath(output)) from err

    return wrapper  # type: ignore[return-value]


@_faults_answered
def create(
    pipeline: str | Callable[..., Any],
    output: str | os.PathLike[str],
    *,
    inputs: str | os.PathLike[str] | Iterable[Any] | None = None,
    inputs_from: str | Callable[[], Any] | None = None,
    params: dict[str, Any] | None = None,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    shard_size: str | int = "256MiB",
    compression: str = "zstd",
    level: int | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    wait: bool = True,
    lease_ttl: float = lease_mod.DEFAULT_TTL,
    batch_rows: int | None = None,
    batch_bytes: str | int | None = None,
    inputs_per_task: int | None = None,
) -> CreateInfo:
    """Materialise ``pipeline`` over ``inputs`` as a snapshot at ``output`` (or reuse/resume it).

    Args:
        pipeline: a function, or a spec ``path/to/file.py:fn`` / ``package.module:fn``. A
            function that worker processes cannot import by name (defined in a notebook or
            in the running script, a closure, a lambda) is shipped to them by value.
        output: a local path or fsspec URL of the snapshot directory.
        inputs: a glob or URL, or a list of them (each matching file is one call of the
            function), or a list of JSON items (each item is one call); see inputs.py.
        inputs_from: a function (or spec) returning the list of inputs (JSON values).
        params: keyword arguments for the function (JSON values).
        workers: worker processes (default: CPU count); 0 runs in this process.
        executor: "local" (worker processes here) or "ray" (Ray tasks; see ray_executor.py).
        ray_address: the Ray cluster for executor="ray" (default: RAY_ADDRESS, else a local
            Ray started for the run).
        shard_size, compression, level: shard layout (``"256MiB"``, zstd/lz4/none, zstd level).
        overwrite: write the snapshot again even if one exists at ``output`` (one made from
            other code, params or inputs, or a matching one to re-lay out with new options).
        progress: draw a progress line on stderr.
        wait: wait for another live writer of the same snapshot (else raise LeaseError).
        lease_ttl: seconds after which a silent writer's lease may be taken over.
        batch_rows, batch_bytes: most rows / target bytes per record batch.
        inputs_per_task: inputs grouped into one task (default: chosen from the inputs).

    Raises:
        SnapError: any of its subclasses, with a message that says what to do.
    """
    started = time.time()
    how = CreateOptions(
        workers=workers, executor=executor, ray_address=ray_address, shard_size=shard_size,
        compression=compression, level=level, batch_rows=batch_rows, batch_bytes=batch_bytes,
        inputs_per_task=inputs_per_task, overwrite=overwrite, storage_options=storage_options,
        progress=progress, wait=wait, lease_ttl=lease_ttl,
    )  # fmt: skip
    return _create(pipeline, output, inputs, inputs_from, params, how, started)


def _create(
    pipeline: str | Callable[..., Any],
    output: str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Iterable[Any] | None,
    inputs_from: str | Callable[[], Any] | None,
    params: dict[str, Any] | None,
    how: CreateOptions,
    started: float,
) -> CreateInfo:
    options, overwrite, storage_options = how.write, how.overwrite, how.storage_options
    ex = make_executor(how.executor, how.worker_count, how.ray_address)
    ref = pipeline_mod.resolve(pipeline)
    if isinstance(ex, InProcessExecutor):
        ex.function = ref.function
    in_process = how.in_process
    params = pipeline_mod.check_json(params or {}, "params")
    found = inputs_mod.resolve(inputs, inputs_from, storage_options)
    identity = inputs_mod.Identity(ref.code_hash, params, found)
    fs, root = storage.resolve(os.fspath(output), storage_options)
    url = storage.to_url(fs, root)

    def reusable() -> Manifest | None:
        m = commit_mod.read_manifest(fs, root)
        if m is None or overwrite:
            return None
        if identity.same_as(m.fingerprint, m.fingerprint_parts, _stat_of(m.pipeline)):
            return m
        changed = changed_parts(m.fingerprint_parts, identity.full[1])
        hint = (
            " (for a function sent by value that includes the values of the globals and "
            "closure variables it uses, such as a list it appends to)"
            if ref.by_value and "pipeline code" in changed
            else ""
        )
        raise SnapshotExistsError(
            f"{url} holds a snapshot made with different {', '.join(changed) or 'settings'}"
            f"{hint}; pass --overwrite (overwrite=True) to replace it, or choose another OUTPUT"
        )

    if storage.protocol(fs) == "memory" and not in_process:
        raise OptionError(
            f"{url} is in this process's memory, which worker processes cannot write into: "
            "pass --workers 0 (workers=0) to run the pipeline in this process"
        )
    commit_mod.check_output(fs, root)
    if (m := reusable()) is not None:
        log.info(
            "snapshot %s is up to date (fingerprint %s); nothing to do", url, m.fingerprint[:12]
        )
        if m.compression != options.compression.to_json():
            log.warning(
                "note: the existing snapshot is compressed with %s, not %s; the layout is "
                "not part of the fingerprint: pass --overwrite to rewrite it",
                m.compression,
                options.compression.to_json(),
            )
        return _info(url, m, started, reused=True)
    _refuse_nested(url)
    # Shipped by value (a notebook's or a script's function, a closure): pickled once here,
    # before any work, so that a function that cannot be shipped is refused at once.
    payload = None if in_process or not ref.by_value else shipping.ship(ref.function, ref.name)

    lease = _wait_for_lease(fs, root, how.lease_ttl, how.wait, url, reusable)
    if not isinstance(lease, lease_mod.Lease):
        log.info("another writer committed %s meanwhile; reusing it", url)
        return _info(url, lease, started, reused=True)
    try:
        if (m := reusable()) is not None:
            return _info(url, m, started, reused=True)
        previous = commit_mod.read_manifest(fs, root)  # what --overwrite replaces, or None
        run, plan, options, (fp, parts) = _start_or_resume(
            fs, root, identity, found.sizes, options, ref.spec
        )
        lease.set_run(run)
        done = runs_mod.finished_tasks(fs, root, run)
        tasks = [
            TaskSpec(i, [found.items[j] for j in r], call_once=not found.items)
            for i, r in enumerate(plan)
            if i not in done
        ]
        if done:
            log.info("resuming run %s: %d of %d tasks already done", run, len(done), len(plan))
        job = Job(url, storage_options or {}, run, ref.spec, params, options.to_json(), payload)
        bar = Progress(len(plan), len(done)) if how.progress else None
        results = dict(done)

        def on_result(result: dict[str, Any]) -> None:
            results[int(result["task"])] = result
            if bar is not None:
                bar.task_done()

        def on_progress(records: int, nbytes: int) -> None:
            if bar is not None:
                bar.add(records, nbytes)

        try:
            ex.run(job, tasks, on_result, on_progress)
        except BaseException:
            if bar is not None:
                bar.close()
            raise
        manifest = commit_mod.build_manifest(
            fingerprint=fp,
            parts=parts,
            pipeline={
                "spec": ref.spec or None,
                "function": ref.name,
                "shipped": "by value" if ref.by_value else "by name",
                "params": params,
                "inputs": {**found.description, "stat": identity.stat},
            },
            compression=options.compression.to_json(),
            results=list(results.values()),
            run=run,
        )
        if bar is not None:  # the final line says what the snapshot holds, as the summary does
            bar.close(records=manifest.num_records, nbytes=manifest.bytes)
        lease.check()
        commit_mod.commit(fs, root, manifest, replaces=previous)
        commit_mod.cleanup_after_commit(fs, root, manifest)
    finally:
        lease.release()
    return _info(url, manifest, started, reused=False, tasks=len(plan), resumed=len(done))


def _stat_of(pipeline: dict[str, Any]) -> str | None:
    inputs = pipeline.get("inputs") if isinstance(pipeline, dict) else None
    return inputs.get("stat") if isinstance(inputs, dict) else None


def _bootstrapping() -> bool:
    """True while a multiprocessing "spawn"/"forkserver" child re-runs its parent's script."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


_GUARD = (
    'put the code that runs snap.create under\n\n    if __name__ == "__main__":\n\n'
    "so that it runs only when the script is started, not when another process imports it"
)


def _refuse_nested(url: str) -> None:
    """Fail at once, not wait forever, where a create can only deadlock on its parent."""
    if worker_mod.IMPORTING:
        raise OptionError(
            f"snap.create({url!r}) was called inside a snap worker process, while it imported "
            f"the pipeline's module: {_GUARD}"
        )
    if _bootstrapping():
        raise OptionError(
            f"snap.create({url!r}) was called while this process "
            f"({multiprocessing.current_process().name}), started by multiprocessing's "
            f"'spawn' or 'forkserver' method, re-ran its parent's script, and the snapshot is "
            f"not ready yet: {_GUARD}"
        )


WAIT_REPORT_S = 15.0  # a waiting writer says again who holds the lease this often


def _wait_for_lease(
    fs: Any, root: str, ttl: float, wait: bool, url: str, reusable: Callable[[], Manifest | None]
) -> lease_mod.Lease | Manifest:
    """Take the writer lease, waiting while another live writer holds it (saying so on
    stderr, again every WAIT_REPORT_S), or return the snapshot that writer committed."""
    storage.makedirs(fs, root)
    said = -float("inf")
    while True:
        got = lease_mod.try_acquire(fs, root, ttl)
        if isinstance(got, lease_mod.Lease):
            return got
        who = got.describe()
        if not wait:
            raise lease_mod.LeaseError(
                f"another snap create is writing {url}: {who}; wait for it to finish"
            )
        h = got.holder
        if h.get("host") == socket.gethostname() and h.get("pid") == os.getppid():
            raise lease_mod.LeaseError(
                f"the writer lease of {url} is held by this process's parent ({who}), which "
                f"waits for this process: waiting would never end. {_GUARD[0].upper()}"
                f"{_GUARD[1:]}"
            )
        if time.monotonic() - said >= WAIT_REPORT_S:
            log.warning(
                "waiting for the writer lease of %s, held by %s; it is taken over if that "
                "writer stops (Ctrl-C to give up)",
                url,
                who,
            )
            said = time.monotonic()
        time.sleep(min(2.0, ttl / 10))
        if (m := reusable()) is not None:  # the other writer committed what we wanted
            return m


def _start_or_resume(
    fs: Any,
    root: str,
    identity: inputs_mod.Identity,
    sizes: list[int],
    options: WriteOptions,
    spec: str,
) -> tuple[str, list[range], WriteOptions, tuple[str, dict[str, Any]]]:
    """The unfinished run of this code, params and inputs (keeping its plan and options), or
    a new run. Also returns the run's ``(fingerprint, parts)``."""
    for info in runs_mod.find_runs(fs, root):
        parts = info.get("parts")
        if identity.same_as(info.get("fingerprint", ""), parts or {}, info.get("stat")):
            plan = [range(a, b) for a, b in info["plan"]]
            found = (info["fingerprint"], parts or identity.full[1])
            return info["run"], plan, WriteOptions.from_json(info["options"]), found
    run = uuid.uuid4().hex[:10]
    plan = plan_tasks(sizes, options.inputs_per_task)
    fp, parts = identity.full
    info = {
        "run": run,
        "fingerprint": fp,
        "parts": parts,
        "stat": identity.stat,
        "pipeline": spec,
        "created": time.time(),
        "options": options.to_json(),
        "plan": [[r.start, r.stop] for r in plan],
    }
    path = layout.run_file(root, run)
    storage.write_atomic(fs, path, json.dumps(info).encode())
    return run, plan, options, (fp, parts)
