"""A set's items in a fixed order for the walk of :mod:`.codedeps` (pure): a set's own
order varies with the hash seed (strings) and with where its items sit in memory (functions,
classes), and decided what the walk's budget reached."""

from __future__ import annotations

import types
from typing import Any

PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray, range)  # no code


def in_order(items: set[Any] | frozenset[Any]) -> tuple[list[Any], bool]:
    """A set's items in a fixed order: its own varies with the hash seed (strings) and with
    where its items sit in memory (functions, classes), and decided which of them the budget
    reached, and at which depth a value they share was first seen (its own then cut off);
    and whether items that can lead to code tie (objects of one class, functions of one
    name: in the set's order still)."""
    try:
        placed = sorted((place(v), i, v) for i, v in enumerate(items))
    except RuntimeError:  # changed by another thread meanwhile
        return [], False
    keys = [key for key, _, v in placed if not _inert(v)]
    return [v for _, _, v in placed], len(set(keys)) < len(keys)


def _inert(v: Any) -> bool:
    """Whether ``v`` leads to no code: a plain value, or a tuple or frozenset of them."""
    if type(v) in (tuple, frozenset):
        return all(isinstance(item, PLAIN) for item in v)
    return isinstance(v, PLAIN)


def place(v: Any) -> tuple[int, str]:
    """Where a set's item goes in :func:`in_order`: code first, by name (what can reach
    your modules), then other objects by their class, then plain values by ``repr``."""
    if isinstance(v, (types.FunctionType, type)):
        return 0, f"{v.__module__}.{v.__qualname__}"
    if isinstance(v, types.ModuleType):
        return 0, str(vars(v).get("__name__"))
    if isinstance(v, PLAIN):
        return 2, repr(v)
    return 1, f"{type(v).__module__}.{type(v).__qualname__}"
