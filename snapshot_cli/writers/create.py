"""``snap create``: reuse, resume or build a snapshot, then commit it.

1. Resolve the pipeline, params and inputs; compute the fingerprint.
2. A committed snapshot with the same fingerprint is reused (no work). A different one is an
   error unless ``overwrite``.
3. Take the writer lease (wait while another live writer holds it).
4. Resume the unfinished run with the same fingerprint, or adopt a dead one whose finished
   tasks the new plan has (its inputs changed since: see adopt.py), or start a new one; run
   the tasks that have no result yet on the executor.
5. Commit: write manifest.json atomically, then remove what it does not reference.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .. import storage, versions
from ..errors import SnapshotExistsError
from ..hidden_frames import HIDDEN
from ..history import History, TaskRecord
from ..keywords import checked_keywords
from ..manifest import Manifest
from ..progress import Progress, counted
from . import commit as commit_mod
from . import freshness, guards, incremental, shipping, start_dir, tidy, worker_storage
from . import inputs as inputs_mod
from . import lease as lease_mod
from . import lost as lost_mod
from . import params as params_mod
from . import pipeline as pipeline_mod
from . import runs as runs_mod
from .chunking import Chunking
from .executors import InProcessExecutor, make_executor
from .options import DEFAULT_CODEC, CreateOptions, codec_text, grown_layout, overwrite_said
from .task import Job, TaskSpec

log = logging.getLogger("snapshot_cli")
CHANGES = ("tasks_reused", "inputs_added", "inputs_removed", "inputs_changed")  # in CreateInfo


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
    version: int = 1  # the version committed (or found up to date)
    tasks_reused: int = 0  # tasks whose shards the last version had (not computed again)
    inputs_added: int = 0  # against the last version
    inputs_removed: int = 0
    inputs_changed: int = 0
    num_record_batches: int = 0
    dry_run: bool = False  # nothing was done: the plan only (tasks, tasks_reused, inputs_*)

    def to_json(self) -> dict[str, Any]:
        """Every field, as ``snap create --json`` prints them."""
        return asdict(self)


def _info(url: str, m: Manifest | None, started: float, reused: bool, tasks: int = 0,
          resumed: int = 0, planned: incremental.Plan | None = None,
          dry_run: bool = False) -> CreateInfo:  # fmt: skip
    changes = planned.changes if planned is not None else {}
    return CreateInfo(
        path=url,
        fingerprint=m.fingerprint if m else "",
        num_records=m.num_records if m else 0,
        num_shards=m.num_shards if m else 0,
        bytes=m.bytes if m else 0, uncompressed_bytes=m.uncompressed_bytes if m else 0,
        num_record_batches=m.num_record_batches if m else 0,
        seconds=round(time.time() - started, 3), reused=reused, tasks=tasks,
        tasks_resumed=resumed, run=m.run if m else "",
        version=(m.version if m else 0) + (1 if dry_run and not reused else 0),
        dry_run=dry_run,
        **{k: changes.get(k, 0) for k in CHANGES},
    )  # fmt: skip


@guards.faults_answered
@checked_keywords
def create(
    pipeline: str | Callable[..., Any],
    output: str | os.PathLike[str],
    *,
    inputs: str | os.PathLike[str] | Iterable[Any] | None = None,
    inputs_from: str | Callable[[], Any] | None = None,
    params: Mapping[str, Any] | None = None,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    shard_size: str | int = "256MiB",
    compression: str | None = DEFAULT_CODEC,
    level: int | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    wait: bool = True,
    lease_ttl: float = lease_mod.DEFAULT_TTL,
    batch_rows: int | None = None,
    batch_bytes: str | int | None = None,
    inputs_per_task: int | None = None,
    dry_run: bool = False,
) -> CreateInfo:
    """Materialise ``pipeline`` over ``inputs`` as a snapshot at ``output`` (or reuse/resume it).

    Args:
        pipeline: a function, or a spec ``path/to/file.py:fn`` / ``package.module:fn``. A
            function that worker processes cannot import by name (defined in a notebook or
            in the running script, a closure, a lambda) is shipped to them by value.
        output: a local path or fsspec URL of the snapshot directory.
        inputs: a glob or URL, or a list of them (each matching file is one call of the
            function), or a list of JSON items (each one call); README, The pipeline function.
        inputs_from: a function (or spec) returning the list of inputs (JSON values).
        params: keyword arguments for the function (JSON values).
        workers: worker processes (default: the CPUs this job may use (affinity, cgroup));
            0 runs in this process.
        executor: "local" (worker processes here) or "ray" (Ray tasks; README, On a Ray cluster).
        ray_address: the Ray cluster for executor="ray" (default: RAY_ADDRESS, else a local Ray).
        shard_size, compression, level: shard layout (``"256MiB"``, zstd/lz4/none, zstd level).
        overwrite: replace a snapshot at ``output`` made otherwise, or re-lay out a matching one.
        storage_options: fsspec options of ``output``'s filesystem (credentials, project...).
        progress: draw a progress line on stderr.
        wait: wait for another live writer of the same snapshot (else raise LeaseError).
        lease_ttl: seconds after which a silent writer's lease may be taken over.
        batch_rows, batch_bytes: most rows / target bytes per record batch.
        inputs_per_task: inputs in each task, in order (default: content-defined groups
            chosen when the snapshot is first made; README, Growing a snapshot).
        dry_run: say what would be reused and computed (the log, the info's counts); do nothing.

    Raises:
        SnapError: any of its subclasses, with a message that says what to do.
    """
    started, __tracebackhide__ = time.time(), HIDDEN  # (a notebook's: hidden_frames.py)
    pipeline_mod.check_arguments(pipeline, output)
    how = CreateOptions(
        workers=workers, executor=executor, ray_address=ray_address, shard_size=shard_size,
        compression=compression, level=level, batch_rows=batch_rows, batch_bytes=batch_bytes,
        inputs_per_task=inputs_per_task, overwrite=overwrite, storage_options=storage_options,
        progress=progress, wait=wait, lease_ttl=lease_ttl, dry_run=dry_run,
    )  # fmt: skip
    with lease_mod.released_after():
        return _create(pipeline, output, inputs, inputs_from, params, how, started)


def _create(
    pipeline: str | Callable[..., Any],
    output: str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Iterable[Any] | None,
    inputs_from: str | Callable[[], Any] | None,
    params: Mapping[str, Any] | None,
    how: CreateOptions,
    started: float,
) -> CreateInfo:
    __tracebackhide__ = HIDDEN
    options, overwrite, storage_options = how.write, how.overwrite, how.storage_options
    paths = start_dir.Given(pipeline, output, inputs, inputs_from, storage_options)  # (first)
    ex = make_executor(how.executor, how.worker_count, how.ray_address)
    ref = paths.pipeline_ref()  # (its module may change the working directory: see start_dir)
    if isinstance(ex, InProcessExecutor):
        freshness.check(ref.function)  # what runs here is what the fingerprint counts
        ex.function = ref.function
    in_process = how.in_process
    params = params_mod.check_params(params)
    fs, root = storage.resolve(paths.output, storage_options)
    url = storage.to_url(fs, root)
    guards.refuse_in_import(url)  # (a script's own create, run by snap importing it)
    protocols = worker_storage.for_workers(url, storage.protocol(fs), in_process)
    guards.check_output(fs, root)  # (a file, foreign files, a link out of OUTPUT)
    if not overwrite:  # (a snapshot or run made before functions' names counted: its hash)
        made = commit_mod.read_manifest(fs, root)
        runs = runs_mod.find_runs(fs, root) if not made else []
        ref = pipeline_mod.continued(ref, made, runs, url)
    found = paths.resolve_inputs(url)
    identity = inputs_mod.Identity(ref.code_hash, params, found)

    tables: dict[tuple[int, str] | None, tuple[list[TaskRecord] | None, str]] = {}

    def table_of(m: Manifest | None, planning: bool = False) -> list[TaskRecord] | None:
        """Version ``m``'s task table, read once per create; ``planning``: tasks are planned
        against it (an unusable one is said then, once)."""
        key = (m.version, m.run) if m is not None else None
        if m is not None and key not in tables:
            tables[key] = commit_mod.read_tasks_table(fs, root, m)
        table, problem = tables.get(key, (None, ""))
        if planning and problem and m is not None:
            commit_mod.say_table_unusable(m, problem)
            tables[key] = table, ""  # (said once)
        return table

    said: set[str] = set()  # the lost shards a warning named

    def reusable() -> Manifest | None:
        """The committed snapshot if it is up to date; None if there is none, or if only
        its inputs changed (an incremental create); else SnapshotExistsError."""
        m = commit_mod.read_manifest(fs, root, lost_ok=overwrite)  # (lost: refused)
        if m is None or overwrite:
            return None
        stat = inputs_mod.recorded_stat(m.pipeline)
        if not identity.quick_match(m.fingerprint_parts, stat) and m.history is not None:
            # an unchanged file is identified from the last version, not read again
            found.records(incremental.known_contents(table_of(m)))
        if identity.same_as(m.fingerprint, m.fingerprint_parts, stat):
            lost = lost_mod.lost_shards(fs, root, m)
            if lost and set(lost) != said:  # (asked again once the lease is held: said once)
                lost_mod.say_lost(url, m, lost)
                said.update(lost)
            return None if lost else m  # lost shards: their tasks are computed again
        cheap = identity.cheap_parts
        if changed := [k for k in cheap if m.fingerprint_parts.get(k) != cheap[k]]:
            said_changed = incremental.said_changed(
                changed, ref.by_value, m.pipeline, params, pipeline_mod.spec_name(ref.spec),
                dict(m.created_by), pipeline_mod.defaults(ref.function),
                pipeline_mod.files_record(ref.recorded_files), ref.parts,
            )  # fmt: skip
            raise SnapshotExistsError(
                f"{url} holds a snapshot made with different {said_changed}; pass "
                f"{overwrite_said()} to replace it, or choose another OUTPUT"
            )
        if m.history is None:
            raise SnapshotExistsError(
                f"{url} holds a snapshot made before snapshots had versions, from inputs this "
                "snap cannot compare with these (snap 0.1.0 recorded a file by its size and "
                f"time, not its content): pass {overwrite_said()} once to make it "
                "anew (its readers keep the "
                "old shards until snap gc); later creates compute only the tasks whose inputs "
                "changed"
            )
        return None  # only the inputs changed: the tasks that kept theirs are reused

    pipeline_mod.check_call(ref.function, params, with_input=bool(found.items))
    if (m := reusable()) is not None:
        log.info(
            "snapshot %s is up to date (version %d, fingerprint %s); nothing to do",
            url, m.version, m.fingerprint[:16],
        )  # fmt: skip
        if options.codec_given and m.compression != options.compression.to_json():
            log.warning(
                "note: the existing snapshot is compressed with %s, not %s; the layout is "
                "not part of the fingerprint: pass %s to rewrite it",
                codec_text(m.compression),
                codec_text(options.compression.to_json()), overwrite_said(),
            )  # fmt: skip
        if given := how.layout_not_applied(m):
            log.warning(
                "note: %s the shards a create writes; this snapshot is up to date, so "
                "none are written: pass %s to rewrite it with %s",
                ", ".join(given) + (" shapes" if len(given) == 1 else " shape"), overwrite_said(),
                "that option" if len(given) == 1 else "those options",
            )  # fmt: skip
        return _info(url, m, started, reused=True, dry_run=how.dry_run)

    def plan_against(previous: Manifest | None, ranges: list[range] | None = None,
                     chunking: Chunking | None = None) -> incremental.Plan:  # fmt: skip
        table = table_of(previous, planning=not overwrite)
        records = found.records(incremental.known_contents(table))
        chunking = chunking or incremental.chunking_for(
            None if overwrite else previous, options.inputs_per_task, found.sizes
        )
        if ranges is None:
            ranges = chunking.plan([r[0] for r in records], found.sizes)
        planned = incremental.plan(
            chunking, ranges, records, found.sizes, ref.code_hash, params, table,
            reuse=not overwrite, available=lost_mod.intact_shards(fs, root, previous),
        )  # fmt: skip
        log.info("%s", incremental.describe(url, planned, previous, how.dry_run))
        return planned

    if how.dry_run:  # (an unfinished run of the same snapshot: planned as it would resume)
        previous = commit_mod.read_manifest(fs, root, lost_ok=overwrite)
        if previous is None:
            guards.warn_missing_bucket(fs, root, url)
        last = None if overwrite else previous  # (the run a create takes up, as below)
        found.records(incremental.known_contents(table_of(previous)))
        chosen = runs_mod.choose_run(fs, root, identity, found, grown_layout(options, last),
                                     last, adopting=not overwrite)  # fmt: skip
        planned = plan_against(previous, *((chosen.plan, chosen.chunking) if chosen else ()))
        resumed = runs_mod.would_resume(fs, root, chosen, planned.computed, url)
        return _info(url, previous, started, False, len(planned.tasks), resumed, planned,
                     dry_run=True)  # fmt: skip
    guards.refuse_nested(url)
    ex.prepare(paths.job_spec(ref.spec))  # (Ray's address, the code it ships: before the run)
    # Shipped by value (a notebook's or a script's function, a closure): pickled once here,
    # before any work, so that a function that cannot be shipped is refused at once.
    payload = None if in_process or not ref.by_value else shipping.ship(ref.function, ref.name)

    new_output = guards.output_missing(fs, root)  # (gone again if it fails before its run)
    lease = guards.wait_for_lease(fs, root, how.lease_ttl, how.wait, url, reusable)
    if not isinstance(lease, lease_mod.Lease):
        log.info("another writer committed %s meanwhile; reusing it", url)
        return _info(url, lease, started, reused=True)
    run: str | None = None
    try:
        if (m := reusable()) is not None:
            return _info(url, m, started, reused=True)
        previous = commit_mod.read_manifest(fs, root, lost_ok=overwrite)  # followed, or None
        if previous is not None and (newer := versions.committed_after(fs, root, previous)):
            raise versions.rolled_back_error(fs, root, previous, newer)
        options = grown_layout(options, last := None if overwrite else previous)  # (to grow)
        found.records(incremental.known_contents(table_of(previous)))
        run, ranges, options, (fp, parts), chunking = runs_mod.start_or_resume(
            fs, root, identity, found, options, ref.spec, last, lease.epoch, not overwrite
        )
        planned = plan_against(previous, ranges, chunking)
        lease.set_run(run)
        done = runs_mod.resumed(fs, root, run, planned.computed, url)  # (also said)
        tasks = [TaskSpec(t.index, [found.items[j] for j in t.inputs], not found.items, t.key)
                 for t in planned.computed if t.index not in done]  # fmt: skip
        job = Job(url, storage_options or {}, run, paths.job_spec(ref.spec), params,
                  options.to_json(), payload, lease.epoch, ref.files, protocols)  # fmt: skip
        bar = (Progress(len(planned.computed), len(done), done_counts=runs_mod.done_counts(done))
               if how.progress else None)  # (and their records and bytes: said 0)  # fmt: skip
        entries = {e.path: e for e in previous.shards} if previous else {}
        results = {t.index: incremental.reused_result(t, entries) for t in planned.reused}
        results.update(done)
        describe = functools.partial(planned.describe_task, items=found.items)  # for errors
        # A task whose schema disagrees stops the run when it arrives, not after every task.
        agreement = commit_mod.SchemaAgreement(describe, results.values())

        def on_result(result: dict[str, Any]) -> None:
            lease.stop_if_lost()  # (a writer taken over while paused: its workers stop)
            agreement.add(result)
            results[int(result["task"])] = result
            if bar is not None:
                bar.task_done()

        def on_progress(records: int, nbytes: int) -> None:
            lease.stop_if_lost()
            if bar is not None:
                bar.add(records, nbytes)

        try:
            ex.run(job, tasks, on_result, on_progress)
        except BaseException as err:
            if bar is not None:
                bar.close()
            if isinstance(err, Exception):  # a failure after the lease was lost is that loss
                lease.stop_if_lost()  # (the taker's commit removed files a task was using)
            raise
        version = previous.version + 1 if previous else 1
        table = [
            planned.task_record(t, [e["path"] for e in results[t.index]["shards"]],
                                results[t.index]["schema"])
            for t in planned.tasks
        ]  # fmt: skip
        lease.check()  # (before any file of the commit: none where a moved OUTPUT was)
        rel, crc = commit_mod.write_tasks_table(fs, root, version, table)
        manifest = commit_mod.build_manifest(
            fingerprint=fp,
            parts=parts,
            pipeline={
                "spec": ref.spec_text or None,
                "function": ref.name,
                "shipped": "by value" if ref.by_value else "by name",
                "params": params,
                "inputs": {**found.description, "stat": identity.stat},
                **({"files": pipeline_mod.files_record(f)} if (f := ref.recorded_files) else {}),
                **({"parts": ref.parts} if ref.parts else {}),
            },
            compression=options.compression.to_json(),
            results=list(results.values()),
            run=run,
            describe=describe,
            history=History(
                version, previous.version if previous else None, chunking.to_json(),
                {**planned.changes, "overwrite": bool(overwrite and previous)}, rel, crc,
            ),
        )  # fmt: skip
        if bar is not None:  # the final line says what the snapshot holds, as the summary does
            bar.close(records=manifest.num_records, nbytes=manifest.bytes)
        tidy.committed(fs, root, manifest, previous, lease.release, lease.check)  # (signals held)
        if manifest.num_records == 0:
            log.warning(
                "note: the pipeline made no records from %s%s",
                counted(len(found.items), "input") if found.items else "its one call (no inputs)",
                pipeline_mod.why_no_records(ref.function),
            )
    except BaseException:
        if run is None and guards.first_alone(fs, root, lease.epoch):  # failed before its
            lease.release(remove=True)  # run (an unreadable input), the first writer ever:
            guards.remove_made(fs, root, new_output)  # no lease-only OUTPUT left (first_alone)
        raise
    finally:
        lease.release()
    return _info(url, manifest, started, reused=False, tasks=len(planned.tasks),
                 resumed=len(done), planned=planned)  # fmt: skip
