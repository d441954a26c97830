"""A function pickled by value for worker processes (no I/O): cloudpickle,
with what it leaves out for a notebook's functions (see :func:`dumps`)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import linecache
import os
import pickle
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

MAIN_MODULES = ("__main__", "__mp_main__")  # a worker runs another one


def importable(module: str | None, qualname: str, obj: Any) -> bool:
    """Whether ``module:qualname`` imports (by name, without running a script) to ``obj``."""
    if not module or module in MAIN_MODULES or not qualname or "<" in qualname:
        return False
    mod = sys.modules.get(module)
    if mod is None or getattr(mod, "__spec__", None) is None:
        return False
    try:
        if importlib.util.find_spec(module) is None:
            return False
    except (ImportError, ValueError):
        return False
    target: Any = mod
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target is obj


def _by_name(v: Any) -> bool:
    return importable(getattr(v, "__module__", None), getattr(v, "__qualname__", ""), v)


def dumps(obj: Any, sources: bool = False) -> bytes:
    """``obj`` pickled by value as cloudpickle does, and:

    - a function cached with ``functools.cache``/``lru_cache`` in a notebook or the script
      being run (which README advises for what a worker should build once) goes as its
      function, cached again where it is loaded: pickle names such a cache by
      ``__main__.name``, which a worker has not (one it can import by name goes so);
    - with ``sources``, its code keeps its file names (cloudpickle writes "<dynamic-code>"),
      and the lines of those that are no file (a notebook's cells, which IPython keeps in
      ``linecache``) follow the pickle, for :func:`load`: a worker's traceback then shows
      the cell's line that failed, as the notebook's own would.
    """
    import cloudpickle

    files: set[str] = set()

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc,unused-ignore]
        def reducer_override(self, v: Any) -> Any:
            if isinstance(v, functools._lru_cache_wrapper) and not _by_name(v):
                return _cached_again, (v.__wrapped__, v.cache_parameters())
            if sources and isinstance(v, types.CodeType):
                files.add(v.co_filename)
                return _named_code(v)
            return super().reducer_override(v)

    out = io.BytesIO()
    with _script_by_value():
        Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    if sources:
        cells = {f: linecache.getlines(f) for f in sorted(files) if not os.path.isfile(f)}
        pickle.dump({f: lines for f, lines in cells.items() if lines}, out)
    return out.getvalue()


@contextlib.contextmanager
def _script_by_value() -> Iterator[None]:
    """While pickling: the script's functions and classes by value in a multiprocessing spawn
    child too, whose script is the module ``__mp_main__`` (a sweep's trials in a Pool):
    cloudpickle takes by value only ``__main__``'s, and sent by name ``__mp_main__``'s could
    not be loaded in snap's workers ("No module named '__mp_main__'")."""
    import cloudpickle

    script = sys.modules.get("__mp_main__")
    registered: set[str] = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    if getattr(script, "__name__", None) != "__mp_main__" or "__mp_main__" in registered:
        yield  # (none; or registered by its user: left so)
        return
    try:
        cloudpickle.register_pickle_by_value(script)
    except ValueError:  # (registered already, or not in sys.modules under its name)
        yield
        return
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(script)


def _named_code(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code`` with its file name kept (as cloudpickle's, if its
    private reduction is not the one this was written against)."""
    from cloudpickle import cloudpickle as internals

    reduced = getattr(internals, "_code_reduce", lambda c: NotImplemented)(code)
    # (compared as strings only: under python -bb a str == bytes comparison, with co_code's
    # bytes, raises BytesWarning and a by-value pipeline could not reach workers)
    found = (
        [isinstance(a, str) and a == "<dynamic-code>" for a in reduced[1]]
        if (isinstance(reduced, tuple) and len(reduced) == 2 and isinstance(reduced[1], tuple))
        else []
    )
    if any(found):
        args = list(reduced[1])
        args[found.index(True)] = code.co_filename
        return reduced[0], tuple(args)
    return reduced


def _cached_again(fn: Callable[..., Any], parameters: dict[str, Any]) -> Callable[..., Any]:
    """A shipped cached function, cached afresh in the process that loads it."""
    return functools.lru_cache(maxsize=parameters["maxsize"], typed=parameters["typed"])(fn)


def loads(data: bytes) -> Any:
    """What :func:`dumps` pickled; the cells' lines that follow it go into ``linecache``."""
    stream = io.BytesIO(data)
    obj = pickle.load(stream)  # noqa: S301 - our own payload, from our parent
    if stream.tell() < len(data):
        for name, lines in pickle.load(stream).items():  # noqa: S301
            linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    return obj
