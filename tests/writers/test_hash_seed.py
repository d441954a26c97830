"""A pipeline's fingerprint is the same under every ``PYTHONHASHSEED`` (Python's default is a
new random seed in every process).

It was not where a set reached it through a repr or a pickle: a lambda's (or exec'd code's)
set literal hashed as ``repr`` of its frozenset constant, a list or dict of more than 10,000
items hashed through one pickle, an object without ``__dict__`` (``@dataclass(slots=True)``)
through its pickle; their items came in an order that varies with the seed. The second run
of the same script found "different pipeline code" (SnapshotExistsError), and an interrupted
create resumed nothing. Each case runs in processes of different seeds here.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

SEEDS = ("1", "2", "3", "4")
WORDS = '"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"'

# Each case: a function whose identity (its fingerprint's code part) once depended on the seed.
CASES = f"""
import dataclasses, json, sys, types
from snapshot_cli.writers import shipping

cases = {{}}
cases["a lambda with a set literal"] = lambda n: [{{"n": n, "k": str(n) in {{{WORDS}}}}}]

namespace = {{}}
exec('''def f(n):\\n    return [{{"n": n, "k": str(n) in {{{WORDS}}}}}]\\n''', namespace)
cases["exec'd code with a set literal"] = namespace["f"]

cases["a lambda in a lambda with a set literal"] = lambda n: [
    {{"n": n, "k": list(filter(lambda w: w in {{{WORDS}}}, ("alpha", str(n))))}}
]
cases["a set literal of tuples"] = lambda n: [
    {{"n": n, "k": (str(n), 1) in {{("alpha", 1), ("beta", 2), ("gamma", 3), ("delta", 4)}}}}
]

def _tool_made(n):
    return [{{"n": n, "k": str(n) in ("alpha", None)[1]}}]
consts = tuple(
    ("x", frozenset({{{WORDS}}})) if c is None else c for c in _tool_made.__code__.co_consts
)  # a tuple constant holding a frozenset: no compiler writes one, a bytecode tool may
cases["a frozenset in a tuple constant"] = types.FunctionType(
    _tool_made.__code__.replace(co_consts=consts, co_filename="<tool>"), globals()
)

SYNONYMS = {{f"class{{i}}": {{f"s{{i}}a", f"s{{i}}b", f"s{{i}}c"}} for i in range(20_000)}}
cases["a global dict of 20,000 sets"] = lambda n: [{{"n": n, "k": len(SYNONYMS["class1"])}}]

TABLE = tuple((i, frozenset({{f"a{{i}}", f"b{{i}}", f"c{{i}}"}})) for i in range(12_000))
cases["a global tuple of 12,000 tuples holding a set"] = lambda n: [{{"n": n, "k": len(TABLE)}}]

@dataclasses.dataclass(slots=True, frozen=True)
class Rules:
    stop: frozenset

RULES = Rules(frozenset({{{WORDS}}}))
cases["a slots dataclass holding a frozenset"] = lambda n: [{{"n": n, "k": str(n) in RULES.stop}}]

cases["a default argument with a set literal"] = lambda n, keep=(lambda w: w in {{{WORDS}}}): [
    {{"n": n, "k": keep(str(n))}}
]

def closures():
    rules = Rules(frozenset({{{WORDS}}}))
    return lambda n: [{{"n": n, "k": str(n) in rules.stop}}]
cases["a closure variable holding a set (in an object)"] = closures()

def local_class():
    @dataclasses.dataclass(slots=True)
    class Local:  # pickled by value: cloudpickle gave it an id new every process
        k: int
    held = Local(3)
    return lambda n: [{{"n": n + held.k}}]
cases["an object of a class defined in a function"] = local_class()

json.dump({{name: shipping.identity(fn) for name, fn in cases.items()}}, sys.stdout)
"""

# Already the same under every seed before, and still: a set itself is hashed item by item.
STABLE = f"""
import json, sys
from snapshot_cli.writers import shipping
TAGS = {{{WORDS}}}
def closures():
    tags = {{{WORDS}}}
    return lambda n: [{{"n": n, "k": str(n) in tags}}]
cases = {{
    "a global set": lambda n: [{{"n": n, "k": str(n) in TAGS}}],
    "a default argument that is a set": lambda n, keep={{{WORDS}}}: [{{"n": n, "k": n in keep}}],
    "a closure variable holding a set": closures(),
}}
json.dump({{name: shipping.identity(fn) for name, fn in cases.items()}}, sys.stdout)
"""


def python(
    script: str, cwd: Path, seed: str, *args: str, code: Path = REPO, stdin: bool = False
) -> str:
    """Run ``script`` (from a file, or from stdin: code without source) with snap from
    ``code``, under ``PYTHONHASHSEED=seed``; its stdout."""
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(code)}
    env.pop("PYTHONPYCACHEPREFIX", None)  # (.pyc files next to their modules)
    if stdin:
        cmd, given = [sys.executable, "-", *args], script
    else:
        (cwd / "script.py").write_text(script)
        cmd, given = [sys.executable, str(cwd / "script.py"), *args], None
    res = subprocess.run(
        cmd, cwd=cwd, env=env, input=given, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def identities(script: str, cwd: Path) -> dict[str, set[str]]:
    """Case → the identities computed under each of SEEDS."""
    found: dict[str, set[str]] = {}
    for seed in SEEDS:
        for name, digest in json.loads(python(script, cwd, seed)).items():
            found.setdefault(name, set()).add(digest)
    return found


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    return identities(CASES, tmp_path_factory.mktemp("seeds"))


@pytest.mark.parametrize(
    "case",
    [
        "a lambda with a set literal",
        "exec'd code with a set literal",
        "a lambda in a lambda with a set literal",
        "a set literal of tuples",
        "a frozenset in a tuple constant",
        "a global dict of 20,000 sets",
        "a global tuple of 12,000 tuples holding a set",
        "a slots dataclass holding a frozenset",
        "a default argument with a set literal",
        "a closure variable holding a set (in an object)",
        "an object of a class defined in a function",
    ],
)
def test_the_identity_is_the_same_under_every_hash_seed(
    seeded: dict[str, set[str]], case: str
) -> None:
    assert len(seeded[case]) == 1, f"{case}: {len(seeded[case])} identities in {len(SEEDS)} runs"


def test_a_set_itself_was_and_is_the_same_under_every_seed(tmp_path: Path) -> None:
    found = identities(STABLE, tmp_path)
    assert len(found) == 3 and all(len(digests) == 1 for digests in found.values()), found


RUN_TWICE = f"""
import json, sys
import snapshot_cli as snap
info = snap.create(
    lambda n: [{{"n": n, "stop": str(n) in {{{WORDS}}}}}],
    sys.argv[1], inputs=[1, 2, 3], workers=0, progress=False,
)
opened = snap.snapshot(lambda n: [{{"n": n, "stop": str(n) in {{{WORDS}}}}}], sys.argv[1],
                       inputs=[1, 2, 3], workers=0, progress=False)
json.dump({{"fingerprint": info.fingerprint, "reused": info.reused,
           "records": opened.manifest.num_records}}, sys.stdout)
"""


def test_the_second_run_of_a_script_from_stdin_reuses_its_snapshot(tmp_path: Path) -> None:
    """``python - < job.py`` (no source: the lambda counts by its bytecode), run again in a
    process of another seed: up to date, not "different pipeline code"."""
    runs = [json.loads(python(RUN_TWICE, tmp_path, s, "out", stdin=True)) for s in SEEDS[:3]]
    assert [r["reused"] for r in runs] == [False, True, True]
    assert len({r["fingerprint"] for r in runs}) == 1
    assert [r["records"] for r in runs] == [3, 3, 3]


SET_OF_40 = ", ".join(repr(f"w{i}") for i in range(40, 0, -1))
PYC_MODULE = f"def f(n):\n    return [{{'n': n, 'k': str(n) in {{{SET_OF_40}}}}}]\n"
IN_PROCESS = """
import json, sys
import snapshot_cli as snap
import prep
try:
    info = snap.create(prep.f, sys.argv[1], inputs=[1, 2], workers=0, progress=False)
    print(json.dumps({"reused": info.reused}))
except snap.SnapError as err:
    print(json.dumps({"error": str(err)}))
"""


def test_a_module_with_a_set_literal_loaded_from_its_pyc_is_not_behind_its_file(
    tmp_path: Path,
) -> None:
    """workers=0 compares the code this process runs with its file compiled now: a set
    constant loaded from a .pyc (its items written in marshal's order, inserted so under this
    process's seed) iterated in another order than the same compiled now, and the module,
    never edited, was "older than its files"."""
    (tmp_path / "prep.py").write_text(PYC_MODULE)
    compiling = "import py_compile; py_compile.compile('prep.py', doraise=True)"
    python(compiling, tmp_path, "1")  # as `import prep` does (unless PYTHONDONTWRITEBYTECODE)
    assert list((tmp_path / "__pycache__").glob("prep.*.pyc"))
    runs = [json.loads(python(IN_PROCESS, tmp_path, s, "out")) for s in SEEDS]
    assert runs == [{"reused": False}, *[{"reused": True}] * 3], runs


REACHED = """
import json, sys
from snapshot_cli.writers import codedeps, pipeline
import prep
print(json.dumps({"code": pipeline.resolve(prep.f).code_hash,
                  "modules": sorted(codedeps.user_modules(prep.f))}))
"""


def test_the_modules_a_set_reaches_within_the_budget_are_the_same_under_every_seed(
    tmp_path: Path,
) -> None:
    """A module's function reaches your modules through the functions a set holds, 20,000
    container items in all: where the budget ended inside the set, which of its items were
    looked at went by the set's order (the seed's, and where its functions sit in memory).
    Now its functions come first, by name."""
    for i in range(6):
        (tmp_path / f"helper{i}.py").write_text("def clean(x):\n    return x\n")
    (tmp_path / "prep.py").write_text(
        textwrap.dedent(
            """
            import helper0, helper1, helper2, helper3, helper4, helper5
            PAD = [list(range(1000)) for _ in range(19)] + [list(range(500))]  # 19,520 items
            TABLE = {f"word{i}" for i in range(984)} | {
                helper0.clean, helper1.clean, helper2.clean,
                helper3.clean, helper4.clean, helper5.clean,
            }  # 990 items: 480 of them within the budget

            def f(n):
                return [{"n": n, "k": len(PAD) + len(TABLE)}]
            """
        )
    )
    runs = [json.loads(python(REACHED, tmp_path, s)) for s in SEEDS]
    assert len({r["code"] for r in runs}) == 1, runs
    assert runs[0]["modules"] == ["helper0", "helper1", "helper2", "helper3", "helper4",
                                  "helper5", "prep"]  # fmt: skip


# --- fingerprints that held no set are those snap gave before this change -------------------

BEFORE = "eec947f5e9baa70ebfb7bea730352e1bdbf986cd"  # snap before sets counted in a fixed order

SET_FREE = """
import dataclasses, functools, json, sys
import numpy as np
import snapshot_cli as snap
import helpers, prep

BIG = [{"i": i, "name": f"n{i}", "tags": (i, "t")} for i in range(12_000)]  # one pickle
NUMBER_SETS = [{i, i + 1} for i in range(12_000)]  # sets of numbers: ordered alike everywhere

@dataclasses.dataclass(slots=True, frozen=True)
class Settings:  # no __dict__: by its pickle
    scale: float
    names: tuple

SETTINGS = Settings(2.5, ("a", "b"))

HOOK = helpers.Hook(lambda x: x * 2)  # no __dict__, and pickle cannot take a lambda
ARRAY = np.arange(12.0).reshape(3, 4)
namespace = {}
exec("def f(n):\\n    return [{'n': n, 'k': n in (1, 2, 3) and 'x' in ('x', 'y')}]\\n", namespace)
partial = functools.partial(helpers.scale, k=3)

def with_source(n):
    return [{"n": n, "k": len(BIG) + len(NUMBER_SETS) + SETTINGS.scale + HOOK.fn(1)
             + float(ARRAY.sum()) + partial(1) + len({"p", "q"})}]

pipelines = {
    "a lambda with constants": lambda n: [{"n": n, "k": n in (1, 2) or n in (5, 7, 9)}],
    "a lambda in a lambda": lambda n: [{"n": n, "k": list(map(lambda x: x in (4, 1), [n]))}],
    "exec'd code": namespace["f"],
    "a function with source and globals": with_source,
    "a function of a module, by name (a set of its functions)": prep.f,
}
out = {}
for i, (name, fn) in enumerate(pipelines.items()):
    info = snap.create(fn, f"out{i}", inputs=[1, 2], workers=0, progress=False)
    out[name] = [info.fingerprint, info.reused]
out["snap"] = snap.__file__
json.dump(out, sys.stdout)
"""


HELPERS = """
import dataclasses

def scale(x, k):
    return x * k

@dataclasses.dataclass(slots=True)
class Hook:
    fn: object
"""


PREP = """
import helpers
USED = {helpers.scale}  # a set of your functions: they reach helpers

def f(n):
    return [{"n": n, "k": len(USED)}]
"""


def before_this_change(tmp_path: Path, commit: str = BEFORE) -> Path:
    """snap's package as it was at ``commit`` (its compiled parts: this checkout's)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("needs git and this repository's history (make test runs in a clone)")
    archive = tmp_path / "before.tar"
    res = subprocess.run(
        ["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "snapshot_cli"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.fail(
            f"commit {commit[:12]} is not in this repository ({res.stderr.strip()}): a clone "
            "with its history (not --depth 1) has it"
        )
    code = tmp_path / "before"
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # (3.10.12, 3.11.4)
    with tarfile.open(archive) as tar:
        tar.extractall(code, **safe)
    for compiled in (REPO / "snapshot_cli").glob("*.so"):
        shutil.copy(compiled, code / "snapshot_cli")
    return code


def test_a_snapshot_of_a_pipeline_without_sets_made_before_stays_up_to_date(
    tmp_path: Path,
) -> None:
    """Made by snap as it was before sets counted in a fixed order, then created again with
    this snap under another seed: up to date, one fingerprint (sets of numbers in values,
    whose order no seed changes, keep theirs too; a code constant's set of numbers counts in
    a fixed order since: see the .pyc test)."""
    before = before_this_change(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "helpers.py").write_text(HELPERS)
    (work / "prep.py").write_text(PREP)
    made = json.loads(python(SET_FREE, work, "1", code=before))
    assert Path(made.pop("snap")).is_relative_to(before)
    assert all(not reused for _, reused in made.values()), made
    again = json.loads(python(SET_FREE, work, "2"))
    assert Path(again.pop("snap")).is_relative_to(REPO)
    assert again == {name: [fingerprint, True] for name, (fingerprint, _) in made.items()}


# --- where the budget ends in a set whose items tie (objects of one class) ------------------

HELPERS_BY_SEED = '{"helper0", "helper1", "helper2", "helper3", "helper4", "helper5"}'
HOOKS = "class Hook:\n    def __init__(self, fn):\n        self.fn = fn\n"
SET_OF_HOOKS = f"""
import helper0, helper1, helper2, helper3, helper4, helper5
from hooks import Hook
PAD = [list(range(1000)) for _ in range(18)] + [list(range(982))]  # 19,001 items
TABLE = {{f"word{{i}}" for i in range(984)}} | {{
    Hook(globals()[name]) for name in {HELPERS_BY_SEED}
}}  # made in the seed's order; 990 items, then 9 of the budget for the 12 the hooks hold

def f(n):
    return [{{"n": n, "k": len(PAD) + len(TABLE)}}]
"""
SET_OF_CLOSURES = f"""
import helper0, helper1, helper2, helper3, helper4, helper5
PAD = [list(range(1000)) for _ in range(17)] + [list(range(792))]  # 17,810 items

def cleaner(m):
    steps = [*range(500), m.clean]
    def clean(x):
        return steps[-1](x)
    return clean

TABLE = {{f"word{{i}}" for i in range(984)}} | {{
    cleaner(globals()[name]) for name in {HELPERS_BY_SEED}
}}  # 990 items, then 1,200 of the budget for the closures' 6 * 501: functions of one name

def f(n):
    return [{{"n": n, "k": len(PAD) + len(TABLE)}}]
"""


def write_reach(tmp_path: Path, prep: str) -> None:
    for i in range(6):
        (tmp_path / f"helper{i}.py").write_text(f"def clean(x):\n    return x + {i}\n")
    (tmp_path / "hooks.py").write_text(HOOKS)
    (tmp_path / "prep.py").write_text(prep)


@pytest.mark.parametrize(
    "prep",
    [SET_OF_HOOKS, SET_OF_CLOSURES],
    ids=["objects of one class, by what they hold", "closures of one function, by theirs"],
)
def test_where_the_budget_ends_in_a_set_of_ties_the_code_hash_is_the_same_in_every_process(
    tmp_path: Path, prep: str
) -> None:
    """Items of a set that tie in its fixed order (objects of one class, functions of one
    name) kept the set's own order (where they sit in memory, new in every process, and the
    order they were made in, here the seed's): where the budget ended while they were
    walked, or while the functions they reached were, which of your modules counted changed
    from process to process (a different code hash: "different pipeline code"). Now such a
    set is left out of the walk then, whole: in every process of any seed."""
    write_reach(tmp_path, prep)
    runs = [json.loads(python(REACHED, tmp_path, s)) for s in ("1", "1", "1", *SEEDS[1:])]
    assert len({r["code"] for r in runs}) == 1, runs
    assert runs[0]["modules"] == ["prep"]


def test_a_set_of_ties_within_the_budget_reaches_what_it_did(tmp_path: Path) -> None:
    """Where the budget does not end in it, such a set is walked as before, whole: the code
    hash is the one snap gave before sets were walked in a fixed order."""
    write_reach(
        tmp_path,
        SET_OF_HOOKS.replace("[list(range(1000)) for _ in range(18)] + [list(range(982))]", "[]"),
    )
    now = json.loads(python(REACHED, tmp_path, "1"))
    assert now["modules"] == [*(f"helper{i}" for i in range(6)), "hooks", "prep"]
    before = json.loads(python(REACHED, tmp_path, "2", code=before_this_change(tmp_path)))
    assert before == now


# --- big containers: one pickle, and a set in them still found -------------------------------


class Tags(set):  # type: ignore[type-arg]
    """A set subclass: pickled by its class's ``__reduce__`` (its items as a list)."""


NUMBERS = list(range(50_000))  # pickled as BININT: the bytes of EMPTY_SET and FROZENSET in them
BIG = {
    "numbers": NUMBERS,
    "rows of numbers": {f"k{i}": [i, i / 7] for i in range(20_000)},
    "rows of numbers and strings": [{"i": i, "at": (i, i * 0.5), "n": f"n{i}"} for i in NUMBERS],
    "numbers and strings as keys": {(i, f"n{i}"): float(i) for i in range(20_000)},
    "strings and a set subclass's instance of numbers": [*map(str, NUMBERS), Tags({1, 2, 3})],
}


def python_calls(fn: Callable[[], Any]) -> int:
    """How many Python functions ``fn`` calls, at any depth (C functions not counted)."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    before = sys.getprofile()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(before)
    return calls


@pytest.mark.parametrize("case", list(BIG))
def test_a_big_container_without_sets_is_hashed_with_no_python_call_per_item(case: str) -> None:
    """Since sets counted in a fixed order, every object pickled for the hash of a big list or
    dict went through a Python hook (looking for sets): 3.5 times slower, paid by every
    create, up to date or not. Now only objects of other types than the builtin ones do; an
    EMPTY_SET or FROZENSET byte in the pickle (here in the numbers' bytes) has the objects
    looked at again level by level, without a Python call per item."""
    from snapshot_cli.writers import shipping

    value = BIG[case]
    data = pickle.dumps(value, protocol=4)
    if case != "strings and a set subclass's instance of numbers":
        assert pickle.EMPTY_SET in data and pickle.FROZENSET in data  # (false alarms)
    else:  # (by its class's reduce: no set opcode)
        assert pickle.EMPTY_SET not in data and pickle.FROZENSET not in data

    walker = shipping._Walker(strict=False)
    calls = python_calls(lambda: walker.value(value, "the global"))
    assert calls < 100, f"{calls} Python calls for {len(value)} items"
    plain = shipping._Walker(strict=False)  # the hash: that of the pickle, as before
    plain._add(data)
    assert walker.hexdigest() == plain.hexdigest()


HIDDEN = f"""
import json, sys
from snapshot_cli.writers import shipping

class Tags(set):
    pass

class Names(frozenset):
    pass

class Box:
    def __init__(self, held):
        self.held = held

class Made:  # a set made by its __reduce__: in its pickle, not among what it holds
    def __init__(self, words):
        self.words = tuple(words)
    def __reduce__(self):
        return Made, (set(self.words),)

NUMBERS = list(range(20_000))  # the bytes of the set opcodes in their pickle
STRINGS = [f"w{{i}}" for i in range(20_000)]  # none in theirs
cases = {{
    "a set subclass's instance in a big list": [*NUMBERS, Tags({{{WORDS}}})],
    "a frozenset subclass's instance in a big list of strings": [*STRINGS, Names({{{WORDS}}})],
    "a set subclass's instance in a tuple in a big dict": {{
        **dict.fromkeys(STRINGS, 0), "tags": (1, Tags({{{WORDS}}}))
    }},
    "a set deep in a big list of numbers": [*NUMBERS, (1, {{"k": [{{{WORDS}}}]}})],
    "a set in a big list of strings": [*STRINGS, {{{WORDS}}}],
    "a frozenset as a key of a big dict": {{
        **dict.fromkeys(NUMBERS, 1.5), frozenset({{{WORDS}}}): 1
    }},
    "a set in an object in a big list": [*NUMBERS, Box({{{WORDS}}})],
    "a set an object's __reduce__ makes, in a big list": [*NUMBERS, Made([{WORDS}])],
    "a big list holding one list 20,000 times, a set in it": [[1, 2, {{{WORDS}}}]] * 20_000,
}}
using = {{name: (lambda v: lambda n: [{{"n": n, "k": len(v)}}])(v) for name, v in cases.items()}}
json.dump({{name: shipping.identity(fn) for name, fn in using.items()}}, sys.stdout)
"""


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    return identities(HIDDEN, tmp_path_factory.mktemp("hidden"))


@pytest.mark.parametrize(
    "case",
    [
        "a set subclass's instance in a big list",
        "a frozenset subclass's instance in a big list of strings",
        "a set subclass's instance in a tuple in a big dict",
        "a set deep in a big list of numbers",
        "a set in a big list of strings",
        "a frozenset as a key of a big dict",
        "a set in an object in a big list",
        "a set an object's __reduce__ makes, in a big list",
        "a big list holding one list 20,000 times, a set in it",
    ],
)
def test_a_set_in_a_big_container_is_not_missed_by_the_one_pickle(
    hidden: dict[str, set[str]], case: str
) -> None:
    """The one pickle of a big container is refused where a set whose order varies is in it:
    a set subclass's instance (no set opcode in its pickle), a set among numbers whose bytes
    hold the set opcodes', a frozenset as a dict's key, one an object holds, one in a list
    the container holds 20,000 times."""
    assert len(hidden[case]) == 1, f"{case}: {len(hidden[case])} identities in {len(SEEDS)} runs"


def test_a_big_list_that_holds_itself_is_hashed_through_its_pickle() -> None:
    """The objects of a pickle with a set opcode's byte are looked at again level by level:
    at most as many as the pickle has bytes (a cycle, or a list held many times, would
    never end, or take longer than the pickle), then by the pickle with a hook."""
    from snapshot_cli.writers import hashing

    looped: list[Any] = [*NUMBERS]
    looped.append(looped)
    assert hashing.stable_pickle(looped, pickle.Pickler) == pickle.dumps(looped, protocol=4)
    many = [[1, 2.5, "x"]] * 50_000
    assert hashing.stable_pickle(many, pickle.Pickler) == pickle.dumps(many, protocol=4)


PYC_HELPERS = "keep = lambda i: [{'i': i}] if i in {9, 1, 17, 25} else []\n"
PYC_MAKE = """
import helpers, snapshot_cli as snap
info = snap.create(helpers.keep, "out", inputs=[1, 2, 9], workers=0, progress=False)
print("reused" if info.reused else "computed")
"""


def test_a_lambda_of_a_module_keeps_its_fingerprint_once_its_pyc_exists(tmp_path: Path) -> None:
    """A lambda goes by value, by its bytecode: its set of numbers, compiled from source,
    iterated otherwise than loaded from the module's .pyc (marshal writes it sorted) where
    the numbers' hashes collide, and every run after the first said "different pipeline
    code"."""
    (tmp_path / "helpers.py").write_text(PYC_HELPERS)
    (tmp_path / "make.py").write_text(PYC_MAKE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO)
    said = []
    for _ in range(3):  # the first compiles helpers.py and writes its .pyc; the others load it
        res = subprocess.run([sys.executable, "make.py"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr[-1500:]
        said.append(res.stdout.strip())
    assert list((tmp_path / "__pycache__").glob("helpers.*.pyc")), "no .pyc was written"
    assert said == ["computed", "reused", "reused"]
