"""How a pipeline function reaches worker processes, and what identifies it.

Two ways, chosen per function:

- **By name.** A function defined at the top level of an importable module (a package, or a
  ``.py`` file given as ``path/to/file.py:function``) is loaded again by name in every worker.
  Its identity is the sha256 of its module's source file (any edit there changes it) and of
  the files of your other modules its code reaches (:mod:`.codedeps`).
- **By value.** Anything else: a function defined in a notebook, in the script being run
  (``__main__``: a worker never re-runs the script), a closure, a lambda, a
  ``functools.partial``. It is pickled with cloudpickle (as Ray, Dask and joblib ship
  functions) and unpickled once per worker. Its identity covers its own source text (or
  bytecode where no source exists) and, recursively, the values it uses from outside:
  closure variables, globals it names, defaults, and the functions it calls that are shipped
  by value too. Functions from installed packages count by name only; functions from your
  own modules count by their file's contents and those of the modules they reach. It is the
  same in every process: sets count in a fixed order, whatever ``PYTHONHASHSEED`` is.

A function that cannot be pickled (it holds a lock, an open file, a live connection) is
refused with a message naming the global or closure variable that could not be shipped.
The code is shipped by value; data and metadata never are (the snapshot holds no pickle).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

from ..by_value import dumps, loads
from ..by_value import importable as _importable
from ..errors import PipelineLoadError
from .value_identity import BIG_CONTAINER as BIG_CONTAINER
from .value_identity import Unshippable as Unshippable
from .value_identity import _Walker as _Walker
from .value_identity import identities as identities
from .value_identity import identity as identity

log = logging.getLogger("snapshot_cli")

BIG_PAYLOAD = 64 << 20  # a function this large when pickled is worth a warning
_loaded: dict[str, Callable[..., Any]] = {}
_last: list[Any] = []  # [payload, function] of the last load


# --- by name ---------------------------------------------------------------------------------

# Modules snap imported from a pipeline file (``path/to/file.py:fn``), name → path: their
# functions are named by that path again.
FROM_FILES: dict[str, str] = {}


def importable_spec(fn: Callable[..., Any]) -> str | None:
    """``module:qualname`` a worker can load ``fn`` from, or None if it must go by value.
    Functions of modules snap loaded from a file (``path/to/file.py:fn``) by that path."""
    module, qualname = getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", "")
    if module in FROM_FILES:
        path = FROM_FILES[module]
        if "<" not in qualname and os.path.isfile(path):
            return f"{path}:{qualname}"
        return None
    return f"{module}:{qualname}" if _importable(module, qualname, fn) else None


# --- by value --------------------------------------------------------------------------------


def ship(fn: Callable[..., Any], name: str) -> str:
    """Pickle ``fn`` by value (cloudpickle) → base64 text for a JSON job.

    Raises:
        PipelineLoadError: something ``fn`` uses cannot be pickled; the message names it.
    """
    try:
        data = dumps(fn, sources=True)
    except Exception as err:
        try:
            identity(fn, strict=True)  # walks everything the function uses: finds the culprit
        except Unshippable as found:
            raise PipelineLoadError(_unshippable_message(name, found)) from err
        raise PipelineLoadError(
            f"the pipeline function {name!r} cannot be sent to worker processes: "
            f"{type(err).__name__}: {err}; {_REMEDY}"
        ) from err
    if len(data) > BIG_PAYLOAD:
        log.warning(
            "the pipeline function %r pickles to %d MiB with the values it uses; every "
            "worker process receives a copy (load large data inside the function instead)",
            name,
            len(data) >> 20,
        )
    return base64.b64encode(data).decode("ascii")


_REMEDY = (
    "create such objects inside the function (cache them with functools.cache to build "
    "them once per worker), or pass workers=0 to run the pipeline in this process"
)


def _unshippable_message(name: str, found: Unshippable) -> str:
    return (
        f"the pipeline function {name!r} cannot be sent to worker processes: it uses "
        f"{found.where}, which cannot be pickled ({type(found.err).__name__}: {found.err}); "
        f"{_REMEDY}"
    )


def load(payload: str) -> Callable[..., Any]:
    """Unpickle a function shipped by :func:`ship` (once per process and payload)."""
    if _last and _last[0] is payload:  # a worker's every task: the job's one string (hashing
        return _last[1]  # a 400 MiB payload for each of 100 tasks took 2 minutes of CPU)
    key = hashlib.sha256(payload.encode("ascii")).hexdigest()
    if key not in _loaded:
        try:
            fn = loads(base64.b64decode(payload))
        except Exception as err:
            raise PipelineLoadError(
                "the pipeline function shipped by value cannot be loaded in a worker process "
                f"({type(err).__name__}: {err}); a module it uses must be importable there "
                "too (installed, or on the same sys.path)"
            ) from err
        _loaded[key] = fn
    _last[:] = [payload, _loaded[key]]
    return _loaded[key]
