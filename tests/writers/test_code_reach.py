"""Every way a pipeline's code names your other code counts in its fingerprint.

The reach followed only globals and closure variables that were functions or classes, and
of a module the functions and classes the code names: an edit to a helper the function
reached otherwise (``import pkg.text`` then ``pkg.text.clean``, an import inside the
function, ``importlib.import_module("helpers")``, a dict of functions, a partial, a default
argument, ...) left ``snap create`` saying "up to date" with the old code's records, and a
resumed run or a grow mixed old and new records. Each pattern below is a small tree of
modules (named uniquely: ``TAG``) whose pipeline reaches one file only that way: editing it
changes the code hash, editing a module the pipeline imports but never reaches does not.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.writers import codedeps, pipeline
from snapshot_cli.writers.importing import load_function

HELPER = "def g(s):\n    return s.upper()\n"
HELPER2 = "def k(s):\n    return s + '!'\n"
LAZY = "import h2_TAG\ndef g(s):\n    return h2_TAG.k(s)\n"


@dataclass(frozen=True)
class Pattern:
    """A tree of modules, the file whose edit must count, the pipeline in it."""

    pipe: str  # the pipeline module's source (``import u_TAG`` is added: never reached)
    files: dict[str, str] = field(default_factory=lambda: {"h_TAG.py": HELPER})
    edited: str = "h_TAG.py"
    unrelated: tuple[str, ...] = ()  # besides u_TAG.py
    where: str = "pipe_TAG.py"  # the pipeline module's file
    module: str = ""  # its spec by module name (a package's module), else by path
    name: str = "preprocess"  # the function (or partial, object) the spec names
    lazy: str = ""  # a module that must not be imported yet when the hash is taken
    call_first: bool = False  # run it once before (the modules it imports are imported)
    value: bool = False  # a value holding no code imported from the edited file (sent by
    # value, a function counts that value as it is in its process: not the file's bytes)


BODY_FROM = "def preprocess(i):\n    from h_TAG import g\n    return [{'t': g(i)}]\n"
GLOBAL_H = "import h_TAG\n"
PKG = {"pk_TAG/__init__.py": "", "pk_TAG/text.py": HELPER}

PATTERNS: dict[str, Pattern] = {
    "a submodule named by attribute": Pattern(
        "import pk_TAG.text\ndef preprocess(i):\n    return [{'t': pk_TAG.text.g(i)}]\n",
        PKG,
        "pk_TAG/text.py",
    ),
    "a submodule to any depth": Pattern(
        "import pk_TAG.sub.deep\ndef preprocess(i):\n    return [{'t': pk_TAG.sub.deep.g(i)}]\n",
        {"pk_TAG/__init__.py": "", "pk_TAG/sub/__init__.py": "", "pk_TAG/sub/deep.py": HELPER},
        "pk_TAG/sub/deep.py",
    ),
    "a submodule of a namespace package": Pattern(
        "import ns_TAG.text\ndef preprocess(i):\n    return [{'t': ns_TAG.text.g(i)}]\n",
        {"ns_TAG/text.py": HELPER},
        "ns_TAG/text.py",
    ),
    "from-import in the body, not imported yet": Pattern(BODY_FROM, lazy="h_TAG"),
    "from-import in the body, imported by an earlier call": Pattern(BODY_FROM, call_first=True),
    "import in the body": Pattern(
        "def preprocess(i):\n    import h_TAG\n    return [{'t': h_TAG.g(i)}]\n", lazy="h_TAG"
    ),
    "import of a dotted name in the body": Pattern(
        "def preprocess(i):\n    import pk_TAG.text\n    return [{'t': pk_TAG.text.g(i)}]\n",
        PKG,
        "pk_TAG/text.py",
        lazy="pk_TAG",
    ),
    "one submodule from-imported in the body of a package importing all": Pattern(
        "def preprocess(i):\n    from pk_TAG import text\n    return [{'t': text.g(i)}]\n",
        {**PKG, "pk_TAG/__init__.py": "from . import other, text\n", "pk_TAG/other.py": "X = 1\n"},
        "pk_TAG/text.py",
        unrelated=("pk_TAG/other.py",),
        lazy="pk_TAG",
    ),
    "relative import in the body": Pattern(
        "def preprocess(i):\n    from .helper import g\n    return [{'t': g(i)}]\n",
        {"pk_TAG/__init__.py": "", "pk_TAG/helper.py": HELPER},
        "pk_TAG/helper.py",
        where="pk_TAG/pipe.py",
        module="pk_TAG.pipe",
    ),
    "what a module imported in the body imports": Pattern(
        BODY_FROM, {"h_TAG.py": LAZY, "h2_TAG.py": HELPER2}, "h2_TAG.py", lazy="h_TAG"
    ),
    "a module named in a string": Pattern(
        "import importlib\ndef preprocess(i):\n"
        "    return [{'t': importlib.import_module('h_TAG').g(i)}]\n",
        lazy="h_TAG",
    ),
    "a dotted module name in a string, imported by another function": Pattern(
        "import importlib\ndef load(name):\n    return importlib.import_module(name)\n"
        "def preprocess(i):\n    return [{'t': load('pk_TAG.text').g(i)}]\n",
        PKG,
        "pk_TAG/text.py",
        lazy="pk_TAG",
    ),
    "a string in a lambda": Pattern(
        "def preprocess(i):\n"
        "    return [{'t': t} for t in map(lambda s: __import__('h_TAG').g(s), [i])]\n"
    ),
    "an import in an inner function": Pattern(
        "def preprocess(i):\n    def inner(s):\n        from h_TAG import g\n        return g(s)\n"
        "    return [{'t': inner(i)}]\n"
    ),
    "a dict of functions": Pattern(
        GLOBAL_H + "REG = {'a': h_TAG.g}\ndef preprocess(i):\n    return [{'t': REG['a'](i)}]\n"
    ),
    "a list of functions": Pattern(
        GLOBAL_H + "REG = [h_TAG.g]\ndef preprocess(i):\n    return [{'t': REG[0](i)}]\n"
    ),
    "a tuple in a list": Pattern(
        GLOBAL_H + "REG = [('a', h_TAG.g)]\ndef preprocess(i):\n    return [{'t': REG[0][1](i)}]\n"
    ),
    "a set of functions": Pattern(
        GLOBAL_H + "REG = {h_TAG.g}\ndef preprocess(i):\n    return [{'t': f(i)} for f in REG]\n"
    ),
    "a frozenset of functions": Pattern(
        GLOBAL_H + "REG = frozenset([h_TAG.g])\n"
        "def preprocess(i):\n    return [{'t': f(i)} for f in REG]\n"
    ),
    "a dict of your own class": Pattern(
        "import h_TAG\nREG = h_TAG.Registry(a=1)\n"
        "def preprocess(i):\n    return [{'t': REG.run(i)}]\n",
        {
            "h_TAG.py": "import h2_TAG\nclass Registry(dict):\n    def run(self, s):\n"
            "        return h2_TAG.k(s)\n",
            "h2_TAG.py": HELPER2,
        },
        "h2_TAG.py",
    ),
    "a partial": Pattern(
        GLOBAL_H + "import functools\nG = functools.partial(h_TAG.g)\n"
        "def preprocess(i):\n    return [{'t': G(i)}]\n"
    ),
    "a partial's keyword": Pattern(
        GLOBAL_H + "import functools\ndef apply(s, fn):\n    return fn(s)\n"
        "G = functools.partial(apply, fn=h_TAG.g)\ndef preprocess(i):\n    return [{'t': G(i)}]\n"
    ),
    "a default argument": Pattern(
        GLOBAL_H + "def preprocess(i, fn=h_TAG.g):\n    return [{'t': fn(i)}]\n"
    ),
    "a keyword-only default": Pattern(
        GLOBAL_H + "def preprocess(i, *, fn=h_TAG.g):\n    return [{'t': fn(i)}]\n"
    ),
    "a helper cached with functools.cache": Pattern(
        "from h_TAG import g\ndef preprocess(i):\n    return [{'t': g(i)}]\n",
        {"h_TAG.py": "import functools\n@functools.cache\n" + HELPER},
    ),
    "a static method's reach": Pattern(
        "from h_TAG import Tools\ndef preprocess(i):\n    return [{'t': Tools.g(i)}]\n",
        {
            "h_TAG.py": "import h2_TAG\nclass Tools:\n    @staticmethod\n"
            "    def g(s):\n        return h2_TAG.k(s)\n",
            "h2_TAG.py": HELPER2,
        },
        "h2_TAG.py",
    ),
    "a base class in another module": Pattern(
        "from h_TAG import Sub\ndef preprocess(i):\n    return [{'t': Sub().k(i)}]\n",
        {
            "h_TAG.py": "from h2_TAG import Base\nclass Sub(Base):\n    pass\n",
            "h2_TAG.py": "class Base:\n    def k(self, s):\n        return s + '!'\n",
        },
        "h2_TAG.py",
    ),
    "an object's attribute": Pattern(
        "import h_TAG, h2_TAG\nSTEPS = h_TAG.Steps([h2_TAG.k])\n"
        "def preprocess(i):\n    return [{'t': STEPS(i)}]\n",
        {
            "h_TAG.py": "class Steps:\n    def __init__(self, fns):\n        self.fns = fns\n"
            "    def __call__(self, s):\n        return self.fns[0](s)\n",
            "h2_TAG.py": HELPER2,
        },
        "h2_TAG.py",
    ),
    "a bound method and what its class's methods reach": Pattern(
        "import h_TAG\nCLEAN = h_TAG.Cleaner().clean\n"
        "def preprocess(i):\n    return [{'t': CLEAN(i)}]\n",
        {
            "h_TAG.py": "import h2_TAG\nclass Cleaner:\n    def clean(self, s):\n"
            "        return self.more(s)\n    def more(self, s):\n        return h2_TAG.k(s)\n",
            "h2_TAG.py": HELPER2,
        },
        "h2_TAG.py",
    ),
    "a decorator of your own": Pattern(
        "from deco_TAG import logged\n@logged\ndef preprocess(i):\n    return [{'t': i}]\n",
        {
            "deco_TAG.py": "import functools\ndef logged(fn):\n    @functools.wraps(fn)\n"
            "    def wrapper(*a):\n        return fn(*a)\n    return wrapper\n"
        },
        "deco_TAG.py",
    ),
    "a partial as the pipeline": Pattern(
        GLOBAL_H + "import functools\ndef run(i, fn):\n    return [{'t': fn(i)}]\n"
        "P = functools.partial(run, fn=h_TAG.g)\n",
        name="P",
    ),
    # (the review's: each missed before)
    "a module a helper not imported yet names in a string": Pattern(
        BODY_FROM,
        {
            "h_TAG.py": "import importlib\nplug = importlib.import_module('p_TAG')\n"
            "def g(s):\n    return plug.k(s)\n",
            "p_TAG.py": "def k(s):\n    return s.upper()\n",
        },
        "p_TAG.py",
        lazy="h_TAG",
    ),  # fmt: skip
    "an import after a module's 256th constant": Pattern(
        BODY_FROM,
        {
            "h_TAG.py": "LABELS = {" + ", ".join(f"'l{i}': {i}" for i in range(300)) + "}\n"
            "from h2_TAG import k\ndef g(s):\n    return k(s) + str(LABELS['l1'])\n",
            "h2_TAG.py": HELPER2,
        },
        "h2_TAG.py",
        lazy="h_TAG",
    ),  # fmt: skip
    "a method of an object the spec's file makes": Pattern(
        "import lib_TAG\nscale = lib_TAG.Scale(2)\n",
        {
            "lib_TAG.py": "class Scale:\n    def __init__(self, k):\n        self.k = k\n"
            "    def apply(self, i):\n        return [{'t': i * self.k}]\n"
        },
        "pipe_TAG.py",
        name="scale.apply",
    ),  # fmt: skip
    # ``from config import CFG`` of a value that holds no code (a dict, a str, an array made
    # there): it had no module to follow, and an edit to config.py left "up to date"
    "a dict imported from a module of yours": Pattern(
        "from c_TAG import CFG\ndef preprocess(i):\n    return [{'t': getattr(i, CFG['c'])()}]\n",
        {"c_TAG.py": "CFG = {'c': 'upper'}\n"},
        "c_TAG.py",
        value=True,
    ),
    "a str imported from a module of yours": Pattern(
        "from c_TAG import CASE\ndef preprocess(i):\n    return [{'t': getattr(i, CASE)()}]\n",
        {"c_TAG.py": "CASE = 'upper'\n"},
        "c_TAG.py",
        value=True,
    ),
    "an array made in a module of yours": Pattern(
        "from c_TAG import W\ndef preprocess(i):\n    return [{'t': i, 'w': int(W.sum())}]\n",
        {"c_TAG.py": "import numpy as np\nW = np.frombuffer(b'upper', np.uint8)\n"},
        "c_TAG.py",
        value=True,
    ),
    "a value imported relatively in a package": Pattern(
        "from .conf import CASE\ndef preprocess(i):\n    return [{'t': getattr(i, CASE)()}]\n",
        {"pv_TAG/__init__.py": "", "pv_TAG/conf.py": "CASE = 'upper'\n"},
        "pv_TAG/conf.py",
        where="pv_TAG/pipe.py",
        module="pv_TAG.pipe",
        value=True,
    ),
    "a value a module of yours imported from another": Pattern(
        "from h_TAG import CASE\ndef preprocess(i):\n    return [{'t': getattr(i, CASE)()}]\n",
        {"h_TAG.py": "from c_TAG import CASE\n", "c_TAG.py": "CASE = 'upper'\n"},
        "c_TAG.py",
        value=True,
    ),
    "a callable object as the pipeline": Pattern(
        GLOBAL_H + "class Run:\n    def __call__(self, i):\n        return self.step(i)\n"
        "    def step(self, i):\n        return [{'t': h_TAG.g(i)}]\nRUN = Run()\n",
        name="RUN",
    ),
}


class Tree:
    """Files under ``root`` (on ``sys.path``), their names' and texts' ``TAG`` unique."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.tag = root, uuid.uuid4().hex[:8]
        monkeypatch.syspath_prepend(str(root))

    def path(self, rel: str) -> Path:
        return self.root / rel.replace("TAG", self.tag)

    def write(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            self.path(rel).parent.mkdir(parents=True, exist_ok=True)
            self.path(rel).write_text(text.replace("TAG", self.tag))
        importlib.invalidate_caches()

    def edit(self, rel: str) -> None:
        """An edit that changes what the file computes for the patterns' helpers."""
        path = self.path(rel)
        path.write_text(path.read_text().replace("upper", "lower") + "\n# edited\n")

    def name(self, module: str) -> str:
        return module.replace("TAG", self.tag)


def write_pattern(tree: Tree, p: Pattern) -> str:
    tree.write({"u_TAG.py": "def g(s):\n    return s\n", **p.files})
    tree.write({p.where: "import u_TAG\n" + p.pipe})
    target = tree.name(p.module) if p.module else str(tree.path(p.where))
    return f"{target}:{p.name}"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    return Tree(tmp_path, monkeypatch)


@pytest.mark.parametrize("kind", list(PATTERNS))
def test_an_edit_counts_where_the_code_reaches(tree: Tree, kind: str) -> None:
    p = PATTERNS[kind]
    spec = write_pattern(tree, p)
    fn = load_function(spec)
    if p.call_first:
        fn("Ab")
    if p.lazy:
        assert tree.name(p.lazy) not in sys.modules  # (found by its file, not imported)
    before = pipeline.resolve(spec).code_hash
    for rel in ("u_TAG.py", *p.unrelated):  # imported by the pipeline's module, not reached
        tree.edit(rel)
        assert pipeline.resolve(spec).code_hash == before, rel
    if p.lazy:
        assert tree.name(p.lazy) not in sys.modules  # (the hash imported nothing)
    tree.edit(p.edited)
    assert pipeline.resolve(spec).code_hash != before
    assert fn("Ab")  # (the pattern runs)


BY_VALUE = [
    k for k, p in PATTERNS.items() if not p.module and p.name == "preprocess" and not p.value
]


@pytest.mark.parametrize("kind", BY_VALUE)
def test_an_edit_counts_for_a_function_sent_by_value(tree: Tree, kind: str) -> None:
    """The same function defined where no worker can import it (a notebook, a script)."""
    p = PATTERNS[kind]
    tree.write({"u_TAG.py": "X = 1\n", **p.files})
    scope: dict[str, Any] = {"__name__": f"notebook_{tree.tag}"}  # (no such module)
    exec(compile(tree.name("import u_TAG\n" + p.pipe), "<cell>", "exec"), scope)
    fn = scope["preprocess"]
    if p.call_first:
        fn("Ab")
    ref = pipeline.resolve(fn)
    assert ref.by_value
    tree.edit("u_TAG.py")
    assert pipeline.resolve(fn).code_hash == ref.code_hash
    tree.edit(p.edited)
    assert pipeline.resolve(fn).code_hash != ref.code_hash


def test_the_reach_is_the_same_before_and_after_the_first_call(tree: Tree) -> None:
    """A package whose modules the function takes one of (``from pk import text``) counts by
    its file; once imported, its attributes the code names were followed too, so the hash
    changed after the first call and an unchanged create said "different pipeline code"."""
    tree.write({"pk_TAG/__init__.py": "from .other import g\nfrom . import text\n",
                "pk_TAG/other.py": "def g(s):\n    return s.strip()\n",
                "pk_TAG/text.py": HELPER})  # fmt: skip
    tree.write({"pipe_TAG.py": "def preprocess(i):\n    from pk_TAG import text\n"
                               "    return [{'t': text.g(i)}]\n"})  # fmt: skip
    spec = f"{tree.path('pipe_TAG.py')}:preprocess"
    before = pipeline.resolve(spec).code_hash
    load_function(spec)("Ab")
    assert tree.name("pk_TAG.other") in sys.modules
    assert pipeline.resolve(spec).code_hash == before


def test_a_function_reaching_none_of_your_modules_keeps_its_hash(tree: Tree) -> None:
    """Its file alone, as before: defaults, containers, a partial and an import in its body
    that hold no code of yours add nothing, nor does a record's key that is the name of a
    module of yours ("u_TAG": the function imports no module by a name it is given)."""
    tree.write({"u_TAG.py": "X = 1\n"})
    tree.write(
        {
            "pipe_TAG.py": "import numpy as np\nimport u_TAG\nimport functools\n"
            "SCALE = {'a': 2, 'b': [1.5, None]}\n"
            "def preprocess(i, how=np.mean, *, k=functools.partial(max, 0)):\n"
            "    import json\n"
            "    return [{'u_TAG': json.dumps(i), 'numpy': how([k(SCALE['a'])])}]\n"
        }
    )
    spec = f"{tree.path('pipe_TAG.py')}:preprocess"
    fn = load_function(spec)
    assert set(codedeps.user_modules(fn)) == {tree.name("pipe_TAG")}
    digest = hashlib.sha256(tree.path("pipe_TAG.py").read_bytes()).hexdigest()
    assert pipeline.file_hash(fn) == digest


def test_a_function_reaching_a_helper_as_before_keeps_its_hash(tree: Tree) -> None:
    """``import helpers; helpers.g()``: its file and the helper's, as before (the reach is
    the same set of modules, so the same hash)."""
    tree.write({"u_TAG.py": "X = 1\n", "h_TAG.py": HELPER})
    tree.write(
        {"pipe_TAG.py": "import h_TAG, u_TAG\ndef preprocess(i):\n    return [{'t': h_TAG.g(i)}]\n"}
    )
    fn = load_function(f"{tree.path('pipe_TAG.py')}:preprocess")
    assert set(codedeps.user_modules(fn)) == {tree.name("pipe_TAG"), tree.name("h_TAG")}
    own = hashlib.sha256(tree.path("pipe_TAG.py").read_bytes()).hexdigest()
    helper = hashlib.sha256(tree.path("h_TAG.py").read_bytes()).hexdigest()
    h = hashlib.sha256(own.encode())
    h.update(f"\n{tree.name('h_TAG')}={helper}".encode())
    assert pipeline.file_hash(fn) == h.hexdigest()


def test_finding_a_module_not_imported_yet_runs_none_of_its_code(tree: Tree) -> None:
    """``importlib.util.find_spec("pkg.text")`` imports ``pkg``: here its package would
    raise (as a script that parses its command line does); the modules are found by their
    files, and nothing of theirs runs."""
    tree.write(
        {
            "u_TAG.py": "X = 1\n",
            "pk_TAG/__init__.py": "raise SystemExit('pk_TAG ran')\n",
            "pk_TAG/text.py": "import h_TAG\n" + HELPER,
            "h_TAG.py": "raise SystemExit('h_TAG ran')\n",
            "pipe_TAG.py": "import importlib\ndef preprocess(i):\n    import pk_TAG.text\n"
            "    return [{'t': importlib.import_module('pk_TAG.text').g(i)}]\n",
        }
    )
    fn = load_function(f"{tree.path('pipe_TAG.py')}:preprocess")
    names = {tree.name(m) for m in ("pk_TAG", "pk_TAG.text", "h_TAG")}
    assert names <= set(codedeps.user_modules(fn))
    assert not names & set(sys.modules)  # (none imported)


def test_a_large_container_is_looked_at_in_part(tree: Tree) -> None:
    """A global of a million values costs a bounded look, not one per value."""
    tree.write({"h_TAG.py": HELPER})
    tree.write(
        {
            "pipe_TAG.py": "import h_TAG\nBIG = list(range(10**6)) + [h_TAG.g]\n"
            "NESTED = [[[[[[h_TAG.g]]]]]]\ndef preprocess(i):\n    return [{'t': (BIG, NESTED)}]\n"
        }
    )
    fn = load_function(f"{tree.path('pipe_TAG.py')}:preprocess")
    assert set(codedeps.user_modules(fn)) == {tree.name("pipe_TAG")}


def test_installed_packages_are_not_walked(tree: Tree) -> None:
    """numpy's tree is not looked into: of a function that uses numpy, only it is walked."""
    tree.write(
        {
            "pipe_TAG.py": "import numpy as np\nimport numpy.linalg\n"
            "def preprocess(i):\n    return [{'x': np.linalg.norm(np.mean([i]))}]\n"
        }
    )
    fn = load_function(f"{tree.path('pipe_TAG.py')}:preprocess")
    walked: list[Any] = []
    assert set(codedeps.user_modules(fn, walked)) == {tree.name("pipe_TAG")}
    assert walked == [fn]


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``, with the snapshot_cli this test imported."""
    env = {**os.environ, "PYTHONPATH": str(Path(snap.__file__).parent.parent)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def snap_create(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(cwd, "-m", "snapshot_cli", "create", *args)


@pytest.mark.parametrize(
    "kind", ["a submodule named by attribute", "from-import in the body, not imported yet"]
)
def test_snap_create_sees_the_edited_helper(tree: Tree, kind: str) -> None:
    """The tester's case: the second create said "up to date" and kept the old records."""
    p = PATTERNS[kind]
    write_pattern(tree, p)
    (tree.root / "items.py").write_text("def items():\n    return ['Hello', 'World']\n")
    args = (f"{tree.name('pipe_TAG')}.py:preprocess", "out", "--inputs-from", "items:items")
    made = snap_create(tree.root, *args)
    assert made.returncode == 0, made.stderr
    tree.edit("u_TAG.py")
    same = snap_create(tree.root, *args)
    assert same.returncode == 0 and "up to date" in same.stdout + same.stderr, same.stderr
    tree.edit(p.edited)
    res = snap_create(tree.root, *args)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "different pipeline code" in res.stderr and "Traceback" not in res.stderr
    assert snap_create(tree.root, *args, "--overwrite").returncode == 0
    got = sorted(str(t) for b in snap.open(str(tree.root / "out")).loader(2) for t in b["t"])
    assert got == ["hello", "world"]


def test_a_script_sees_the_edited_helper(tree: Tree) -> None:
    """A function defined in the script being run goes by value: it was "reused"."""
    tree.write({"pk_TAG/__init__.py": "", "pk_TAG/text.py": HELPER})
    script = tree.root / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import pk_TAG.text
            import snapshot_cli as snap
            def f(item):
                return [{"t": pk_TAG.text.g(item)}]
            try:
                print("reused", snap.create(f, "out", inputs_from=lambda: ["Ab"], workers=0).reused)
            except snap.SnapshotExistsError as err:
                print("refused", err)
            """
        ).replace("TAG", tree.tag)
    )
    first = run(tree.root, str(script))
    assert first.stdout.startswith("reused False"), first.stderr
    again = run(tree.root, str(script))
    assert again.stdout.startswith("reused True"), again.stderr
    tree.edit("pk_TAG/text.py")
    edited = run(tree.root, str(script))
    assert edited.stdout.startswith("refused"), edited.stdout + edited.stderr
    assert "different pipeline code" in edited.stdout
