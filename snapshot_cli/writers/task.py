"""One task: call the pipeline on a group of inputs and write what it yields as shards.

A task is the unit of parallelism and of resume. It writes its shards, then a small result
file ``_runs/<run>/tasks/<task>.json`` that the committer (and a resumed run) trusts.
Everything a task needs travels as JSON-compatible values (:class:`TaskSpec`, :class:`Job`),
never pickled objects, so that any executor can ship it.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays, forks, layout, retry, signals, storage
from .. import schema as schema_mod
from ..errors import PipelineError, PipelineLoadError, RecordError, SchemaMismatchError, SnapError
from ..hidden_frames import HIDDEN
from ..manifest import ShardEntry
from ..progress import ordinal, pipeline_output
from ..shortages import WRITE_LESS, memory_limit
from . import advice, convert, foreign, importing, records, returned, shipping, worker_storage
from . import pipeline as pipeline_mod
from .cell_names import cells_named
from .incremental import input_text
from .options import WriteOptions
from .shard import ShardRoller

ProgressFn = Callable[[int, int], None]  # (records, bytes on disk) since the last call


@dataclass(frozen=True)
class Job:
    """What every task of one run shares."""

    output: str
    storage_options: dict[str, Any]
    run: str
    pipeline: str  # a spec workers import by name, or ""
    params: dict[str, Any]
    options: dict[str, Any]
    function: str | None = None  # the function pickled by value (base64), see shipping.py
    writer: int | None = None  # the create's lease epoch, in its shards' names
    files: dict[str, str] | None = None  # the spec's as fingerprinted (check_imported)
    protocols: dict[str, str] | None = None  # registered in the parent only: worker_storage

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskSpec:
    """One task: its index and its inputs (file URLs or JSON items). ``call_once``: no inputs.
    ``key``: the task's key (:func:`.incremental.task_key`), in its result file, so that a run
    adopted for a changed plan (:mod:`.adopt`) tells which task each result is of."""

    index: int
    inputs: list[Any]
    call_once: bool = False
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies every item (a create of 1M items spent a
        # third of its time there); the items are JSON values, sent as they are
        return {"index": self.index, "inputs": self.inputs, "call_once": self.call_once,
                "key": self.key}  # fmt: skip


def result_path(root: str, run: str, task: int) -> str:
    return layout.result_path(root, run, task)


class TaskWriter:
    """Turns a stream of records and batches into right-sized record batches, then shards."""

    def __init__(
        self,
        roller: ShardRoller,
        options: WriteOptions,
        ragged: frozenset[str] = frozenset(),
        on_batch: ProgressFn | None = None,
    ) -> None:
        self.roller, self.options, self.ragged = roller, options, ragged
        self.on_batch = on_batch
        self.schema: pa.Schema | None = None
        self.records = records.RecordBuffer(ragged, (options.batch_rows, options.batch_bytes))
        self.pending: list[pa.RecordBatch] = []
        self.owned: list[bool] = []  # per pending batch: False while it may share the
        # pipeline's memory (a yielded batch is taken as it is, without a copy)
        self.pending_rows = self.pending_bytes = 0
        self.batch_bytes: int | None = None  # a record batch's, once its columns are known

    def _batch_bytes(self, columns: int) -> int:
        if self.batch_bytes is None:  # (every item of a task has the same columns)
            self.batch_bytes = self.options.batch_bytes_for(columns)
        return self.batch_bytes

    def add(self, item: Any) -> None:
        """Add one yielded item: a record (dict) or a batch."""
        try:
            if type(item) is not dict and convert.is_batch(item):  # a plain dict is a record
                self._add_batch(item)
            elif type(item) is dict or isinstance(item, Mapping):  # (the ABC check is slow)
                self.records.add(item, self.schema)
                opts = self.options
                rows, size = self.records.rows, self.records.nbytes
                cap = self.batch_bytes or self._batch_bytes(len(item))
                if rows >= opts.batch_rows or size >= cap:
                    # a column of nothing but empty lists so far has no type: records are
                    # kept (up to 64 batches' worth) until a value gives it one
                    wait = rows < 64 * opts.batch_rows and size < 64 * cap
                    if not (wait and self.records.untyped()):
                        self.flush_records()
            elif isinstance(item, np.ndarray) and item.dtype.names is not None:
                item = returned.structured_batch(item)  # (a table of named fields)
                self._add_batch(item)
            else:
                raise RecordError(advice.not_a_record_message(item))
        except SchemaMismatchError as err:
            explained = self._explained(err, item)
            if explained is err:
                raise
            raise explained from err

    def _add_batch(self, item: Any) -> None:
        self.flush_records()  # keep yield order
        for batch in convert.to_batches(item, self.schema, self.ragged):
            self._push(batch, owned=False)
        self._own_pending()

    def _explained(self, err: SchemaMismatchError, item: Any) -> SchemaMismatchError:
        """``err`` with what the item tells of it: a DataFrame's column of objects of several
        types, or a name ``@snap.ragged`` declared that is no column."""
        if foreign.is_dataframe(item) and (mixed := advice.mixed_frame_column(item, str(err))):
            return SchemaMismatchError(mixed)
        if self.schema is not None:
            columns = list(self.schema.names)
        else:
            columns = [str(k) for k in item] if isinstance(item, Mapping) else []
        note = advice.ragged_names_note(advice.unmatched_ragged(self.ragged, columns), columns)
        return SchemaMismatchError(f"{err}. {note}") if note else err

    def flush_records(self) -> None:
        if self.records.rows:
            for batch in self.records.take():
                self._push(batch)

    def _push(self, batch: pa.RecordBatch, owned: bool = True) -> None:
        if batch.num_rows == 0:
            return
        batch = convert.conform(batch, self.schema)
        if self.schema is None:
            self.schema = batch.schema
        self.pending.append(batch)
        self.owned.append(owned)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        self._drain(final=False)

    def _drain(self, final: bool) -> None:
        opts = self.options
        if not self.pending:
            return
        cap = self._batch_bytes(self.pending[0].num_columns)
        full = self.pending_rows >= opts.batch_rows or self.pending_bytes >= cap
        if not (full or final):
            return
        row_bytes = max(1, self.pending_bytes // max(1, self.pending_rows))
        step = max(1, min(opts.batch_rows, cap // row_bytes))
        if len(self.pending) > 1 and self.pending_bytes > arrays.MAX_OFFSET:
            # merged, a column might hold more text, bytes or ragged values than one Arrow
            # array can: all but the last are written as they are, in slices
            for batch in self.pending[:-1]:
                for start in range(0, batch.num_rows, step):
                    self._write(batch.slice(start, step))
            del self.pending[:-1], self.owned[:-1]
        merged = self.pending[0] if len(self.pending) == 1 else pa.concat_batches(self.pending)
        owned = len(self.pending) > 1 or self.owned[0]
        start = 0
        while merged.num_rows - start >= step or (final and start < merged.num_rows):
            self._write(merged.slice(start, step))
            start += step
        rest = merged.slice(start)
        self.pending = [rest] if rest.num_rows else []
        self.owned = [owned] if rest.num_rows else []
        self.pending_rows, self.pending_bytes = rest.num_rows, rest.nbytes if rest.num_rows else 0

    def _own_pending(self) -> None:
        """Copy what is kept of the batches the pipeline yielded before it runs again: it may
        refill the arrays they were made of (a DataFrame or Batch over a reused buffer)."""
        for i, owned in enumerate(self.owned):
            if not owned:
                self.pending[i], self.owned[i] = pa.concat_batches([self.pending[i]]), True

    def _write(self, batch: pa.RecordBatch) -> None:
        written = self.roller.write(batch)
        if self.on_batch is not None:
            self.on_batch(batch.num_rows, written)

    def close(self) -> tuple[list[ShardEntry], pa.Schema | None]:
        self.flush_records()
        self._drain(final=True)
        self.roller.finish_shard()
        return self.roller.entries, self.schema


def _describe_input(spec: TaskSpec, item: Any) -> str:
    if spec.call_once:
        return "the single call (no inputs)"
    return f"input {input_text(item)} (task {spec.index})"


def load_job_function(job: Job) -> Callable[..., Any]:
    """The job's pipeline function: unpickled if shipped by value, else imported by name."""
    if job.function:
        return shipping.load(job.function)
    if not job.pipeline:
        raise PipelineLoadError("this job has neither a pipeline spec nor a shipped function")
    fn = importing.load_function(job.pipeline)
    pipeline_mod.check_imported(job.files or {})
    return fn


def run_task(
    job: Job,
    spec: TaskSpec,
    on_batch: ProgressFn | None = None,
    function: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Run one task to completion and write its result file. Returns the result (JSON values).

    ``function`` is the pipeline itself when the task runs in the process that has it.

    Raises:
        PipelineError: the user's function raised (message names the input, has its traceback).
        RecordError: it yielded something snap cannot store (message names the input).
    """
    __tracebackhide__ = HIDDEN  # (snap's frames in a notebook: hidden_frames.py)
    fn = function if function is not None else load_job_function(job)
    options = WriteOptions.from_json(job.options)
    worker_storage.register(job.protocols or {})
    fs, root = storage.resolve(job.output, job.storage_options)
    ragged: frozenset[str] = getattr(fn, "__snap_ragged__", frozenset())
    started = time.time()
    items = [None] if spec.call_once else spec.inputs
    for attempt in range(TASK_TRIES):
        roller = ShardRoller(
            fs, root, job.run, spec.index, options.compression, options.shard_size, job.writer
        )
        writer = TaskWriter(roller, options, ragged, on_batch)
        try:
            # stdout belongs to the command's result (--json); the user's prints go to stderr.
            with pipeline_output():
                entries, schema = _feed(fn, job, spec, items, writer, roller)
            break
        except OSError as err:
            if attempt + 1 >= TASK_TRIES or not retry.worth_a_new_try(err):
                raise
            retry.back_off(attempt, f"writing the shards of task {spec.index}", err)
    result = {
        "task": spec.index,
        "run": job.run,
        **({"key": spec.key} if spec.key else {}),
        "shards": [e.to_json() for e in entries],
        "schema": schema_mod.encode_schema(schema) if schema is not None else None,
        "inputs": len(spec.inputs),
        "seconds": round(time.time() - started, 3),
        **({"ragged": sorted(ragged)} if ragged else {}),  # (a misspelt name is said of)
    }
    storage.write_atomic(fs, result_path(root, job.run, spec.index), json.dumps(result).encode())
    return result


# A streamed shard write cannot be retried call by call, as other storage calls are: a task
# whose write failed transiently (a time-out, a dropped connection) runs again from its start.
TASK_TRIES = 3


def _feed(
    fn: Callable[..., Any],
    job: Job,
    spec: TaskSpec,
    items: list[Any],
    writer: TaskWriter,
    roller: ShardRoller,
) -> tuple[list[ShardEntry], pa.Schema | None]:
    """Call the function on every item and write what it yields; abort the shard on error."""
    __tracebackhide__ = HIDDEN
    forks_at_start = forks.count
    try:
        for item in items:  # (the input is described only for an error: JSON of an item
            # per call was a fifth of a create of small items)
            try:
                result = fn(**job.params) if spec.call_once else fn(item, **job.params)
                iterator = iter(returned.items(result))
            except RecordError as err:  # (what it returned)
                raise type(err)(f"{_describe_input(spec, item)}: {err}") from err
            except (SnapError, KeyboardInterrupt):
                raise
            except BaseException as err:  # sys.exit() in it is its error too, and so is
                # asyncio.CancelledError (an async client's): a worker said it "exited"
                if _ray_stop(err):
                    raise
                raise _pipeline_error(err, _describe_input(spec, item)) from err
            for count in itertools.count(1):
                try:
                    out = next(iterator)
                except StopIteration:
                    break
                except (SnapError, KeyboardInterrupt):
                    raise
                except BaseException as err:
                    if _ray_stop(err):
                        raise
                    raise _pipeline_error(err, _describe_input(spec, item)) from err
                try:
                    _not_forked(forks_at_start)
                    writer.add(out)
                except RecordError as err:
                    where = _describe_input(spec, item)
                    raise type(err)(f"{where}, {ordinal(count)} item it yielded: {err}") from err
                except MemoryError as err:  # (snap's copy of it: numpy's, Arrow's)
                    if isinstance(err, SnapError):
                        raise  # (said where it failed: a shard's write)
                    where = f"{_describe_input(spec, item)}, {ordinal(count)} item it yielded"
                    raise memory_limit(where, err, less=WRITE_LESS) from err
                signals.raise_received()  # (a Ctrl-C the function swallowed, --workers 0)
            signals.raise_received()
        _not_forked(forks_at_start)
        return writer.close()
    except BaseException:
        _not_forked(forks_at_start)
        roller.abort()
        raise


def _not_forked(at_start: int) -> None:
    """In a child the pipeline forked (and did not end with ``os._exit``: it went on in
    snap's code, writing its parent's shard files, aborting them or committing a snapshot
    of its own): say so and exit at once, before it writes, aborts or reports anything."""
    if forks.count != at_start:
        os.write(2, (
            f"snap: a process the pipeline forked (pid {os.getpid()}) returned into snap's "
            "code; it exits here, writing nothing: end a forked child with os._exit()\n"
        ).encode())  # fmt: skip
        os._exit(1)


def _ray_stop(err: BaseException) -> bool:
    """Whether ``err`` is Ray's own SystemExit, raised in its worker by the SIGTERM that
    stops it (``ray stop``, a node drained or preempted): the worker ends, as Ray means it
    to, and Ray retries the task (it was "the pipeline raised SystemExit", no retry)."""
    return isinstance(err, SystemExit) and hasattr(err, "ray_terminate_msg")


def _pipeline_error(err: BaseException, where: str) -> PipelineError:
    return PipelineError(
        f"the pipeline raised {type(err).__name__} on {where}:\n"
        f"{cells_named(importing.format_user_traceback(err))}{advice.main_pickling_hint(err)}"
        f"{advice.ipython_name_hint(err)}"
    )
