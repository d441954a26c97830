"""A value's pickle where it is the same in every process, for hashing a by-value function's
values (:mod:`.shipping`).

A set's pickle lists its items in the set's own order, which varies with the hash seed
(strings) and with where its items sit in memory; a class pickled by value (cloudpickle)
gets an id new every process. Such a pickle is refused, and the value walked instead.

Most large values hold no set (a list of 2 million numbers, a dict of rows), and are pickled
by the C pickler with no Python call per element: only objects of other types than the
builtin ones reach a Python hook (``reducer_override``, which refuses a set subclass's
instance), and an exact set or frozenset leaves its opcode byte in the pickle. Where such a
byte is found (it may be a number's or a string's), the objects pickled are looked at
again, without Python calls per element where they are all of builtin types, else by
pickling once more with a hook on every object (exact, slower).
"""

from __future__ import annotations

import gc
import hashlib
import io
import itertools
import pickle
import sys
from typing import Any

_NUMBERS = (type(None), bool, int, float, complex)  # hashed alike in every process
_SET_OPCODES = (pickle.EMPTY_SET, pickle.FROZENSET)  # written for every set (protocol 4)


class _Unordered(Exception):
    """A set met while pickling, of items whose order varies from process to process."""


def stable_pickle(v: Any, base: type[pickle.Pickler]) -> bytes | None:
    """``v`` pickled with ``base`` (protocol 4), or None where the pickle differs from process
    to process: it holds a set of two items or more (not all numbers), whose items it lists in
    an order that varies with the hash seed (strings) or with where they sit in memory, or a
    class pickled by value (cloudpickle gives it an id new every process).

    Raises:
        Exception: what pickling ``v`` raises.
    """
    out = io.BytesIO()
    pickler: Any = _pickler(base, every=False)(out, protocol=4)  # (with its count, others)
    try:
        pickler.dump(v)
    except _Unordered:
        return None
    data = out.getvalue()
    if b"_make_skeleton_" in data:  # (cloudpickle's class by value)
        return None
    if not any(op in data for op in _SET_OPCODES):
        return data  # no exact set pickled; a subclass's instance: refused above
    if not pickler.others and _set_free(v, len(data)):  # (builtin types only: all looked at)
        return data
    out = io.BytesIO()  # a set, or unsure: every object it pickles looked at (slow)
    try:
        _pickler(base, every=True)(out, protocol=4).dump(v)
    except _Unordered:
        return None
    return out.getvalue()


def _unordered(obj: Any) -> bool:
    """Whether ``obj`` is a set whose items' order varies from process to process."""
    if not isinstance(obj, (set, frozenset)) or len(obj) < 2:
        return False
    return not all(type(item) in _NUMBERS for item in obj)


def _set_free(v: Any, limit: int) -> bool:
    """Whether no set or frozenset is ``v`` or in it, where ``v`` and all it holds are of the
    builtin types the pickler takes without ``reducer_override`` (lists, tuples, dicts,
    numbers, strings, bytes): looked at a level at a time, with no Python call per item.
    A level's containers give the next through ``gc.get_referents``: a container tells the
    garbage collector of every container and set it holds (it leaves out only a dict's
    string keys). False where unsure: more than ``limit`` objects looked at (a part held
    many times, or a cycle), where pickling it once more costs less."""
    level, kinds, seen = [v], {type(v)}, 1
    while True:
        if set in kinds or frozenset in kinds:
            return False
        if kinds <= {list, tuple}:
            items = level[0] if len(level) == 1 else itertools.chain.from_iterable(level)
            try:
                sum(items)  # their items: numbers only (None, a string, a list: TypeError)
                return True
            except (TypeError, OverflowError):
                pass
        level = gc.get_referents(*level)
        seen += len(level)
        if not level:
            return True
        if seen > limit:
            return False
        kinds = set(map(type, level))


_PICKLERS: dict[tuple[type[pickle.Pickler], bool], type[pickle.Pickler]] = {}


def _pickler(base: type[pickle.Pickler], every: bool) -> type[pickle.Pickler]:
    """``base``, raising :class:`_Unordered` at a set subclass's instance whose order varies
    and counting in ``others`` the objects pickled by their ``__reduce__`` (of other types
    than the builtin ones); with ``every``, at any set whose order varies (a Python call for
    every object it pickles)."""
    if (base, every) not in _PICKLERS:

        class Checking(base):  # type: ignore[misc,valid-type]
            others = 0

            def reducer_override(self, obj: Any) -> Any:  # (not called for builtin types)
                if _unordered(obj):
                    raise _Unordered
                self.others += 1
                parent = getattr(super(), "reducer_override", None)  # (cloudpickle's)
                return NotImplemented if parent is None else parent(obj)

        class Every(Checking):
            def persistent_id(self, obj: Any) -> None:  # (called for every object)
                if _unordered(obj):
                    raise _Unordered
                return None

        _PICKLERS[base, False], _PICKLERS[base, True] = Checking, Every
    return _PICKLERS[base, every]


# Torch objects: their pickle names a storage by a key torch takes from its address, new every
# process (so a pipeline using a model defined in a notebook was never up to date after a
# restart); they count by their values instead, as an ndarray does.


def is_torch(v: Any, kind: str) -> bool:
    """Whether ``v`` is a ``torch.<kind>`` (torch imported by now; never imported here)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, getattr(torch, kind, ()))


# a sparse layout -> the methods giving its parts
_SPARSE_PARTS = {
    "torch.sparse_coo": ("indices", "values"),
    "torch.sparse_csr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_bsr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_csc": ("ccol_indices", "row_indices", "values"),
    "torch.sparse_bsc": ("ccol_indices", "row_indices", "values"),
}


def sparse_parts(tensor: Any) -> list[tuple[str, Any]]:
    """A sparse tensor's parts (dense tensors: indices and values), by name; [] if dense."""
    names = _SPARSE_PARTS.get(str(tensor.layout), ())
    if names and str(tensor.layout) == "torch.sparse_coo":
        tensor = tensor.coalesce()  # (one order of its entries)
    return [(name, getattr(tensor, name)()) for name in names]


def tensor_digest(tensor: Any) -> str | None:
    """The sha256 of a dense tensor's values in row-major order, or None where they cannot
    be read as bytes (quantized, on the meta device)."""
    import torch

    try:
        held = tensor.detach().to("cpu").resolve_conj().resolve_neg()  # (lazy ones: as values)
        flat = held.contiguous().reshape(-1)
        if flat.numel() and flat.stride(-1) != 1:  # (one value, any stride: "contiguous")
            flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
        data = flat.view(torch.uint8).numpy()
    except Exception:
        return None
    return hashlib.sha256(data).hexdigest()


_DATA = (bool, int, float, complex, str, bytes, type(None))


def plain_data(value: Any, room: int = 10_000) -> bool:
    """Whether ``value`` is plain data: numbers, text, bytes, None, numpy arrays and scalars,
    and lists, tuples, sets and dicts of them, ``room`` values at most (a class attribute
    such as ``scale = 64`` or ``MEAN = np.array(...)``, counted by value; a descriptor, an
    instance or a huge table is not)."""
    stack = [value]
    while stack:
        v = stack.pop()
        room -= 1
        if room < 0:
            return False
        if isinstance(v, _DATA) or type(v).__module__ == "numpy":
            continue
        if isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            return False
    return True
