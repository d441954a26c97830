"""Whether the code that runs in this process is the code on disk (pure but for reading files).

A pipeline run in the calling process (``workers=0``) runs the functions this process loaded,
but its fingerprint counts the bytes of their files (:mod:`.codedeps`): in a notebook, a
function of ``prep.py`` edited after ``import prep`` ran as it was, and its records were
committed under the fingerprint of the edited file, so that every later create found them up
to date. Worker processes import the files as they are (their cached bytecode taken for an
older version is removed when they are fingerprinted: :mod:`.bytecode`), so only this
process can be behind.

A function is *behind* its file when its code is no longer in the file as it is now (the
same name with other bytecode, constants or names). Comments, blank lines and moved code do
not count; module-level values do not either (they are not kept once the module has run).
The functions checked are those the pipeline reaches in your own modules, as they are bound
where it calls them (a ``from helpers import f`` keeps the old ``f`` after a reload of
``helpers``), in modules Python compiled from their files as written: one an import hook
rewrote (pytest's assertion rewriting, jaxtyping's) differs from its file unedited, so it is
not compared.
"""

from __future__ import annotations

import dis
import functools
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from ..errors import OptionError
from . import codedeps, codescan


def check(fn: Callable[..., Any]) -> None:
    """Refuse to run ``fn`` in this process if any function it reaches is behind its file."""
    late = behind(fn)
    if not late:
        return
    shown = "; ".join(f"{path}: {', '.join(names[:4])}" for path, names in late.items())
    raise OptionError(
        f"the pipeline would run in this process (workers=0) code older than its files, "
        f"edited since they were imported ({shown}): its records would be the old code's, "
        "kept under the fingerprint of the new. Reload the modules (importlib.reload, the "
        "pipeline's module last) or restart the kernel, or run with workers=1 or more, whose "
        "processes import the files as they are now"
    )


def behind(fn: Callable[..., Any]) -> dict[str, list[str]]:
    """The functions ``fn`` reaches (itself included) that are behind their files: source
    file → their qualified names."""
    functions: list[Any] = []
    for start in _starts(fn):
        codedeps.user_modules(start, functions)
    on_disk: dict[str, dict[str, set[Any]] | None] = {}
    found: dict[str, list[str]] = {}
    for f in {id(f): f for f in functions}.values():  # (reached from several starts: once)
        module = getattr(f, "__module__", None)
        path = codedeps.user_module_file(module) if isinstance(module, str) else None
        code = f.__code__
        if module == "__main__" or not path or not path.endswith(".py"):
            continue  # by value (a notebook's or the script's): fingerprinted as it is
        if os.path.realpath(code.co_filename) != os.path.realpath(path):
            continue  # made by a decorator or a code generator elsewhere
        if not _compiled_as_written(str(module)):
            continue
        if path not in on_disk:
            on_disk[path] = _compiled(path)
        names = on_disk[path]
        if names is None or _essence(code) not in names.get(code.co_name, ()):
            found.setdefault(path, []).append(getattr(f, "__qualname__", code.co_name))
    return found


def _compiled_as_written(module: str) -> bool:
    """Whether ``module`` was compiled from its file as Python compiles it, so that its code
    can be compared with the file's: not through an import hook that rewrites the code
    (pytest's assertion rewriting, jaxtyping's or typeguard's hooks), whose code differs from
    the file's as written though nothing was edited."""
    loaded = sys.modules.get(module)
    spec = getattr(loaded, "__spec__", None)
    loader = getattr(spec, "loader", None) or getattr(loaded, "__loader__", None)
    return type(loader) is importlib.machinery.SourceFileLoader


def _starts(fn: Any) -> list[Any]:
    """The functions a pipeline runs from: that of a ``functools.partial``; a bound method
    and the other methods of its class (what it calls on ``self``); a callable instance's
    class's methods."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    owner = None
    if isinstance(fn, types.MethodType):
        owner, fn = type(fn.__self__), fn.__func__
    elif not isinstance(fn, types.FunctionType) and callable(fn):
        owner, fn = type(fn), None
    methods = (
        []
        if owner is None
        else [getattr(m, "__func__", m) for c in owner.__mro__ for m in vars(c).values()]
    )
    return [f for f in [fn, *methods] if isinstance(f, types.FunctionType)]


def _compiled(path: str) -> dict[str, set[Any]] | None:
    """Every code object of ``path`` as it is now, by name (None: it is gone or broken)."""
    try:
        with open(path, "rb") as f:
            top = compile(f.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None
    names: dict[str, set[Any]] = {}
    for code in codescan.nested(top):
        names.setdefault(code.co_name, set()).add(_essence(code))
    return names


def _essence(code: types.CodeType) -> tuple[Any, ...]:
    """What a code object computes, without where it sits in its file (a set's items in a
    fixed order: one loaded from a .pyc was built in another order than the file's compiled
    now, and its repr differed, "behind" its file unedited; a class body's line, which
    Python 3.13 keeps as a constant for ``__firstlineno__``, left out: a comment added above
    a function making a class made it "behind")."""
    of = lambda c: (  # noqa: E731
        _essence(c) if isinstance(c, types.CodeType)
        else (type(c).__name__, codescan.constant(c, every_set=True))
    )  # fmt: skip
    if "__firstlineno__" in code.co_names:  # (by instruction: the line's constant may be
        ops = list(dis.get_instructions(code))  # shared with an equal one of the body's)
        body: Any = tuple(
            (op.opname, ("line",) if nxt.argval == "__firstlineno__" and nxt.opname
             == "STORE_NAME" else of(op.argval) if op.opcode in dis.hasconst else op.arg)
            for op, nxt in zip(ops, [*ops[1:], ops[0]], strict=True)
        )  # fmt: skip
    else:
        body = (code.co_code, tuple(of(c) for c in code.co_consts))
    return (body, code.co_names, code.co_varnames, code.co_freevars, code.co_argcount,
            code.co_kwonlyargcount)  # fmt: skip
