"""Run state: the runs an OUTPUT holds, their finished tasks, and what an unfinished snapshot
looks like from outside (``snap inspect`` before the commit)."""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, storage, versions
from ..errors import SnapError, StorageError
from ..local_files import denies_write, is_dir, owner_of, who_of, write_hint
from ..manifest import Manifest
from . import adopt, incremental, lease
from . import inputs as inputs_mod
from .chunking import Chunking
from .incremental import PlannedTask
from .options import WriteOptions

log = logging.getLogger("snapshot_cli")


def find_runs(fs: AbstractFileSystem, root: str) -> list[dict[str, Any]]:
    """Every run directory's ``run.json`` (unreadable ones are skipped: abandoned, never used)."""
    runs = []
    for name in storage.list_names(fs, layout.runs_dir(root)):
        if not layout.is_run_name(name):
            continue
        try:
            info = json.loads(storage.read_own(fs, root, layout.run_file(root, name)))
        except (FileNotFoundError, ValueError, NotADirectoryError):
            continue  # (ManifestError is a ValueError: a FIFO, a link out of the snapshot)
        if _is_run_state(info, name):
            runs.append(info)
    return runs


def _is_run_state(info: Any, name: str) -> bool:
    """Whether a ``run.json`` is one snap wrote for run ``name`` (a hand-edited one with a
    ``created`` of "yesterday" or a ``plan`` of 5 failed ``snap inspect``: skipped as an
    unreadable one is)."""
    if not isinstance(info, dict) or info.get("run") != name:
        return False
    plan, created = info.get("plan"), info.get("created", 0.0)
    ok_plan = isinstance(plan, list) and all(
        isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p) and 0 <= p[0] <= p[1]
        for p in plan
    )
    now = time.time()
    ok_created = type(created) in (int, float) and 0 <= created <= now + 86400
    return ok_plan and ok_created and isinstance(info.get("fingerprint", ""), str)


def finished_tasks(
    fs: AbstractFileSystem, root: str, run: str, info: dict[str, Any] | None = None
) -> dict[int, dict[str, Any]]:
    """Results of the tasks of ``run`` that finished (their result file was written).

    A run whose ``run.json`` (``info``, else read) gives its tasks' keys (snap since
    2026-12-01): a result counts only while its key is its task's (a file of the plan the run
    had before it was adopted, :mod:`.adopt`, is not), and the tasks it took over when it was
    adopted count too."""
    if info is None:
        info = _run_state(fs, root, run)
    given = info.get("keys") if info is not None else None
    keys: list[Any] | None = given if isinstance(given, list) else None  # (None: snap before
    # 2026-12-01's run, which gave none: every result counts)
    done: dict[int, dict[str, Any]] = {}
    tasks_dir = layout.tasks_dir(root, run)
    for name in storage.list_names(fs, tasks_dir):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            result = json.loads(storage.read_own(fs, root, storage.join(tasks_dir, name)))
        except (FileNotFoundError, ValueError):
            continue  # written by a writer that died mid-write? write_atomic prevents it
        if isinstance(result, dict) and result.get("run") == run:
            i = int(result["task"])
            if keys is None or (0 <= i < len(keys) and result.get("key") == keys[i]):
                done[i] = result
    taken = info.get("taken") if keys is not None and info is not None else None  # (adopt.py)
    if keys is not None and isinstance(taken, dict):
        for k, result in taken.items():
            i = int(k) if isinstance(k, str) and k.isdigit() else -1
            if 0 <= i < len(keys) and isinstance(result, dict) and result.get("key") == keys[i]:
                done.setdefault(i, result)
    return done


def _run_state(fs: AbstractFileSystem, root: str, run: str) -> dict[str, Any] | None:
    try:
        info = json.loads(storage.read_own(fs, root, layout.run_file(root, run)))
    except (FileNotFoundError, ValueError, NotADirectoryError):
        return None
    return info if _is_run_state(info, run) else None


def _layout(options: Any) -> Any:
    """A run's options as far as its shards' layout goes (not how inputs are grouped)."""
    if not isinstance(options, dict):
        return options
    return {k: v for k, v in options.items() if k != "inputs_per_task"}


def _adoptable(
    fs: AbstractFileSystem, root: str, info: dict[str, Any], options: WriteOptions
) -> dict[int, Any]:
    """The finished tasks of a dead run this create may adopt: one that records its tasks'
    keys, was made with the layout given now (adopted, its options would be kept: another
    ``--compression`` or ``--shard-size`` would be silently dropped), and that this user may
    write and list (another user's is left, as before, and a new run made beside it)."""

    if "keys" not in info or _layout(info.get("options")) != _layout(options.to_json()):
        return {}
    try:
        refuse_unwritable(fs, root, info["run"])
        return finished_tasks(fs, root, info["run"], info)
    except OSError:  # (StorageError too)
        return {}


def resumed(
    fs: AbstractFileSystem, root: str, run: str, computed: list[PlannedTask], url: str
) -> dict[int, dict[str, Any]]:
    """The finished tasks of ``run`` among the plan's tasks to compute whose shards are all
    there at their size (the others are computed again, with a warning)."""
    wanted = {t.index for t in computed}
    done = {i: r for i, r in finished_tasks(fs, root, run).items() if i in wanted}
    done = adopt.whole(fs, root, done, url)
    if done:
        log.info(  # (said after the plan's "computing N tasks": how many of them remain)
            "resuming run %s: %d of those %d tasks were done by it; computing the other %d",
            run, len(done), len(computed), len(computed) - len(done),
        )  # fmt: skip
    return done


def done_counts(done: dict[int, dict[str, Any]]) -> tuple[int, int]:
    """The records and bytes of the tasks a resumed run finished before (its progress line's
    start)."""
    shards = [e for r in done.values() for e in r["shards"]]
    return sum(e["records"] for e in shards), sum(e["bytes"] for e in shards)


@dataclass
class Chosen:
    """The run a create takes up (:func:`choose_run`): its ``run.json``, plan and chunking,
    and where it is adopted (its inputs changed since), the finished tasks it keeps, by the
    new plan's numbers (``adopted``), of its finished tasks (``had``), and the plan's keys."""

    info: dict[str, Any]
    plan: list[range]
    chunking: Chunking
    adopted: dict[int, dict[str, Any]] | None = None  # None: resumed as it is (same inputs)
    had: dict[int, dict[str, Any]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)


def choose_run(
    fs: AbstractFileSystem,
    root: str,
    identity: inputs_mod.Identity,
    found: inputs_mod.Inputs,
    options: WriteOptions,
    last: Manifest | None,
    writer: int | None = None,
    adopting: bool = True,
) -> Chosen | None:
    """The unfinished run of this code, params and inputs, else the dead run whose finished
    tasks the new plan has most of (:mod:`.adopt`), else None (a new run); see
    :func:`start_or_resume` for the arguments. Read only: what a create takes up, and what
    ``--dry-run`` says it would (it planned an adoptable run's tasks as if none were done,
    and counted a run an ``--overwrite`` does not resume)."""
    chunking = incremental.chunking_for(last, options.inputs_per_task, found.sizes)
    regroup = last is None and options.inputs_per_task is None  # (no grouping fixed: an
    # adopted run's is used)
    found_runs = find_runs(fs, root) if adopting else []
    other_layout = []  # runs of this code, params and inputs, with other layout options
    for info in found_runs:
        same = functools.partial(identity.same_as, info.get("fingerprint", ""),
                                 info.get("parts") or {}, info.get("stat"))  # fmt: skip
        if _layout(info.get("options")) != _layout(options.to_json()):
            other_layout += [info] * same()  # (resumed, its options would be kept and the
            continue  # ones given now dropped: not resumed, but said)
        if same():
            try:
                kept = Chunking.from_json(info.get("chunking"))
            except ValueError:  # a run of an older snap: its tasks are what count
                kept = chunking
            return Chosen(info, [range(a, b) for a, b in info["plan"]], kept)
    keys_of = functools.cache(lambda c: adopt.plan_keys(c, identity, found))
    dead = [(i, d) for i in found_runs if (d := _adoptable(fs, root, i, options))]
    if chosen := adopt.choose(fs, root, dead, keys_of, chunking, regroup, writer):
        info, chunking, taken = chosen
        plan, keys = keys_of(chunking)
        return Chosen(info, plan, chunking, taken, next(d for i, d in dead if i is info), keys)
    for info in other_layout:  # (the same command but a layout option: hours computed again)
        finished = len(finished_tasks(fs, root, info["run"], info))
        adopt.say_other_layout(storage.to_url(fs, root), info, options.to_json(), finished)
    return None


def would_resume(
    fs: AbstractFileSystem, root: str, chosen: Chosen | None, computed: list[PlannedTask], url: str
) -> int:
    """How many of ``computed`` the run a create would take up (``chosen``) has finished,
    whole (said): what a dry run's create would not compute again."""
    if chosen is None:
        return 0
    wanted, run = {t.index for t in computed}, chosen.info["run"]
    if chosen.adopted is None:
        done = {i: r for i, r in finished_tasks(fs, root, run).items() if i in wanted}
        done = adopt.whole(fs, root, done)
    else:  # (whole already: adopt.choose takes no other)
        done = {i: r for i, r in chosen.adopted.items() if i in wanted}
    if done and chosen.adopted is None:
        log.info("%s: would resume run %s: %d of %d tasks already done", url, run, len(done),
                 len(computed))  # fmt: skip
    elif done:
        log.info("%s: would keep %d of the %d finished tasks of run %s, interrupted before its "
                 "inputs changed (%d of the %d to compute)", url, len(done), len(chosen.had),
                 run, len(done), len(computed))  # fmt: skip
    return len(done)


def refuse_unwritable(fs: AbstractFileSystem, root: str, run: str | None) -> None:
    """Before any work, on local disk: a StorageError if this user may not write where a
    create writes (the snapshot's directory, ``shards/``, ``_versions/``) or, resuming
    ``run``, that run's directory (another user's, left by a create under umask 022).
    Resuming would compute every task and then fail to record each; a new run beside it
    would silently compute its finished tasks again (and leave it for the next create to
    resume): neither is done, the error names the directory, its owner and what to do."""
    if not storage.is_local(fs):
        return
    url = storage.to_url(fs, root)
    directory = root
    try:  # (a look that fails, EIO or ENOMEM, is no permission: said as what it is)
        for directory in (root, layout.shards_dir(root), layout.versions_dir(root)):
            if denies_write(directory):
                hint = write_hint(directory, "run the same command as {owner}")
                raise StorageError(f"cannot add to {url}: {hint}")
        if run is not None:
            _refuse_unwritable_run(fs, root, run, url)
    except OSError as err:
        if isinstance(err, SnapError):
            raise
        raise storage.fault(err, directory) from err


def _refuse_unwritable_run(fs: AbstractFileSystem, root: str, run: str, url: str) -> None:
    tasks, run_dir = layout.tasks_dir(root, run), layout.run_dir(root, run)
    try:
        has_tasks = is_dir(tasks)
    except PermissionError:  # (run_dir it may not enter: said of run_dir)
        has_tasks = False
    if denies_write(tasks if has_tasks else run_dir):
        done = len(finished_tasks(fs, root, run))
        directory = run_dir if denies_write(run_dir) else tasks  # (chmod -R: all of it)
        hint = write_hint(directory, "run the same command as {owner}")
        own = who_of(directory).own  # (its own: no one to "have" do it)
        who = "" if own else f"have {owner_of(directory)[0]} "
        raise StorageError(
            f"cannot resume the unfinished run {run} of {url} ({done} of its tasks done): "
            f"{hint}; or {who}remove that run (snap gc {url}), which starts it over"
        )


def unfinished_state(url: str) -> dict[str, Any] | None:
    """State of an unfinished snapshot (no manifest, but writer state), or None.

    None too when a manifest.json exists, or is lost while ``_versions/`` keeps a committed
    version: a damaged or lost manifest is reported as such, never hidden behind the state of
    the runs that wrote it.
    """
    fs, root = storage.resolve(url)
    if storage.exists(fs, layout.manifest_path(root)) or not storage.isdir(fs, root):
        return None
    if versions.lost(fs, root) is not None:
        return None
    runs = find_runs(fs, root)
    holder = lease.current(fs, root)
    if not runs and holder is None:
        return None  # no writer ever worked here: not a snapshot
    state = []
    for info in runs:
        done = finished_tasks(fs, root, info["run"], info)
        state.append(
            {
                "run": info["run"],
                "tasks_done": len(done),
                "tasks": len(info["plan"]),
                "created": info.get("created"),
                "pipeline": info.get("pipeline"),
            }
        )
    writer = None
    if holder is not None:
        heartbeat = holder.heartbeat
        writer = {
            "alive": lease.is_alive(holder),
            "holder": holder.describe(),
            "host": holder.holder.get("host"),
            "pid": holder.holder.get("pid"),
            "run": holder.holder.get("run"),
            "heartbeat_age_s": round(time.time() - heartbeat, 1) if heartbeat else None,
        }
    return {"path": storage.to_url(fs, root), "finished": False, "runs": state, "writer": writer}


def start_or_resume(
    fs: Any,
    root: str,
    identity: inputs_mod.Identity,
    found: inputs_mod.Inputs,
    options: WriteOptions,
    spec: str,
    last: Manifest | None,
    writer: int | None = None,
    adopting: bool = True,
) -> tuple[str, list[range], WriteOptions, tuple[str, dict[str, Any]], Chunking]:
    """The unfinished run of this code, params and inputs (keeping its tasks and options), or
    a dead run whose finished tasks the new plan has (some of its inputs changed: adopted,
    see :mod:`.adopt`), or a new run (:func:`choose_run`). Also returns the run's
    ``(fingerprint, parts)`` and chunking. ``last``: the version grown (None: a first create
    or ``--overwrite``), whose grouping of inputs is kept; ``writer``: this create's epoch;
    ``adopting``: False for ``--overwrite``, which computes everything: it resumes no run,
    not even one of the same fingerprint (an --overwrite is given when what changed is
    outside it, a file the pipeline reads: a killed --overwrite run again after such an edit
    kept 45 of 60 tasks of the file before it; a storage probe)."""
    chosen = choose_run(fs, root, identity, found, options, last, writer, adopting)
    fp, parts = identity.full
    if chosen is not None and chosen.adopted is None:  # resumed as it is
        info = chosen.info
        refuse_unwritable(fs, root, info["run"])
        found_fp = (info["fingerprint"], info.get("parts") or parts)
        options = WriteOptions.from_json(info["options"])
        return info["run"], chosen.plan, options, found_fp, chosen.chunking
    if chosen is not None and chosen.adopted is not None:
        info, plan = chosen.info, chosen.plan
        adopt.forget_results(fs, root, info["run"])  # (first: see its docstring)
        adopt.rewrite(fs, root, {
            **info, "fingerprint": fp, "parts": parts, "stat": identity.stat, "pipeline": spec,
            "chunking": chosen.chunking.to_json(), "plan": [[r.start, r.stop] for r in plan],
            "keys": chosen.keys, "taken": {str(i): r for i, r in sorted(chosen.adopted.items())},
        })  # fmt: skip
        url = storage.to_url(fs, root)
        adopt.whole(fs, root, chosen.had, url)  # (said: finished tasks whose shards are not whole)
        adopt.say(url, info["run"], len(chosen.adopted), len(chosen.had))
        options = WriteOptions.from_json(info["options"])
        return info["run"], plan, options, (fp, parts), chosen.chunking
    refuse_unwritable(fs, root, None)
    run = uuid.uuid4().hex[:10]
    chunking = incremental.chunking_for(last, options.inputs_per_task, found.sizes)
    plan, keys = adopt.plan_keys(chunking, identity, found)
    info = {
        "run": run,
        "fingerprint": fp,
        "parts": parts,
        "stat": identity.stat,
        "pipeline": spec,
        "created": time.time(),
        "options": options.to_json(),
        "chunking": chunking.to_json(),
        "plan": [[r.start, r.stop] for r in plan],
        "keys": keys,  # (each task's: its result says it, see finished_tasks)
    }
    path = layout.run_file(root, run)
    storage.write_atomic(fs, path, json.dumps(info).encode())
    return run, plan, options, (fp, parts), chunking
