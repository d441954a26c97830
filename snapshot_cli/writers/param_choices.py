"""``--param KEY=VALUE`` for a KEY the function annotates ``Literal[...]``: the VALUE is the
allowed value it spells, or it is refused with the values allowed.

Read as JSON, ``--param split=1`` to ``split: Literal["1", "2"]`` was the int 1 (no value the
function allows, and a silent wrong result where it compares), and ``mode=trian`` to
``mode: Literal["train", "eval"]`` ran the whole create with a value the function never
expected. A ``Literal`` of str, int, bool and None values is read here, as an object or as the
text ``from __future__ import annotations`` leaves; any other (enum members, bytes) is left to
JSON, as before.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import shlex
import types
import typing
from collections.abc import Callable
from typing import Any

from ..errors import OptionError

TRUE, FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}
_NONE_TEXT = ("None", "null")


def annotation_of(function: Callable[..., Any], key: str) -> Any:
    """The annotation ``function`` gives its parameter ``key`` (``inspect``'s ``empty`` where
    none), or None where it has no such parameter (or ``*args``, ``**kwargs`` alone, or it
    is a callable Python cannot describe)."""
    try:
        parameter = inspect.signature(function).parameters.get(key)
    except (TypeError, ValueError):  # a builtin, or a callable Python cannot describe
        return None
    if parameter is None or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        return None
    return parameter.annotation


def allowed(function: Callable[..., Any], key: str) -> tuple[Any, ...] | None:
    """The values ``function``'s ``Literal`` annotation of ``key`` allows (None among them
    when it is optional), or None when ``key`` has no such annotation."""
    ann = annotation_of(function, key)
    if ann is None:
        return None
    values = _from_text(ann) if isinstance(ann, str) else _from_object(ann)
    if values is None or not values:
        return None
    plain = all(v is None or isinstance(v, (str, int)) for v in values)  # (bool is an int)
    return tuple({(type(v), v): v for v in values}.values()) if plain else None  # (0, False)


def _from_object(ann: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(ann) is typing.Annotated:
        return _from_object(typing.get_args(ann)[0])
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = typing.get_args(ann)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return None
        inner = _from_object(rest[0])
        return None if inner is None else (*inner, None)
    if typing.get_origin(ann) is typing.Literal:
        return typing.get_args(ann)
    return None


def _from_text(text: str) -> tuple[Any, ...] | None:
    """The values of a ``Literal[...]`` annotation left as text (in ``Optional[...]``,
    ``| None`` or ``Annotated[...]`` too), read from its syntax tree: nothing runs."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return _from_node(tree)


def _from_node(node: ast.expr) -> tuple[Any, ...] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # quoted: "Literal[...]"
        return _from_text(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None, None | X
        sides = [node.left, node.right]
        rest = [n for n in sides if not (isinstance(n, ast.Constant) and n.value is None)]
        inner = _from_node(rest[0]) if len(rest) == 1 else None
        return None if inner is None else (*inner, None)
    if not isinstance(node, ast.Subscript):
        return None
    name = _name(node.value)
    if name == "Optional":
        inner = _from_node(node.slice)
        return None if inner is None else (*inner, None)
    if name == "Annotated" and isinstance(node.slice, ast.Tuple) and node.slice.elts:
        return _from_node(node.slice.elts[0])
    if name != "Literal":
        return None
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    values: list[Any] = []
    for item in items:
        if isinstance(item, ast.Subscript) and _name(item.value) == "Literal":
            inner = _from_node(item)  # (Literal[Literal["a"], "b"], as typing flattens it)
            if inner is None:
                return None
            values += inner
            continue
        try:
            values.append(ast.literal_eval(item))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None  # (a name: an enum member, a constant)
    return tuple(values)


def _name(node: ast.expr) -> str | None:
    """``Literal``, ``typing.Literal`` or ``typing_extensions.Literal`` as ``Literal``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id in ("typing", "typing_extensions", "t") else None
    return None


def chosen(function: Callable[..., Any], key: str, raw: str, values: tuple[Any, ...]) -> Any:
    """The allowed value ``raw`` spells: a str value as given (then without the spaces
    around it), None as ``None`` or ``null``, a bool as true/false, yes/no, 1/0, an int as
    its digits; else an OptionError listing the values allowed."""
    text = raw.strip()
    for given in (raw, text):
        if any(isinstance(v, str) and v == given for v in values):
            return given
    for value in values:
        if value is None and text in _NONE_TEXT:
            return None
        if isinstance(value, bool):
            if text.lower() in (TRUE if value else FALSE):
                return value
        elif isinstance(value, int) and _integer(text) == value:
            return value
    name = getattr(function, "__name__", "the pipeline")
    said = ", ".join(_shown(v) for v in values)
    near = difflib.get_close_matches(text, [v for v in values if isinstance(v, str)], n=1)
    hint = f" (did you mean {_shown(near[0])}?)" if near else ""
    raise OptionError(
        f"--param {key}={raw[:60]!r}: {name}() annotates {key} as "
        f"Literal[{', '.join(repr(v) for v in values)}]; give one of {said}{hint}"
    )


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:  # (also an integer over 4,300 digits)
        return None


def _shown(value: Any) -> str:
    """A value as it is typed on a command line: a str quoted only where a shell needs it."""
    return shlex.quote(value) if isinstance(value, str) else str(value)
