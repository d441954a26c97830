"""What code imports when it runs, read without running it (pure but for reading files).

A function that imports a module inside its body (``from helpers import clean`` under its
``def``), or names it in a string (``importlib.import_module("helpers")``), uses that
module's code as much as one it names as a global, and the module need not be imported yet
when its fingerprint is taken: it is read from the bytecode here, and found as ``import``
would find it, by the finders of ``sys.meta_path``, without running it or its packages
(``importlib.util.find_spec`` imports the packages of a dotted name). The text of a code
object's constants, for comparing and hashing code, is here too: the same in every process.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

Import = tuple[str, tuple[str, ...]]  # a module by absolute name, and the names taken from it

# finders whose lookups change sys.modules (setuptools' clears distutils when asked for pip)
_UNSAFE_FINDERS = ("_distutils_hack",)


def find(name: str) -> Any:
    """The module spec of ``name`` (None: none found), its packages not imported: a
    package of a dotted name not imported yet is found first, then searched."""
    if name.partition(".")[0] in sys.stdlib_module_names:
        return None
    parent = name.rpartition(".")[0]
    path = None
    if parent:
        loaded = sys.modules.get(parent)
        if loaded is not None:
            state = getattr(loaded, "__dict__", None)
            path = state.get("__path__") if isinstance(state, dict) else None
        else:
            spec = find(parent)
            path = None if spec is None else spec.submodule_search_locations
        if path is None:  # not a package
            return None
    for finder in list(sys.meta_path):
        look = getattr(finder, "find_spec", None)
        if look is None or type(finder).__module__ in _UNSAFE_FINDERS:
            continue
        try:
            spec = look(name, path)
        except Exception:  # a finder's own fault: as if it had not found it
            continue
        if spec is not None:
            return spec
    return None


def nested(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code nested in it (functions, lambdas, comprehensions, classes)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested(const)


def constant(c: Any, code: Callable[[types.CodeType], str] = repr, every_set: bool = False) -> str:
    """A code object's constant as ``repr`` writes it, but the same text in every process: a
    frozenset's (``x in {"a", "b"}``) items are sorted where their order varies with the hash
    seed (strings or bytes in them), at any depth; with ``every_set``, in every frozenset of
    two items or more (one loaded from a ``.pyc`` was built in another order than the same
    compiled now). ``code`` gives the text of a code object in it."""
    if isinstance(c, types.CodeType):
        return code(c)
    if _fixed(c, every_set):
        return repr(c)
    if isinstance(c, tuple):
        texts = [constant(item, code, every_set) for item in c]
        return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"
    texts = sorted(constant(item, code, every_set) for item in c)
    return f"{type(c).__name__}({{{', '.join(texts)}}})"


def _fixed(c: Any, every_set: bool) -> bool:
    """Whether ``repr(c)`` is the same in every process (see :func:`constant`)."""
    if isinstance(c, types.CodeType):  # (its repr names its address)
        return False
    if isinstance(c, tuple):
        return all(_fixed(item, every_set) for item in c)
    if isinstance(c, frozenset):
        ordered = len(c) < 2 or not (every_set or any(_seeded(item) for item in c))
        return ordered and all(_fixed(item, every_set) for item in c)
    return True


def _seeded(c: Any) -> bool:
    """Whether the hash of ``c`` varies with ``PYTHONHASHSEED`` (that of a string or bytes,
    and of a tuple or frozenset that holds one)."""
    if isinstance(c, (str, bytes)):
        return True
    return isinstance(c, (tuple, frozenset)) and any(_seeded(item) for item in c)


@functools.lru_cache(maxsize=4096)
def _refs(
    code: types.CodeType,
) -> tuple[tuple[tuple[str, int, tuple[str, ...]], ...], tuple[str, ...]]:
    """What ``code`` imports, as (name, level, names taken from it), and its string
    constants that may name a module: dotted (``"pkg.mod"``), or any where the code calls
    ``import_module`` or ``__import__`` (a record's keys, ``"text"``, are no module then,
    even where a module of yours has that name)."""
    imports: list[tuple[str, int, tuple[str, ...]]] = []
    strings: list[str] = []
    for c in nested(code):
        last: list[Any] = [None, None]  # an import's level and names, loaded just before it
        for ins in dis.get_instructions(c):
            if ins.opname in _NOT_OPERANDS:  # (between an import's operands and it)
                continue
            if ins.opname == "IMPORT_NAME":
                level = last[0] if isinstance(last[0], int) else 0
                taken = last[1] if isinstance(last[1], tuple) else ()
                names = tuple(n for n in taken if isinstance(n, str) and n != "*")
                imports.append((str(ins.argval), level, names))
            last = [last[1], ins.argval]
        strings += [s for s in c.co_consts if isinstance(s, str) and _module_like(s)]
    importing = any(n in _IMPORTERS for c in nested(code) for n in c.co_names)
    strings = [s for s in strings if importing or "." in s.lstrip(".")]
    return tuple(dict.fromkeys(imports)), tuple(dict.fromkeys(strings))


@functools.lru_cache(maxsize=4096)
def global_names(code: types.CodeType) -> frozenset[str]:
    """The names ``code`` and the code nested in it read or write as globals. ``co_names``
    holds attribute names too (the ``mean`` of ``arr.mean()``): as globals they made an
    unrelated global of that name part of a function's identity."""
    return frozenset(
        str(ins.argval) for c in nested(code) for ins in dis.get_instructions(c)
        if ins.opname in _GLOBAL_OPS
    )  # fmt: skip


# LOAD_NAME: a class body's name, a global where the class does not define it;
# LOAD_FROM_DICT_OR_GLOBALS: the same in Python 3.12's class bodies
_GLOBAL_OPS = frozenset(
    {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"}
)
_IMPORTERS = frozenset({"import_module", "__import__"})
# instructions that carry no operand of their own: an EXTENDED_ARG before a constant past the
# 255th (a module of many constants) was taken for an import's level, and the module lost
_NOT_OPERANDS = frozenset({"EXTENDED_ARG", "CACHE", "NOP"})


def _module_like(s: str) -> bool:
    return 0 < len(s) <= 200 and all(p.isidentifier() for p in s.lstrip(".").split("."))


def absolute(name: str, level: int, package: Any) -> str | None:
    """``name`` imported with ``level`` leading dots in ``package``, as an absolute name."""
    if not level:
        return name or None
    if not isinstance(package, str) or not package:
        return None
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def imported(code: types.CodeType, package: Any) -> Iterator[Import]:
    """What ``code`` imports when it runs (``package``: its module's, for relative imports):
    ``import a.b`` → (``a.b``, ()); ``from .m import f, g`` → (``package.m``, (f, g))."""
    for name, level, names in _refs(code)[0]:
        base = absolute(name, level, package)
        if base is not None:
            yield base, names


def strings(code: types.CodeType, package: Any) -> Iterator[str]:
    """The string constants of ``code`` that could name a module, by absolute name (a
    leading dot: in ``package``, as ``importlib.import_module(".m", package)`` takes it)."""
    for s in _refs(code)[1]:
        bare = s.lstrip(".")
        name = absolute(bare, len(s) - len(bare), package)
        if name is not None:
            yield name


def file_imports(path: str, package: str) -> tuple[Import, ...]:
    """What the file ``path`` imports anywhere in it (compiled, not run), and the modules its
    strings name as :func:`strings` reads them: a module of ``package`` is found by its file
    before it is imported."""
    try:
        st = os.stat(path)
    except OSError:  # (gone since it was found)
        return ()
    return _file_imports(path, st.st_size, st.st_mtime_ns, package)


@functools.lru_cache(maxsize=4096)
def _file_imports(path: str, size: int, mtime_ns: int, package: str) -> tuple[Import, ...]:
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return ()
    named = ((name, ()) for name in strings(code, package))  # (import_module("x") in it)
    return tuple(dict.fromkeys([*imported(code, package), *named]))


def prefixes(name: str) -> list[str]:
    """``a.b.c`` → ``a``, ``a.b``, ``a.b.c``: importing it runs each."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def code_digest(code: types.CodeType) -> str:
    """Bytecode digest for functions without source (exec'd strings): stable in a process
    and across runs of one Python version (every set constant's items in a fixed order: a
    set of numbers compiled from source and one loaded from a .pyc, which marshal writes
    sorted, iterate otherwise where their hashes collide)."""
    h = hashlib.sha256()
    h.update(code.co_code)
    for const in code.co_consts:
        h.update(constant(const, code_digest, every_set=True).encode())
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    return h.hexdigest()
