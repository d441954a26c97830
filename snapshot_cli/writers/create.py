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

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import storage
from ..errors import OptionError, SnapshotExistsError
from ..manifest import Manifest, changed_parts, fingerprint
from ..progress import Progress
from . import commit as commit_mod
from . import lease as lease_mod
from . import pipeline as pipeline_mod
from .executors import make_executor
from .options import WriteOptions, parse_size, plan_tasks
from .shard import Compression
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


def _options(
    shard_size: str | int,
    compression: str,
    level: int | None,
    batch_rows: int | None,
    batch_bytes: str | int | None,
    inputs_per_task: int | None,
) -> WriteOptions:
    try:
        kwargs: dict[str, Any] = {
            "shard_size": parse_size(shard_size, "shard_size"),
            "compression": Compression(compression, level),
            "inputs_per_task": inputs_per_task,
        }
        if batch_rows is not None:
            kwargs["batch_rows"] = batch_rows
        if batch_bytes is not None:
            kwargs["batch_bytes"] = parse_size(batch_bytes, "batch_bytes")
        return WriteOptions(**kwargs)
    except ValueError as err:
        raise OptionError(str(err)) from err


def _inputs(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    inputs_from: str | Callable[[], Any] | None,
    storage_options: dict[str, Any] | None,
) -> tuple[list[Any], list[Any], list[int], dict[str, Any]]:
    """→ (items passed to the function, their identities, sizes, description)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(i) for i in inputs] if inputs else None
    if inputs and inputs_from is not None:
        raise OptionError("use either --input or --inputs-from, not both")
    if inputs:
        files = storage.expand_inputs(list(inputs), storage_options)
        return (
            [f.url for f in files],
            [f.identity() for f in files],
            [f.size for f in files],
            {"count": len(files), "patterns": list(inputs)},
        )
    if inputs_from is not None:
        fn = (
            pipeline_mod.load_function(inputs_from, "--inputs-from")
            if isinstance(inputs_from, str)
            else inputs_from
        )
        try:
            raw = list(fn())
        except Exception as err:
            raise pipeline_mod.PipelineLoadError(
                f"--inputs-from {inputs_from!r} raised:\n{pipeline_mod.format_user_traceback(err)}"
            ) from err
        items = pipeline_mod.check_json(raw, "the items returned by --inputs-from")
        name = inputs_from if isinstance(inputs_from, str) else getattr(fn, "__qualname__", "?")
        return items, items, [0] * len(items), {"count": len(items), "inputs_from": name}
    return [], [], [], {"count": 0}


def create(
    pipeline: str | Callable[..., Any],
    output: str | os.PathLike[str],
    *,
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
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
        pipeline: a function, or a spec ``path/to/file.py:fn`` / ``package.module:fn``.
        output: a local path or fsspec URL of the snapshot directory.
        inputs: glob(s) or URL(s); each matching file is one call of the function.
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
    options = _options(shard_size, compression, level, batch_rows, batch_bytes, inputs_per_task)
    if workers is None:
        workers = 0 if executor == "ray" else (os.cpu_count() or 1)
    ex = make_executor(executor, workers, ray_address)
    ref = pipeline_mod.resolve(pipeline)
    if not ref.spec and executor == "ray":
        raise OptionError(
            f"--executor ray needs a pipeline the workers can import, and {ref.name!r} is "
            "not (a lambda, a closure, or defined interactively): define it at the top level "
            "of a module"
        )
    if not ref.spec and workers != 0:
        raise OptionError(
            f"the pipeline function {ref.name!r} cannot be imported by worker processes "
            "(a lambda, a closure, or defined interactively); define it at the top level of a "
            "module, or pass workers=0 to run it in this process"
        )
    params = pipeline_mod.check_json(params or {}, "params")
    items, identities, sizes, inputs_desc = _inputs(inputs, inputs_from, storage_options)
    fp, parts = fingerprint(ref.code_hash, params, identities)
    fs, root = storage.resolve(os.fspath(output), storage_options)
    url = storage.to_url(fs, root)

    def reusable() -> Manifest | None:
        m = commit_mod.read_manifest(fs, root)
        if m is None or overwrite:
            return None
        if m.fingerprint == fp:
            return m
        changed = ", ".join(changed_parts(m.fingerprint_parts, parts)) or "settings"
        raise SnapshotExistsError(
            f"{url} holds a snapshot made with different {changed}; "
            "pass --overwrite (overwrite=True) to replace it, or choose another OUTPUT"
        )

    if storage.protocol(fs) == "memory" and (workers != 0 or executor == "ray"):
        raise OptionError(
            f"{url} is in this process's memory, which worker processes cannot write into: "
            "pass --workers 0 (workers=0) to run the pipeline in this process"
        )
    commit_mod.check_output(fs, root)
    if (m := reusable()) is not None:
        log.info("snapshot %s is up to date (fingerprint %s); nothing to do", url, fp[:12])
        if m.compression != options.compression.to_json():
            log.warning(
                "note: the existing snapshot is compressed with %s, not %s; the layout is "
                "not part of the fingerprint: pass --overwrite to rewrite it",
                m.compression,
                options.compression.to_json(),
            )
        return _info(url, m, started, reused=True)

    held = _acquire_lease(fs, root, lease_ttl, wait, url)
    while not isinstance(held, lease_mod.Lease):
        if (m := reusable()) is not None:  # the other writer committed what we wanted
            log.info("another writer committed %s meanwhile; reusing it", url)
            return _info(url, m, started, reused=True)
        held = _acquire_lease(fs, root, lease_ttl, wait, url)
    lease = held
    try:
        if (m := reusable()) is not None:
            return _info(url, m, started, reused=True)
        previous = commit_mod.read_manifest(fs, root)  # what --overwrite replaces, or None
        run, plan, options = _start_or_resume(fs, root, fp, sizes, options, ref.spec)
        lease.set_run(run)
        done = commit_mod.finished_tasks(fs, root, run)
        tasks = [
            TaskSpec(i, [items[j] for j in r], call_once=not items)
            for i, r in enumerate(plan)
            if i not in done
        ]
        if done:
            log.info("resuming run %s: %d of %d tasks already done", run, len(done), len(plan))
        # A function only this process can call (workers=0 was checked above) is registered.
        spec = ref.spec or pipeline_mod.register(ref.function)
        job = Job(url, storage_options or {}, run, spec, params, options.to_json())
        bar = Progress(len(plan), len(done)) if progress else None
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
        finally:
            if bar is not None:
                bar.close()
        manifest = commit_mod.build_manifest(
            fingerprint=fp,
            parts=parts,
            pipeline={
                "spec": ref.spec or None,
                "function": ref.name,
                "params": params,
                "inputs": inputs_desc,
            },
            compression=options.compression.to_json(),
            results=list(results.values()),
            run=run,
        )
        lease.check()
        commit_mod.commit(fs, root, manifest, replaces=previous)
        commit_mod.cleanup_after_commit(fs, root, manifest)
    finally:
        lease.release()
    return _info(url, manifest, started, reused=False, tasks=len(plan), resumed=len(done))


def _acquire_lease(
    fs: Any, root: str, ttl: float, wait: bool, url: str
) -> lease_mod.Lease | lease_mod.LeaseInfo:
    """Try to take the lease; if another live writer holds it, wait a moment (or raise)."""
    storage.makedirs(fs, root)
    got = lease_mod.try_acquire(fs, root, ttl)
    if isinstance(got, lease_mod.Lease):
        return got
    if not wait:
        raise lease_mod.LeaseError(
            f"another snap create is writing {url}: {got.describe()}; wait for it to finish"
        )
    log.info("waiting for another writer of %s: %s", url, got.describe())
    time.sleep(min(2.0, ttl / 10))
    return got


def _start_or_resume(
    fs: Any, root: str, fp: str, sizes: list[int], options: WriteOptions, spec: str
) -> tuple[str, list[range], WriteOptions]:
    """The unfinished run with this fingerprint (keeping its plan and options), or a new run."""
    for info in commit_mod.find_runs(fs, root):
        if info.get("fingerprint") == fp:
            plan = [range(a, b) for a, b in info["plan"]]
            return info["run"], plan, WriteOptions.from_json(info["options"])
    run = uuid.uuid4().hex[:10]
    plan = plan_tasks(sizes, options.inputs_per_task)
    info = {
        "run": run,
        "fingerprint": fp,
        "pipeline": spec,
        "created": time.time(),
        "options": options.to_json(),
        "plan": [[r.start, r.stop] for r in plan],
    }
    path = storage.join(commit_mod.run_dir(root, run), commit_mod.RUN_FILE)
    storage.write_atomic(fs, path, json.dumps(info).encode())
    return run, plan, options
