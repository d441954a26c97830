"""Which of your own modules a function's code uses, and their contents (pure but for reading
those files).

A pipeline counts by its source: its module's file (by name) or its own text (by value, see
:mod:`.shipping`). What it calls from your other modules counts too, by those files' bytes:
an edit to ``helpers.py`` that the pipeline imports from changed what it computes, and left
the snapshot "up to date" while only the pipeline's own file counted. "Your own" is any
``.py`` file outside the standard library and the installed packages; those count by name.
The modules are found from the names the code refers to (globals, ``module.attribute``) and,
in turn, from the code of your functions and classes it reaches, not from every import of a
module: an edit to a module the pipeline never reaches does not count.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from typing import Any


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
    that edits a helper between two creates gets the new digest)."""
    st = os.stat(path)
    return _digest(path, st.st_size, st.st_mtime_ns)


@functools.cache
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def user_module_file(module: str) -> str | None:
    """The source file of ``module`` if it is the user's own code (not stdlib or installed,
    nor snap itself, also as an editable install: which of snap's modules a process has
    imported changed a by-value function's identity between two creates)."""
    if module == "snapshot_cli" or module.startswith("snapshot_cli."):
        return None
    path = getattr(sys.modules.get(module), "__file__", None)
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        return None
    real = os.path.realpath(path)
    return None if real.startswith(_library_dirs()) else real


def code_names(code: types.CodeType) -> Iterator[str]:
    """Global names ``code`` and the code nested in it (lambdas, comprehensions) refer to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_names(const)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # not assigned yet
        return False
    return True


def _unwrapped(fn: Any) -> Any:
    """What a decorator wraps (``__wrapped__``), or ``fn`` where that chain loops."""
    try:
        return inspect.unwrap(fn)
    except ValueError:
        return fn


def user_modules(fn: Callable[..., Any], functions: list[Any] | None = None) -> dict[str, str]:
    """Your modules whose code ``fn`` reaches: module name → source file, ``fn``'s own
    module included if it is yours. Followed: the globals and closure variables its code
    names (a function, a class, an object's class, a module and the attributes of it the
    code names), then the same for each of your functions and classes' methods reached
    (appended to ``functions`` if given)."""
    found: dict[str, str] = {}
    todo: list[Any] = [_unwrapped(fn)]
    seen = {id(todo[0])}
    while todo:
        f = _unwrapped(todo.pop())
        code, names = getattr(f, "__code__", None), getattr(f, "__globals__", None)
        if not isinstance(code, types.CodeType) or not isinstance(names, dict):
            continue
        if functions is not None:
            functions.append(f)
        cells = zip(code.co_freevars, getattr(f, "__closure__", None) or (), strict=False)
        names = {**names, **{n: c.cell_contents for n, c in cells if _filled(c)}}
        used = list(dict.fromkeys([*code_names(code), *code.co_freevars]))
        reached: list[Any] = [f]
        for name in used:
            value = names.get(name)
            if isinstance(value, types.ModuleType):
                reached.append(value)
                if user_module_file(value.__name__):  # its attributes the code names
                    attrs = (vars(value).get(a) for a in used)  # (no module __getattr__ run)
                    reached += [a for a in attrs if isinstance(a, (types.FunctionType, type))]
            elif isinstance(value, (types.FunctionType, type)):
                reached.append(value)
            elif value is not None:  # an object (a tokenizer made at import): its class's code
                reached.append(type(value))
        for value in reached:
            module = getattr(
                value, "__name__" if isinstance(value, types.ModuleType) else "__module__", None
            )
            if isinstance(module, str) and (path := user_module_file(module)):
                found.setdefault(module, path)
                if id(value) in seen or isinstance(value, types.ModuleType):
                    continue
                seen.add(id(value))
                if isinstance(value, type):
                    todo += [a for a in vars(value).values() if isinstance(a, types.FunctionType)]
                else:
                    todo.append(value)
    return found
