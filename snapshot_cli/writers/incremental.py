"""What a create computes and what it takes from the last version (pure).

The inputs are grouped into tasks (:mod:`.chunking`); each task gets a *key*, the hash of
everything that decides its records: the pipeline's code, the params, the record format and
its inputs' identities (name, size, content). A task whose key the last version's task table
holds is *reused*: its shards go into the new version as they are. Every other task is
computed. :class:`Plan` says which, and what changed between the two input lists (added,
removed, changed inputs), for ``snap create`` to print before it works (``--dry-run`` stops
there) and for the new version's ``history``.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..console import named
from ..history import TaskRecord
from ..manifest import RECORDS_FORMAT, Manifest, canonical_json, sha256_text
from ..progress import counted, human_bytes
from .chunking import Chunking
from .pipeline import files_changed, spec_name
from .value_identity import parts_changed


@dataclass(frozen=True)
class PlannedTask:
    index: int
    inputs: range  # indices into the run's inputs
    key: str
    reuse: TaskRecord | None = None  # the last version's task whose shards it takes


@dataclass
class Plan:
    """The tasks of a create, the inputs' identities, and what changed."""

    chunking: Chunking
    tasks: list[PlannedTask]
    records: list[list[Any]]  # per input: [name, size, version, content]
    changes: dict[str, Any] = field(default_factory=dict)
    input_sizes: list[int] = field(default_factory=list)

    @property
    def computed(self) -> list[PlannedTask]:
        return [t for t in self.tasks if t.reuse is None]

    @property
    def reused(self) -> list[PlannedTask]:
        return [t for t in self.tasks if t.reuse is not None]

    def describe_task(self, index: int, items: list[Any]) -> str:
        """Task ``index`` as errors name it, with its inputs (``items``: the run's)."""
        task = next(t for t in self.tasks if t.index == index)
        return describe_task(index, [items[j] for j in task.inputs])

    def task_record(self, task: PlannedTask, shards: list[str], schema: str | None) -> TaskRecord:
        return TaskRecord(task.key, [self.records[j] for j in task.inputs], shards, schema)

    def summary(self, reused_bytes: int) -> dict[str, Any]:
        """What the create will do, for the log and ``--dry-run --json``."""
        work = self.computed
        return {
            "tasks": len(self.tasks),
            "tasks_reused": len(self.tasks) - len(work),
            "tasks_computed": len(work),
            "inputs_to_compute": sum(len(t.inputs) for t in work),
            "input_bytes_to_compute": sum(self.input_sizes[j] for t in work for j in t.inputs),
            "reused_bytes": reused_bytes,
            **{k: self.changes[k] for k in ("inputs_added", "inputs_removed", "inputs_changed")},
        }


def known_contents(previous: list[TaskRecord] | None) -> dict[tuple[str, int, str], str]:
    """The last version's content identities by (name, size, version): a file listed the
    same is not read again to identify it."""
    return {(x[0], x[1], x[2]): x[3] for t in previous or [] for x in t.inputs if x[2]}


def reused_result(task: PlannedTask, entries: Mapping[str, Any]) -> dict[str, Any]:
    """A task result (as a task writes one) for a reused task: its shards' entries as the
    last version's manifest has them (``entries``, by path)."""
    assert task.reuse is not None
    return {
        "task": task.index,
        "run": None,
        "shards": [entries[p].to_json() for p in task.reuse.shards],
        "schema": task.reuse.schema,
        "inputs": len(task.inputs),
    }


def task_key(code: str, params: Mapping[str, Any], identities: list[list[Any]]) -> str:
    """The key of a task over inputs of these ``[name, size, version, content]`` records."""
    what = [code, sha256_text(canonical_json(params)), RECORDS_FORMAT,
            [[name, size, content] for name, size, _, content in identities]]  # fmt: skip
    return sha256_text(canonical_json(what))


def plan(
    chunking: Chunking,
    ranges: list[range],
    records: list[list[Any]],
    sizes: list[int],
    code: str,
    params: Mapping[str, Any],
    previous: list[TaskRecord] | None,
    reuse: bool = True,
    available: set[str] | None = None,
) -> Plan:
    """Key the tasks (``ranges`` of the inputs, whose ``records`` identify them), and mark
    those the last version (``previous``: its task table, None for none) holds as reused,
    unless ``reuse`` is False (``--overwrite``: everything is computed; the changes are still
    counted against the last version). A task is reused only if all its shards are among
    ``available`` (the last version's)."""
    by_key: dict[str, TaskRecord] = {}
    for t in previous or [] if reuse else []:
        if available is None or all(p in available for p in t.shards):
            by_key.setdefault(t.key, t)
    tasks = []
    for i, r in enumerate(ranges):
        key = task_key(code, params, [records[j] for j in r])
        taken = by_key.pop(key, None)  # a task's shards go to one new task at most
        tasks.append(PlannedTask(i, r, key, taken))
    changes = {
        "tasks_reused": sum(t.reuse is not None for t in tasks),
        "tasks_computed": sum(t.reuse is None for t in tasks),
        **input_changes([x for t in previous or [] for x in t.inputs], records),
    }
    return Plan(chunking, tasks, records, changes, list(sizes))


def input_changes(before: list[Any], now: list[Any]) -> dict[str, int]:
    """Inputs added, removed and changed from ``before`` to ``now`` (records: name first,
    content hash fourth), counted as multisets: an item given twice is two inputs (a list of
    items may repeat one), so a third copy of it is one added, not none."""
    was, new = Counter(r[0] for r in before), Counter(r[0] for r in now)
    hashed = {r[0]: r[3] for r in before}
    differs = {r[0] for r in now if r[0] in hashed and hashed[r[0]] != r[3]}
    return {
        "inputs_added": sum((new - was).values()),
        "inputs_removed": sum((was - new).values()),
        "inputs_changed": sum(min(was[n], new[n]) for n in differs),
    }


NAMES = {"code": "pipeline code", "params": "params", "format": "format"}


def said_changed(
    changed: list[str], by_value: bool, recorded: dict[str, Any], params: dict[str, Any],
    function: str = "", python: str | dict[str, Any] = "",
    defaults: dict[str, Any] | None = None, files: dict[str, str] | None = None,
    parts: dict[str, str] | None = None,
) -> str:  # fmt: skip
    """What differs from the committed snapshot's fingerprint parts ``changed``, each with
    what tells it apart: the params then and now (it said only "different params", and
    ``--param scale=1``, the default given, was a change no one could see); ``python``: the
    Python version the snapshot was made under (a lambda's code is its bytecode);
    ``defaults``: the function's parameter defaults, to say when a default given is the
    difference; ``files``: the code's files now (:func:`.pipeline.files_record`), to name
    those that differ from the recorded ones; ``parts``: a function sent by value's parts
    now (:mod:`.value_identity`), to name those that differ. ``python`` may be the
    snapshot's ``created_by``, which gives its identity scheme too."""
    scheme = python.get("identity_scheme") if isinstance(python, dict) else 4
    python = str(python.get("python", "")) if isinstance(python, dict) else python
    out = []
    for key in changed:
        text = NAMES.get(key, key)
        then = spec_name(str(recorded.get("spec") or ""))
        shipped = recorded.get("shipped")
        if key == "code" and function and then and then != function:
            text += f" (another function: {then} then, {function} now)"
        elif key == "code" and shipped in _SHIPPED and (shipped == "by value") != by_value:
            text += _shipped_otherwise(by_value, str(recorded.get("spec") or ""))
        elif key == "code":
            text += (
                f" ({which})"
                if (which := files_changed(recorded.get("files"), files or {}))
                or (which := parts_changed(recorded.get("parts"), parts or {}))
                else " (for a function sent by value: its source or a value it uses from "
                "outside, a global, a closure variable, a default, a function it calls, an "
                "object it reads such as a model's weights or a list it appends to)"
                if by_value
                else " (its file, or a file of your own modules its code uses)"
            )
            if by_value and (counted := _counted_otherwise(scheme)):
                text += (
                    f" (or only {'; or '.join(counted)}: if that is all, pass "
                    f"{named('--overwrite', 'overwrite=True')} once)"
                )
            now = ".".join(platform.python_version_tuple()[:2])
            if by_value and python and ".".join(python.split(".")[:2]) != now:
                text += (
                    f" (made under Python {python}, this is {now}: a function without source, "
                    "a lambda, is compared by its bytecode, which each Python version makes "
                    "otherwise; a def keeps its snapshot across versions)"
                )
        elif key == "params":
            then_params = recorded.get("params") or {}
            text += _params_change(then_params, params, defaults or {})
            if floated := [k for k, v in params.items() if _floated(then_params.get(k), v)]:
                text += (
                    f" (--param reads an integer given to a float-annotated KEY as a float "
                    f"since 2026-12-04: {', '.join(floated)}; --overwrite makes it anew)"
                )
            if texted := [k for k, v in params.items() if _texted(then_params.get(k), v)]:
                text += (
                    f" (--param reads VALUE to a Literal-annotated KEY as the value it spells "
                    f"since 2026-12-07, not as JSON: {', '.join(texted)}; --overwrite makes it "
                    "anew)"
                )
        out.append(text)
    return ", ".join(out)


_SHIPPED = ("by value", "by name")


def _shipped_otherwise(by_value: bool, spec: str) -> str:
    """Why the same function may be "different pipeline code": the snapshot identified it
    the other way (by its file's bytes; by value, by its source and the values it uses)."""
    script = "sent by value, as a function of a script run with python or of a notebook is"
    named_so = f"named by its file, {spec}" if spec else "named by its file"
    then, now = (named_so, script) if by_value else (script, "named by its file")
    return (
        f" (it was made from a function {then}; this one is {now}: the two ways never match, "
        "even for the same code; make it the way it was made to keep it)"
    )


def _counted_otherwise(scheme: Any) -> list[str]:
    """What a snap that made a snapshot of identity ``scheme`` (None: before schemes) counted
    otherwise in a function sent by value than this one, where that alone may be the
    difference."""
    if scheme is not None and not (isinstance(scheme, int) and scheme < 5):
        return []
    said = [] if isinstance(scheme, int) and scheme >= 4 else [
        "what snap counts since 2026-12-06: a decorator's own code, and the values held by "
        "a class defined in your script or notebook, which an older snap did not see change"
    ]  # fmt: skip
    return [
        *said,
        "a global of your script or notebook named as an attribute the code uses "
        "(`items` for `d.items()`), which snap counted as the code's before 2026-12-07",
    ]


def _params_change(then: dict[str, Any], now: dict[str, Any], defaults: dict[str, Any]) -> str:
    """The params that differ, each value cut short: both whole dicts were said, and a
    vocabulary of 10**6 ids made a message of 15 MB (a scale probe). "A default given
    counts" only where the value given on one side is the parameter's default (it was said
    of any key given on one side: ``name=zzz`` against a default ``'x'``)."""
    keys = sorted(set(then) | set(now))
    differ = [k for k in keys if k not in then or k not in now or _text(then[k]) != _text(now[k])]
    said = [
        f"{k}: {_short(then[k]) if k in then else 'not given'} then, "
        f"{_short(now[k]) if k in now else 'not given'} now"
        for k in differ[:5]
    ]
    more = f"; and {len(differ) - 5} more" if len(differ) > 5 else ""
    one_sided = [k for k in differ if (k in then) != (k in now)]
    default = any(k in defaults and _is(then.get(k, now.get(k)), defaults[k]) for k in one_sided)
    return f" ({'; '.join(said)}{more}{': a default given counts' if default else ''})"


def _is(value: Any, default: Any) -> bool:
    try:
        return _text(value) == _text(default)
    except (TypeError, ValueError):  # (a default no JSON holds: no param given equals it)
        return False


def _text(value: Any) -> str:  # (as the fingerprint has it: 2 and 2.0 differ)
    return canonical_json(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def _floated(then: Any, now: Any) -> bool:
    """An int param read as the equal float now (``--param lr=1`` to ``lr: float``)."""
    was_int = isinstance(then, int) and not isinstance(then, bool)
    return was_int and isinstance(now, float) and then == now


def _texted(then: Any, now: Any) -> bool:
    """A param JSON made a number, bool or None of that a ``Literal`` of strings reads as
    the text now (``--param split=1`` to ``split: Literal["1", "2"]``)."""
    if not isinstance(now, str) or isinstance(then, (str, list, dict)):
        return False
    return now.strip() in (json.dumps(then), str(then))


def chunking_for(
    previous: Manifest | None, inputs_per_task: int | None, sizes: list[int]
) -> Chunking:
    """How inputs become tasks: what the last version used (so that its tasks are found
    again; a grow given another ``inputs_per_task`` computed every task again, and says so:
    :func:`.options.grown_layout`), else ``inputs_per_task`` if given, else chosen for these
    inputs (``previous`` None: a first create, or ``--overwrite``, which groups afresh)."""
    if previous is not None and previous.history is not None:
        return Chunking.from_json(previous.history.chunking)
    return Chunking.choose(sizes, inputs_per_task)


def describe(url: str, planned: Plan, previous: Manifest | None, dry_run: bool = False) -> str:
    """What a create reuses and what it computes, said before any work (``dry_run``: what
    it would)."""
    kept = {p for t in planned.reused if t.reuse is not None for p in t.reuse.shards}
    reused = sum(e.bytes for e in previous.shards if e.path in kept) if previous else 0
    s = planned.summary(reused)
    c = planned.changes
    computing = (
        f"{'would compute' if dry_run else 'computing'} "
        f"{counted(s['tasks_computed'], 'task')} over "
        f"{counted(s['inputs_to_compute'], 'input')}"
        + (f" ({human_bytes(b)})" if (b := s["input_bytes_to_compute"]) else "")  # (items: 0)
    )
    if s["tasks_computed"] == 1 and not s["inputs_to_compute"]:  # (a function of no input)
        computing = f"{'would make' if dry_run else 'making'} the single call (no inputs)"
    if previous is None:  # nothing to reuse or compare with
        return f"{url}: version 1: {computing}"
    return (
        f"{url}: version {previous.version + 1}: {'would reuse' if dry_run else 'reusing'} "
        f"{s['tasks_reused']} of {s['tasks']} "
        f"tasks ({human_bytes(reused)} of shards), {computing}; against version "
        f"{previous.version}: {counted(c['inputs_added'], 'input')} added, "
        f"{c['inputs_removed']} removed, {c['inputs_changed']} changed"
    )


def describe_task(index: int, inputs: list[Any]) -> str:
    """A task as an error names it: its number and its inputs (a run of consecutive ones)."""
    if not inputs:
        return f"task {index} (the single call, no inputs)"
    if len(inputs) == 1:
        return f"task {index} (input {input_text(inputs[0])})"
    first, last = input_text(inputs[0]), input_text(inputs[-1])
    return f"task {index} (inputs {first} to {last}, {len(inputs)} in all)"


def input_text(item: Any) -> str:
    """An input as messages show it: a file's URL (or a text item) quoted, another item as
    its JSON (200 characters): ``0`` and ``{"id": 3}``, not ``'0'``, which read as text."""
    return repr(item) if isinstance(item, str) else json.dumps(item)[:200]
