"""A function pickled by value for worker processes (no I/O): cloudpickle,
with what it leaves out for a notebook's functions (see :func:`dumps`)."""

from __future__ import annotations

import functools
import io
import linecache
import os
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any


def _found_by_name(v: Any) -> bool:
    """Whether ``v`` is what its module's name and qualname give (``__main__``'s never is:
    a worker runs another ``__main__``)."""
    module = getattr(v, "__module__", None)
    target: Any = (
        sys.modules.get(module) if module not in (None, "__main__", "__mp_main__") else None
    )
    for part in getattr(v, "__qualname__", "<>").split("."):
        target = getattr(target, part, None)
    return target is v


def dumps(
    obj: Any, sources: bool = False, by_name: Callable[[Any], bool] = _found_by_name
) -> bytes:
    """``obj`` pickled by value as cloudpickle does, and:

    - a function cached with ``functools.cache``/``lru_cache`` in a notebook or the script
      being run (which README advises for what a worker should build once; ``by_name``:
      whether a worker can import it by its name instead) goes as its function, cached
      again where it is loaded: pickle names such a cache by ``__main__.name``, which a
      worker has not;
    - with ``sources``, its code keeps its file names (cloudpickle writes "<dynamic-code>"),
      and the lines of those that are no file (a notebook's cells, which IPython keeps in
      ``linecache``) follow the pickle, for :func:`load`: a worker's traceback then shows
      the cell's line that failed, as the notebook's own would.
    """
    import io

    import cloudpickle

    files: set[str] = set()

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc,unused-ignore]
        def reducer_override(self, v: Any) -> Any:
            if isinstance(v, functools._lru_cache_wrapper) and not by_name(v):
                return _cached_again, (v.__wrapped__, v.cache_parameters())
            if sources and isinstance(v, types.CodeType):
                files.add(v.co_filename)
                return _named_code(v)
            return super().reducer_override(v)

    out = io.BytesIO()
    Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    if sources:
        cells = {f: linecache.getlines(f) for f in sorted(files) if not os.path.isfile(f)}
        pickle.dump({f: lines for f, lines in cells.items() if lines}, out)
    return out.getvalue()


def _named_code(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code`` with its file name kept (as cloudpickle's, if its
    private reduction is not the one this was written against)."""
    from cloudpickle import cloudpickle as internals

    reduced = getattr(internals, "_code_reduce", lambda c: NotImplemented)(code)
    if isinstance(reduced, tuple) and len(reduced) == 2 and "<dynamic-code>" in reduced[1]:
        args = list(reduced[1])
        args[args.index("<dynamic-code>")] = code.co_filename
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
