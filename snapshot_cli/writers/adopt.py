"""A dead run whose inputs changed since: its finished tasks that the new plan has are kept.

A first create of hundreds of inputs killed after hours, run again once the next day's file
had landed, computed every task again: its run was resumed only if its whole fingerprint,
the input listing included, was the same. A task's *key* (:func:`.incremental.task_key`)
covers everything that decides its records: the code, the params, the record format and each
of its inputs' name, size and content. So a finished task of a dead run whose key a task of
the new plan has wrote exactly the records that task would: it is kept, if its shards are
all there at their size (one listing of ``shards/``); every other task is computed.

The run is adopted in place, under the lease: its ``run.json`` is rewritten (one atomic
write) with the new fingerprint, plan and keys, and the results of the tasks it keeps
("taken"), numbered as the new plan numbers them. The run keeps its id, so its shards keep
their names: ``snap gc`` beside the create keeps the live writer's run and every shard named
after it, and the commit's tidying removes the run and the shards of its tasks not kept. A
result file counts only while its key is the key of the plan's task of its number
(:func:`.runs.finished_tasks`): one left from the old plan, or written late by a paused
writer of it, is not taken for another task. Killed again, the run is resumed (the same
inputs) or adopted again (changed again), with what it had taken.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, storage
from ..progress import counted, human_bytes
from . import incremental
from . import inputs as inputs_mod
from .chunking import Chunking

log = logging.getLogger("snapshot_cli")


def plan_keys(
    chunking: Chunking, identity: inputs_mod.Identity, found: inputs_mod.Inputs
) -> tuple[list[range], list[str]]:
    """The tasks of these inputs under ``chunking``, and each one's key."""
    records = found.records()
    plan = chunking.plan([r[0] for r in records], found.sizes)
    code, params = identity.code_hash, identity.params
    return plan, [incremental.task_key(code, params, [records[j] for j in r]) for r in plan]


def whole(
    fs: AbstractFileSystem, root: str, results: Mapping[int, dict[str, Any]], url: str = ""
) -> dict[int, dict[str, Any]]:
    """The ``results`` whose shards are all in ``shards/`` at the size each gives (one
    listing); ``url``: warn of the others, whose tasks are computed again."""
    if not results:
        return {}
    sizes = storage.entry_sizes(fs, layout.shards_dir(root))

    def there(result: dict[str, Any]) -> bool:
        shards = result.get("shards")
        return isinstance(shards, list) and all(
            isinstance(e, dict) and sizes.get(str(e.get("path", "")).rsplit("/", 1)[-1])
            == e.get("bytes") for e in shards
        )  # fmt: skip

    kept = {i: r for i, r in results.items() if there(r)}
    if url and len(kept) < len(results):
        log.warning(
            "%s: the shards of %s of the unfinished run are missing or cut short; computing "
            "them again", url, counted(len(results) - len(kept), "finished task"),
        )  # fmt: skip
    return kept


def _names_free(result: dict[str, Any], writer: int | None) -> bool:
    """Whether no shard of ``result`` has a name this create's tasks may write (the same
    writer epoch: only if the lease files that keep epochs rising were removed)."""
    if writer is None:
        return True
    tail = f"-{writer:08d}.arrow"
    return not any(str(e.get("path", "")).endswith(tail) for e in result["shards"])


def choose(
    fs: AbstractFileSystem,
    root: str,
    runs: list[tuple[dict[str, Any], dict[int, dict[str, Any]]]],
    keys_of: Callable[[Chunking], tuple[list[range], list[str]]],
    given: Chunking,
    regroup: bool,
    writer: int | None,
) -> tuple[dict[str, Any], Chunking, dict[int, dict[str, Any]]] | None:
    """The dead run (``runs``: each with its finished tasks) that gives the new plan the most
    finished tasks, the chunking of that plan (the run's own if ``regroup``: no last version
    or ``inputs_per_task`` fixes it) and the tasks taken, by their number in it; or None.

    ``keys_of``: the new plan and its keys under a chunking."""
    best: tuple[dict[str, Any], Chunking, dict[int, dict[str, Any]]] | None = None
    for info, done in runs:
        usable: dict[str, list[dict[str, Any]]] = {}  # whole results, by key
        for r in whole(fs, root, done).values():
            if isinstance(r.get("key"), str) and _names_free(r, writer):
                usable.setdefault(r["key"], []).append(r)
        if not usable:
            continue
        chunking = given
        if regroup:
            with contextlib.suppress(ValueError):  # (a run of an older snap: the given)
                chunking = Chunking.from_json(info.get("chunking"))
        taken: dict[int, dict[str, Any]] = {}
        for i, k in enumerate(keys_of(chunking)[1]):  # each result to one task at most (the
            if usable.get(k):  # same inputs twice make two tasks of one key: each its own)
                taken[i] = {**usable[k].pop(), "task": i}
        if taken and (best is None or len(taken) > len(best[2])):
            best = info, chunking, taken
    return best


def forget_results(fs: AbstractFileSystem, root: str, run: str) -> None:
    """Remove the run's result files before its ``run.json`` names the new plan (the results
    kept are in it, as "taken"). A snap from before 2026-12-01 resuming the adopted run (its
    fingerprint matches) reads results by their numbers, which the new plan gives to other
    tasks: it committed the records of inputs since removed. Killed in between, the run
    keeps its old plan and no results: its tasks are computed again, nothing is wrong."""
    tasks = layout.tasks_dir(root, run)
    for name in storage.list_names(fs, tasks):
        with contextlib.suppress(FileNotFoundError):
            storage.remove(fs, storage.join(tasks, name))


def rewrite(fs: AbstractFileSystem, root: str, info: dict[str, Any]) -> None:
    """Write the adopted run's new ``run.json`` (one atomic write: the old plan or the new)."""
    storage.write_atomic(fs, layout.run_file(root, info["run"]), json.dumps(info).encode())


def say(url: str, run: str, taken: int, done: int) -> None:
    log.info(
        "%s: run %s ended unfinished (it failed or was stopped) before its inputs changed: "
        "keeping %s of its %d finished "
        "(the same inputs, code and params), computing the rest",
        url, run, counted(taken, "task"), done,
    )  # fmt: skip


def say_other_layout(url: str, info: dict[str, Any], now: dict[str, Any], finished: int) -> None:
    """Warn that the unfinished run ``info`` of the same code, params and inputs is not
    resumed, being of other layout options than ``now``: a create given "the same command"
    less a ``--shard-size`` computed every task again, unsaid (a probe)."""
    if not finished:
        return
    theirs = info.get("options")
    theirs = theirs if isinstance(theirs, dict) else {}
    differ = [
        f"{_option(k, theirs.get(k))} there, {_option(k, now.get(k))} now"
        for k in sorted(set(theirs) | set(now))
        if k != "inputs_per_task" and theirs.get(k) != now.get(k)
    ]
    log.warning(
        "%s: run %s of this code, params and inputs, which finished %s, is not resumed: it "
        "was made with other layout options (%s), which a resumed run would keep; this "
        "create computes those tasks again: run it with those options to resume that run",
        url, info.get("run"), counted(finished, "task"), "; ".join(differ) or "other options",
    )  # fmt: skip


def _option(key: str, value: Any) -> str:
    """A layout option as given: ``--compression zstd --level 3``, ``--shard-size 1.0 KiB``."""
    if key == "compression" and isinstance(value, dict):
        level = value.get("level")
        return f"--compression {value.get('codec')}" + (f" --level {level}" * (level is not None))
    flag = f"--{key.replace('_', '-')}"  # (column_bytes has none: said as Python's)
    if key in ("shard_size", "batch_bytes") and isinstance(value, int):
        return f"{flag} {human_bytes(value)}"
    return f"{flag} {value}" if key == "batch_rows" else f"{key}={value!r}"
