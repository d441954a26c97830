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
import builtins
import functools
import hashlib
import inspect
import logging
import os
import pickle
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..by_value import MAIN_MODULES as _MAIN_MODULES
from ..by_value import dumps, loads
from ..by_value import importable as _importable
from ..errors import PipelineLoadError
from . import codescan
from .codedeps import code_names, file_digest, filled, user_module_file, user_modules
from .hashing import is_torch, plain_data, sparse_parts, stable_pickle, tensor_digest

log = logging.getLogger("snapshot_cli")

BIG_PAYLOAD = 64 << 20  # a function this large when pickled is worth a warning
BIG_CONTAINER = 10_000  # larger lists and dicts are hashed through one pickle (without sets)
_loaded: dict[str, Callable[..., Any]] = {}
_last: list[Any] = []  # [payload, function] of the last load


class Unshippable(Exception):
    """A value the function uses cannot be pickled; ``where`` names it."""

    def __init__(self, where: str, err: BaseException) -> None:
        super().__init__(f"{where}: {type(err).__name__}: {err}")
        self.where, self.err = where, err


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


# --- identity --------------------------------------------------------------------------------


def identity(fn: Callable[..., Any], strict: bool = False, before: bool = False) -> str:
    """sha256 of a by-value function: its code and every value it uses (see module docs).

    A value that cannot be pickled counts by its type alone, unless ``strict``. ``before``:
    as snap before 2026-12-01 counted it (a logger by its attributes, the whole logging
    tree; and before 2026-12-07, a global named as an attribute the code uses, ``mean`` for
    ``arr.mean()``), for a snapshot made then (:func:`.pipeline.continued`).

    Raises:
        Unshippable: with ``strict``, a value it uses cannot be pickled (nor shipped).
    """
    walker = _Walker(strict, before)
    walker.value(fn, "the function")
    return walker.hexdigest()


def identities(fn: Callable[..., Any]) -> tuple[str, str, dict[str, str]]:
    """:func:`identity` of ``fn``; the one an older snap gave it where that differs (else
    ""), counted now, at the point of a create where snap counted it then (a logger's counted
    the logging tree, which a notebook's second run of a create changed: :func:`.pipeline.
    continued`); and your modules' files it counted, named where one changed."""
    walker = _Walker(strict=False)
    walker.value(fn, "the function")
    earlier = identity(fn, before=True) if walker.older else ""
    return walker.hexdigest(), earlier, walker.files


class _Walker:
    """Feeds a value and everything it refers to into one sha256, deterministically."""

    def __init__(self, strict: bool, before: bool = False) -> None:
        self.strict, self.before = strict, before
        # what an older snap counted otherwise, met ("logger", "attribute"); your files
        self.older, self.files = set[str](), dict[str, str]()
        self._h = hashlib.sha256()
        self._seen: dict[int, int] = {}
        self._keep: list[Any] = []  # ids stay unique while the walk runs

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def _add(self, *parts: Any) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode("utf-8")
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)

    def value(self, v: Any, where: str) -> None:
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            self._add(type(v).__name__, v if isinstance(v, bytes) else repr(v))
            return
        if id(v) in self._seen:
            self._add("seen", self._seen[id(v)])
            return
        self._seen[id(v)] = len(self._seen)
        self._keep.append(v)
        if isinstance(v, (list, tuple, dict)) and len(v) > BIG_CONTAINER and self._pickled(v):
            return  # plain data: one pickle, not a Python call per element
        if isinstance(v, (list, tuple)):
            self._add(type(v).__name__, len(v))
            for i, item in enumerate(v):
                self.value(item, f"{where}[{i}]")
        elif isinstance(v, dict):
            self._add("dict", len(v))
            for key, item in v.items():
                self.value(key, where)
                self.value(item, f"{where}[{key!r}]")
        elif isinstance(v, (set, frozenset)):
            digests = []
            for item in v:
                sub = _Walker(self.strict, self.before)
                sub.value(item, where)
                digests.append(sub.hexdigest())
                self.older |= sub.older
            self._add(type(v).__name__, *sorted(digests))
        elif isinstance(v, np.ma.MaskedArray) and v.dtype != object:  # data and mask
            self._add("masked", v.dtype.str, v.shape, np.asarray(v).tobytes())
            self._add(np.ma.getmaskarray(v).tobytes())
        elif isinstance(v, np.ndarray) and v.dtype != object:
            self._add("ndarray", v.dtype.str, v.shape, hashlib.sha256(v.tobytes()).hexdigest())
        elif isinstance(v, np.generic):
            self._add("numpy", v.dtype.str, v.tobytes())
        elif isinstance(v, types.ModuleType):
            self._add("module", v.__name__)
        elif isinstance(v, types.FunctionType):
            self._function(v, where)
        elif isinstance(v, functools.partial):
            self._add("partial")
            self.value(v.func, where)
            self.value(v.args, f"{where} (its arguments)")
            self.value(v.keywords, f"{where} (its keywords)")
        elif isinstance(v, types.MethodType):
            self._add("method")
            self.value(v.__func__, where)
            self.value(v.__self__, f"{where} (its object)")
        elif isinstance(v, (types.BuiltinFunctionType, type)):
            self._named(v, where)
        elif is_torch(v, "Tensor"):
            self._tensor(v, where)
        elif isinstance(v, logging.Logger) and not self.before:  # by name, as it pickles
            self._add("logger", v.name)
            self.older.add("logger")
        elif is_torch(v, "Generator"):  # its pickle holds its state's storage key
            self._add("torch.Generator", str(v.device))
            self.value(v.get_state(), f"{where} (its state)")
        else:
            self._object(v, where)

    def _tensor(self, v: Any, where: str) -> None:
        """A torch tensor (a Parameter, a model's weights) by its type, dtype, shape and
        values, as an ndarray is (see :func:`.hashing.tensor_digest`)."""
        if getattr(v, "is_nested", False):  # a nested tensor: by its tensors
            self._named(type(v), where)
            self._add("nested", str(v.dtype), v.requires_grad)
            self.value(list(v.detach().unbind()), f"{where} (its tensors)")
            return
        parts = sparse_parts(v)
        if parts:  # a sparse tensor: by its parts, each a dense tensor
            self._named(type(v), where)
            self._add("sparse", str(v.layout), tuple(v.shape))
            for name, part in parts:
                self.value(part, f"{where} (its {name})")
            return
        digest = tensor_digest(v)
        if digest is None:  # quantized, on the meta device: as any other object
            self._object(v, where)
            return
        self._named(type(v), where)
        self._add("tensor", str(v.dtype), tuple(v.shape), v.requires_grad, digest)
        attributes = getattr(v, "__dict__", None)
        if attributes:  # (a subclass's own)
            self.value(dict(sorted(attributes.items())), f"{where} (its attributes)")

    def _pickled(self, v: Any) -> bool:
        """``v`` hashed through its pickle, if it can be pickled and its pickle is the same in
        every process (see :func:`.hashing.stable_pickle`)."""
        try:
            data = stable_pickle(v, pickle.Pickler)
        except Exception:
            return False
        if data is not None:
            self._add(data)
        return data is not None

    def _named(self, v: Any, where: str) -> None:
        """Builtins and classes: by name when importable, else by their source."""
        module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", "")
        if _importable(module, qualname, v) or isinstance(v, types.BuiltinFunctionType):
            self._add("ref", module, qualname)
            if module and (path := user_module_file(module)):
                self._add(self._file(path))
                for name, dep in sorted(user_modules(v).items()):  # what its code uses
                    if name != module or not isinstance(v, type):  # (a class's own: above)
                        self._add(name, self._file(dep))
            return
        self._add("class", qualname)
        try:
            self._add(inspect.getsource(v))
            source = True
        except (OSError, TypeError):
            source = False
        for name, attr in sorted(vars(v).items()):  # (and its plain data by value: `class Cfg:
            code = isinstance(attr, (types.FunctionType, classmethod, staticmethod, property))
            if (code and not source) or (not name.startswith("__") and plain_data(attr)):
                self._add(name)  # scale = int(sys.argv[1])` had one source for every scale)
                self.value(getattr(attr, "__func__", attr), f"{where}.{name}")

    def _function(self, fn: types.FunctionType, where: str) -> None:
        module, qualname = fn.__module__, fn.__qualname__
        if where != "the function" and _importable(module, qualname, fn):
            self._named(fn, where)  # a library (or your module's) function: by name
            return
        self._add("function", qualname)
        try:
            # a lambda's "source" is the whole statement around it: use its code instead; a
            # decorator's wrapper its own (getsource(fn) follows __wrapped__ to the function)
            source = None if fn.__name__ == "<lambda>" else inspect.getsource(fn.__code__)
        except (OSError, TypeError):
            source = None
        self._add(source if source is not None else codescan.code_digest(fn.__code__))
        self.value(fn.__defaults__, f"{where} (its defaults)")
        self.value(fn.__kwdefaults__, f"{where} (its defaults)")
        self.value(dict(sorted(vars(fn).items())), f"{where} (its attributes)")
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
            if filled(cell):  # (else not assigned yet)
                self._add("closure", name)
                self.value(cell.cell_contents, f"the closure variable {name!r}")
        read = codescan.global_names(fn.__code__)
        for name in dict.fromkeys(code_names(fn.__code__)):
            if name in fn.__globals__ and name not in read:  # an attribute's name only (the
                self.older.add("attribute")  # `mean` of arr.mean()), a global before
            if name in fn.__globals__ and (name in read or self.before):  # 2026-12-07
                self._add("global", name)
                self.value(fn.__globals__[name], f"the global {name!r}")
            elif not hasattr(builtins, name):
                self._add("unbound", name)  # an attribute name, or a global not set yet
        for name, dep in sorted(user_modules(fn).items()):  # (`helper.scale` reaches helper)
            if name != module and name not in _MAIN_MODULES:
                self._add("uses", name, self._file(dep))

    def _file(self, path: str) -> str:
        self.files[path] = file_digest(path)
        return self.files[path]

    def _object(self, v: Any, where: str) -> None:
        """Any other object: its class, then its attributes one by one (so that a set in
        them counts in a fixed order), or its pickle."""
        import cloudpickle

        self._named(type(v), where)
        state = getattr(v, "__dict__", None)
        attributes = list(state.items()) if isinstance(state, dict) else []
        if self.strict:  # looking for what cannot be shipped: this object, or inside it?
            try:
                cloudpickle.dumps(v, protocol=4)
            except Exception as err:
                for name, attr in attributes:
                    self.value(attr, f"{where} (its attribute {name!r})")
                kind = f"{type(v).__module__}.{type(v).__qualname__}"
                raise Unshippable(f"{where} (a {kind})", err) from err
        if attributes:
            for name, attr in attributes:
                self._add(name)
                self.value(attr, f"{where} (its attribute {name!r})")
            return
        for pickler in (pickle.Pickler, cloudpickle.Pickler):  # (cloudpickle: by value)
            try:
                data = stable_pickle(v, pickler)
            except Exception:
                continue
            if data is None:  # a set in it (or a class by value): what it pickles, walked
                self._reduced(v, where)
            else:
                self._add(data)
            return
        self._add("unpicklable")

    def _reduced(self, v: Any, where: str) -> None:
        """``v`` by what pickle saves of it (its ``__reduce_ex__``), walked as values are: a
        set in its state (a ``@dataclass(slots=True)``'s frozenset) counts in a fixed order."""
        try:
            reduced = v.__reduce_ex__(4)
        except Exception:
            self._add("unpicklable")
            return
        if isinstance(reduced, str):  # a global, pickled by its name
            self._add("global", reduced)
            return
        parts = [list(p) if i in (3, 4) and p is not None else p for i, p in enumerate(reduced)]
        self._add("reduced")  # (3 and 4: iterators of its items, if a container)
        self.value(tuple(parts), f"{where} (its state)")
