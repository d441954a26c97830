"""Which of your own modules a function's code uses, and their contents (pure but for reading
those files, and removing their cached bytecode where Python would take it for an older
version of them: :mod:`.bytecode`).

A pipeline counts by its source: its module's file (by name) or its own text (by value, see
:mod:`.shipping`). What it calls from your other modules counts too, by those files' bytes:
an edit to ``helpers.py`` that the pipeline imports from changed what it computes, and left
the snapshot "up to date" while only the pipeline's own file counted. "Your own" is any
``.py`` file outside the standard library and the installed packages; those count by name.

The modules are found from every way the code names other code that can be seen without
running it: the globals and closure variables it names, and of a module the attributes the
code names (``pkg.sub.deep.f``: submodules to any depth); its defaults; what a
``functools.partial``, a container (dict, list, tuple, set; bounded), a bound method, a
decorator's ``__wrapped__`` or an object of your own class holds; a class's bases and
attributes; the modules it imports when it runs (``from helpers import f`` inside the
function) and those a string constant names (``importlib.import_module("helpers")``), with
their packages and, found by their files, the modules those import in turn (the same whether
they were imported yet or not: a notebook's second create sees what its first saw); then the
same for each of your functions and classes reached, not for every import of a module: an
edit to a module the pipeline never reaches does not count. Only your own modules are walked
(numpy's or torch's trees are never looked into).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import inspect
import itertools
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterable, Iterator
from typing import Any

from . import bytecode, codescan
from .set_order import PLAIN, in_order, place

_ITEMS = 1_000  # items of one container looked at (of a larger set none: its order varies)
_BUDGET = 20_000  # container items looked at in one walk, in all
_DEPTH = 4  # containers in containers (and objects' attributes) followed
_CONTAINERS = (dict, list, tuple, set, frozenset)


def _library_dirs() -> tuple[str, ...]:
    return _library_dirs_for(tuple(sys.path))


@functools.cache
def _library_dirs_for(path: tuple[str, ...]) -> tuple[str, ...]:
    """The standard library and every directory packages are installed in: this
    environment's, the user's (``pip install --user``) and any other on ``sys.path``
    (a venv's system site-packages, Debian's dist-packages)."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.update(site.getsitepackages() + [site.getusersitepackages()])
    dirs.update(p for p in path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


def file_digest(path: str) -> str:
    """sha256 of a file's bytes (read again whenever its size or mtime changed: a notebook
    that edits a helper between two creates gets the new digest). Its cached bytecode is
    removed first if Python would run an older version from it (:mod:`.bytecode`): the
    processes that run the code then compile the bytes hashed here."""
    bytecode.drop_stale([path])
    st = os.stat(path)
    return _digest(path, st.st_size, st.st_mtime_ns)


@functools.cache
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _snap(module: str) -> bool:
    return module == "snapshot_cli" or module.startswith("snapshot_cli.")


def user_module_file(module: str) -> str | None:
    """The source file of ``module`` if it is the user's own code (not stdlib or installed,
    nor snap itself, also as an editable install: which of snap's modules a process has
    imported changed a by-value function's identity between two creates)."""
    if _snap(module):
        return None
    return _user_file(getattr(sys.modules.get(module), "__file__", None))


def is_user_file(path: str) -> bool:
    """Whether the source file ``path`` is the user's own code (not stdlib or installed;
    whether it exists is not asked)."""
    return not os.path.realpath(path).startswith(_library_dirs())


def _user_file(path: Any) -> str | None:
    if not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return None
    real = os.path.realpath(path)
    return None if real.startswith(_library_dirs()) else real


def module_file(name: str) -> str | None:
    """The source file of the module ``name`` if it is the user's own, imported or not (one
    not imported yet as ``import`` would find it: :func:`.codescan.find`)."""
    if name in sys.modules:
        return user_module_file(name)
    if _snap(name):
        return None
    spec = codescan.find(name)
    return None if spec is None else _user_file(spec.origin)


def code_names(code: types.CodeType) -> Iterator[str]:
    """Global names ``code`` and the code nested in it (lambdas, comprehensions) refer to."""
    for c in codescan.nested(code):
        yield from c.co_names


def filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # not assigned yet
        return False
    return True


def user_modules(fn: Any, functions: list[Any] | None = None) -> dict[str, str]:
    """Your modules whose code ``fn`` (a function, or any value: a class, a partial, a
    bound method) reaches: module name → source file, ``fn``'s own module included if it is
    yours (see the module's docs for the ways followed). Each function whose code is walked
    (``fn`` itself always, and yours reached) is appended to ``functions`` if given.

    Where the walk's budget ran out while a set's own order decided what came first (items
    of one class, functions of one name: their order is where they sit in memory, new in
    every process), the walk is made again without such sets: the same in every process.
    """
    walk = _Reach(skip_tied=False)
    found = walk.run(fn)
    if walk.unordered:
        walk = _Reach(skip_tied=True)
        found = walk.run(fn)
    if functions is not None:
        functions += walk.functions
    return found


class _Reach:
    """One walk: what it found, and what it has looked at (kept: ids stay unique)."""

    def __init__(self, skip_tied: bool) -> None:
        self.found: dict[str, str] = {}
        self.functions: list[Any] = []  # whose code was walked
        self.todo: list[types.FunctionType] = []
        self.seen: dict[int, Any] = {}
        self.attrs: dict[int, set[str]] = {}  # a module → its attributes followed
        self.scanned: set[str] = set()  # modules whose file's imports were followed
        self.users: dict[str, str | None] = {}  # module → file, of those imported
        self.files: dict[str, str | None] = {}  # module → file, imported or not
        self.budget = _BUDGET
        self.skip_tied = skip_tied  # sets whose items tie (set_order.in_order): not walked
        self.tied = 0  # such sets being walked (one in another)
        self.tied_functions: set[int] = set()  # queued by one, in the order it had
        self.tainted = False  # one of those was walked: what follows went by that order
        self.unordered = False  # the budget ran out in a set's walk, or once tainted

    def run(self, fn: Any) -> dict[str, str]:
        if isinstance(fn, types.FunctionType):  # walked wherever it is (a notebook's)
            self.seen[id(fn)] = fn
            self.todo.append(fn)
            self.value(inspect.getattr_static(fn, "__wrapped__", None), (), 0)
        else:
            self.value(fn, (), 0)
        while self.todo and not self.unordered:
            f = self.todo.pop()
            self.tainted |= id(f) in self.tied_functions
            self.function(f)
        return self.found

    def user(self, module: Any) -> str | None:
        """``module``'s file if it is yours (counted as found), else None."""
        if not isinstance(module, str):
            return None
        if module not in self.users:
            self.users[module] = user_module_file(module)
        path = self.users[module]
        if path:
            self.found.setdefault(module, path)
        return path

    def function(self, f: types.FunctionType) -> None:
        code, names = f.__code__, f.__globals__
        self.functions.append(f)
        self.user(f.__module__)
        self.user(names.get("__name__"))  # a decorator's wrapper, defined in its module
        cells = zip(code.co_freevars, f.__closure__ or (), strict=False)
        names = {**names, **{n: c.cell_contents for n, c in cells if filled(c)}}
        used = tuple(dict.fromkeys([*code_names(code), *code.co_freevars]))
        for name in used:
            if name in names:
                self.value(names[name], used, 0)
        self.values_imported(f, used)
        for default in (*(f.__defaults__ or ()), *(f.__kwdefaults__ or {}).values()):
            self.value(default, used, 0)
        package = names.get("__package__")
        for base, taken in codescan.imported(code, package):
            self.imports(self.runs(base, taken), used)
        for name in codescan.strings(code, package):  # importlib.import_module("helpers")
            if name in sys.modules or self.file(name):
                self.imports(self.runs(name, ()), used)

    def values_imported(self, f: types.FunctionType, used: tuple[str, ...]) -> None:
        """The modules of yours a global value of ``f`` that holds no code was imported
        from (``from config import CFG``: a dict, a str, an array made there), found by the
        imports of ``f``'s module file: such a value has no module to follow, and an edit to
        ``config.py`` left the snapshot "up to date" with the old value's records."""
        path = self.user(f.__module__)
        names = f.__globals__
        plain = {n for n in used if n in names and _holds_no_code(names[n])}
        if not path or not plain:
            return
        init = os.path.basename(path) == "__init__.py"
        package = f.__module__ if init else f.__module__.rpartition(".")[0]
        for base, taken in codescan.file_imports(path, package):
            if hit := tuple(n for n in taken if n in plain):
                self.imports(self.runs(base, hit), used)

    def value(self, v: Any, used: tuple[str, ...], depth: int) -> None:
        """Follow what ``v`` holds; ``used``: the names of the code that reached it."""
        if isinstance(v, PLAIN):
            return
        if isinstance(v, types.ModuleType):
            self.module(v, used)
            return
        if id(v) in self.seen:
            return
        self.seen[id(v)] = v
        if isinstance(v, types.FunctionType):
            if self.user(v.__module__):
                self.todo.append(v)
            wrapped = inspect.getattr_static(v, "__wrapped__", None)
            self.value(wrapped, used, depth)  # (what a decorator wraps)
        elif isinstance(v, (staticmethod, classmethod, property, types.MethodType)):
            for part in ("__func__", "__self__", "fget", "fset", "fdel"):
                self.value(getattr(v, part, None), used, depth)
        elif isinstance(v, (functools.partial, functools.partialmethod)):
            for part in (v.func, *v.args, *v.keywords.values()):
                self.value(part, used, depth)
        elif isinstance(v, (dict, list, tuple, set, frozenset)):
            if type(v) not in _CONTAINERS:  # (a dict of your class: its methods count too)
                self.value(type(v), used, depth)
            if isinstance(v, dict):
                pairs = itertools.chain.from_iterable(v.items())
                self.items(pairs, used, depth + 1, 2 * _ITEMS)
            elif isinstance(v, (list, tuple)):
                self.items(v, used, depth + 1)
            elif len(v) <= _ITEMS and depth < _DEPTH:
                self.members(v, used, depth + 1)
        elif isinstance(v, type):
            self.cls(v)
        else:  # an object (a tokenizer made at import): its class's code, what it holds
            self.value(inspect.getattr_static(v, "__wrapped__", None), used, depth)
            self.value(type(v), used, depth)
            if self.user(type(v).__module__):  # (of your class: no __getattr__ of its run)
                self.value(_state(v), used, depth)

    def items(
        self, values: Iterable[Any], used: tuple[str, ...], depth: int, n: int = _ITEMS
    ) -> None:
        """A container's first ``n`` items, within the walk's budget."""
        if depth > _DEPTH:
            return
        want = min(n, self.budget)
        try:  # (one more where the budget cuts: were there more?)
            taken = list(itertools.islice(values, want + (want < n)))
        except RuntimeError:  # changed by another thread meanwhile
            return
        if len(taken) > want:  # the budget ran out here
            del taken[want:]
            self.unordered |= self.tied > 0 or self.tainted
        self.budget -= len(taken)
        for item in taken:
            self.value(item, used, depth)

    def members(self, v: set[Any] | frozenset[Any], used: tuple[str, ...], depth: int) -> None:
        """A set's items in a fixed order (:func:`.set_order.in_order`). Where some tie, their
        order is the set's own: the functions they lead to are queued by name, and should the
        budget run out while they are walked (or after a function of a name queued twice
        here is), the walk is made again without such sets (:func:`user_modules`)."""
        ordered, tied = in_order(v)
        if not tied:
            self.items(ordered, used, depth)
            return
        if self.skip_tied:
            return
        start = len(self.todo)
        self.tied += 1
        try:
            self.items(ordered, used, depth)
        finally:
            self.tied -= 1
        self.todo[start:] = sorted(self.todo[start:], key=place)
        names = collections.Counter(map(place, self.todo[start:]))
        self.tied_functions.update(id(f) for f in self.todo[start:] if names[place(f)] > 1)

    def cls(self, c: type) -> None:
        """A class: what its methods and attributes reach, and its bases' (yours)."""
        for k in c.__mro__:
            if (k is not c and id(k) in self.seen) or not self.user(k.__module__):
                continue
            self.seen[id(k)] = k
            for attr in list(vars(k).values()):
                self.value(attr, (), 0)

    def module(self, m: types.ModuleType, used: tuple[str, ...]) -> None:
        """A module the code refers to: counted if yours; then, of yours (or of a namespace
        package of yours), the attributes the code names (submodules: their attributes)."""
        state = vars(m)
        if not self.user(state.get("__name__")) and not _user_namespace(state):
            return
        followed = self.attrs.setdefault(id(m), set())
        new = [a for a in used if a not in followed and a in state]
        followed.update(used)
        for a in new:  # (from the module's dict: no module __getattr__ run)
            self.value(state[a], used, 0)

    def file(self, name: str) -> str | None:
        if name not in self.files:
            self.files[name] = module_file(name)
        return self.files[name]

    def runs(self, base: str, taken: tuple[str, ...]) -> list[tuple[str, bool]]:
        """The modules ``from base import taken`` (``import base``, with none) runs, and
        whether their code counts with what it imports (not a package's that only holds
        the modules taken: its ``__init__`` may import every module of the package)."""
        subs = [f"{base}.{n}" for n in taken if self.file(f"{base}.{n}")]
        whole = len(subs) < len(taken) or not taken
        packages = [(p, False) for p in codescan.prefixes(base)[:-1]]
        return [*packages, (base, whole), *((s, True) for s in subs)]

    def imports(self, runs: list[tuple[str, bool]], used: tuple[str, ...]) -> None:
        """Modules the code imports when it runs (or names in a string): each by what it
        holds if imported (the attributes the code names), and by its file and, in turn,
        what that imports (whether imported yet or not: the same reach either way)."""
        for name, whole in runs:  # (not a package that only holds the modules taken: what
            loaded = sys.modules.get(name)  # it holds differs once imported; its file does not)
            if whole and isinstance(loaded, types.ModuleType):
                self.module(loaded, used)
        todo = list(runs)
        while todo:
            name, whole = todo.pop()
            if name in self.scanned or not (path := self.file(name)):
                continue
            self.found.setdefault(name, path)
            if not whole:
                continue
            self.scanned.add(name)
            init = os.path.basename(path) == "__init__.py"
            package = name if init else name.rpartition(".")[0]
            for base, taken in codescan.file_imports(path, package):
                todo += self.runs(base, taken)


def _holds_no_code(v: Any) -> bool:
    """A value the walk finds no module through: not a function, class, module or other
    callable (a dict of strings, a str, a numpy array)."""
    return not callable(v) and not isinstance(v, types.ModuleType)


def _user_namespace(state: dict[str, Any]) -> bool:
    """Whether a module is a namespace package (no file) with a directory of yours."""
    if state.get("__file__") is not None or state.get("__path__") is None:
        return False
    library = _library_dirs()
    return any(not os.path.realpath(p).startswith(library) for p in list(state["__path__"]) if p)


def _state(v: Any) -> Any:
    """An object's attributes (its ``__dict__``), or None."""
    try:
        return object.__getattribute__(v, "__dict__")
    except (AttributeError, TypeError):
        return None
