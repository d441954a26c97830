"""What identifies a pipeline function sent by value (:mod:`.shipping`): the sha256 of its
code and of every value it uses from outside, walked deterministically, and the digest of
each part of it (its code, defaults, attributes, each closure variable and global it reads),
which the manifest keeps so that a later create whose function differs names the parts that
do (``pipeline.parts``): a notebook's snapshot said "different pipeline code (... a global,
a closure variable, a default, a function it calls ...)" whichever it was (a probe)."""

from __future__ import annotations

import builtins
import functools
import hashlib
import inspect
import logging
import pickle
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..by_value import MAIN_MODULES as _MAIN_MODULES
from ..by_value import importable as _importable
from . import codescan
from .codedeps import code_names, file_digest, filled, user_module_file, user_modules
from .hashing import is_torch, plain_data, sparse_parts, stable_pickle, tensor_digest

BIG_CONTAINER = 10_000  # larger lists and dicts are hashed through one pickle (without sets)


class Unshippable(Exception):
    """A value the function uses cannot be pickled; ``where`` names it."""

    def __init__(self, where: str, err: BaseException) -> None:
        super().__init__(f"{where}: {type(err).__name__}: {err}")
        self.where, self.err = where, err


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


def identities(fn: Callable[..., Any]) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """:func:`identity` of ``fn``; the one an older snap gave it where that differs (else
    ""), counted now, at the point of a create where snap counted it then (a logger's counted
    the logging tree, which a notebook's second run of a create changed: :func:`.pipeline.
    continued`); your modules' files it counted, named where one changed; and the digest of
    each part of the function (:attr:`_Walker.parts`), named where one changed."""
    walker = _Walker(strict=False)
    walker.value(fn, "the function")
    earlier = identity(fn, before=True) if walker.older else ""
    return walker.hexdigest(), earlier, walker.files, walker.parts


class _Walker:
    """Feeds a value and everything it refers to into one sha256, deterministically."""

    def __init__(self, strict: bool, before: bool = False) -> None:
        self.strict, self.before = strict, before
        # what an older snap counted otherwise, met ("logger", "attribute"); your files
        self.older, self.files = set[str](), dict[str, str]()
        self._h = hashlib.sha256()
        self._seen: dict[int, int] = {}
        self._keep: list[Any] = []  # ids stay unique while the walk runs
        # the function's parts ("its code", "the global 'SCALE'"...): what each added, hashed
        self.parts: dict[str, str] = {}
        self._part: Any = None  # (the part being walked: a sha256 of what it adds)

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def _add(self, *parts: Any) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode("utf-8")
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)
            if self._part is not None:  # (two updates: a pickle may be large, not copied)
                self._part.update(len(data).to_bytes(8, "little"))
                self._part.update(data)

    @contextmanager
    def _part_of(self, label: str, top: bool) -> Iterator[None]:
        """While the top function's part ``label`` is walked, what it adds is also hashed
        on its own, kept in :attr:`parts` (a value met before counts as "seen" there)."""
        if not top or self._part is not None:
            yield
            return
        self._part = hashlib.sha256()
        try:
            yield
        finally:
            digest, self._part = self._part.hexdigest()[:16], None
            self.parts[label] = digest

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
        top = where == "the function" and not self.parts  # (its parts named: _part_of)
        with self._part_of("its code", top):
            self._add("function", qualname)
            try:
                # a lambda's "source" is the whole statement around it: use its code instead;
                # a decorator's wrapper its own (getsource(fn) follows __wrapped__ to it)
                source = None if fn.__name__ == "<lambda>" else inspect.getsource(fn.__code__)
            except (OSError, TypeError):
                source = None
            self._add(source if source is not None else codescan.code_digest(fn.__code__))
        with self._part_of("its defaults", top):
            self.value(fn.__defaults__, f"{where} (its defaults)")
            self.value(fn.__kwdefaults__, f"{where} (its defaults)")
        with self._part_of("its attributes", top):
            self.value(dict(sorted(vars(fn).items())), f"{where} (its attributes)")
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
            if filled(cell):  # (else not assigned yet)
                with self._part_of(f"the closure variable {name!r}", top):
                    self._add("closure", name)
                    self.value(cell.cell_contents, f"the closure variable {name!r}")
        read = codescan.global_names(fn.__code__)
        for name in dict.fromkeys(code_names(fn.__code__)):
            if name in fn.__globals__ and name not in read:  # an attribute's name only (the
                self.older.add("attribute")  # `mean` of arr.mean()), a global before
            if name in fn.__globals__ and (name in read or self.before):  # 2026-12-07
                with self._part_of(f"the global {name!r}", top):
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


def parts_changed(then: Any, now: dict[str, str]) -> str:
    """The parts of a function sent by value (:attr:`_Walker.parts`) recorded ``then`` whose
    digest ``now`` differs, or that one side has alone, said for "different pipeline code
    (...)"; "" where ``then`` is no such record (a snapshot of snap before 2026-12-07, or
    one made by name) or no part differs (then only sharing between them did)."""
    if not isinstance(then, dict) or not then or not all(isinstance(v, str) for v in then.values()):
        return ""
    changed = [f"{p} changed" for p in now if p in then and then[p] != now[p]]
    changed += [f"{p} now used" for p in now if p not in then]
    changed += [f"{p} no longer used" for p in then if p not in now]
    return "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
