"""A pipeline's params: ``--param KEY=VALUE`` text read as the value it stands for, and
``params=`` checked as JSON (the manifest keeps them, and the fingerprint hashes them).

A VALUE is read as the type the function annotates KEY with, when that is ``bool``, ``int``,
``float`` or ``str``, or one of them or None (or a ``Literal[...]``: ``param_choices``):
``--param augment=False`` to ``augment: bool`` is False, and ``--param name=007`` or
``name=123`` to ``name: str`` the string given. Read as JSON, the first was the string "False"
(true in an ``if``: a silent wrong result) and ``name=123`` the number 123. A VALUE that does
not fit is refused, naming the parameter, its annotation and an example. Other keys are read
as JSON, and Python's ``True``, ``False`` and ``None`` as those constants; what is neither is
the string given.
"""

from __future__ import annotations

import json
import math
import os
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import manifest_text
from ..arg_text import is_unicode, not_text
from ..errors import OptionError
from .importing import load_function
from .param_choices import FALSE, TRUE, allowed, annotation_of, chosen

SIMPLE = {"bool": bool, "int": int, "float": float, "str": str}
PYTHON_CONSTANTS = {"True": True, "False": False, "None": None}
EXAMPLES = {bool: "true or false", int: "an integer, e.g. 64", float: "a number, e.g. 0.001"}
# an annotation left as text ("int | None", "Optional[float]", "typing.Optional[str]")
_TEXT = re.compile(
    r"(?:(?:typing\.)?Optional\[\s*(?P<opt>\w+)\s*\]"
    r"|(?P<left>\w+)(?P<or_none>\s*\|\s*None)?|None\s*\|\s*(?P<right>\w+))"
)


def parse_params(
    items: list[str] | tuple[str, ...], function: Callable[..., Any] | None = None
) -> dict[str, Any]:
    """``KEY=VALUE`` strings → keyword arguments of ``function`` (see the module docstring)."""
    params: dict[str, Any] = {}
    for i, item in enumerate(items):
        key, _, raw = item.partition("=")
        key = key.strip()
        if (bad := malformed(items[: i + 1])) is not None:  # (this item, or its key again)
            raise OptionError(bad)
        if function is None:
            params[key] = untyped(key, raw)
        elif (values := allowed(function, key)) is not None:
            params[key] = chosen(function, key, raw, values)
        elif (wanted := annotated(function, key)) is not None:
            params[key] = typed(function, key, raw, *wanted)
        else:
            params[key] = untyped(key, raw)
    return params


def malformed(items: Sequence[str]) -> str | None:
    """What makes ``KEY=VALUE`` items no keyword arguments, whatever their values: text the
    locale could not decode, an item without ``=`` or whose KEY is no Python name, a KEY
    given twice; None if nothing does."""
    keys: set[str] = set()
    for item in items:
        key, sep, raw = item.partition("=")
        if not is_unicode(item):  # (bytes the locale's codec could not decode, escaped)
            named = f"{key}: its value {raw!r}" if is_unicode(key) else f"{item!r}"
            return not_text(f"--param {named}", "params")
        key = key.strip()
        if not sep or not key.isidentifier():
            return f"--param {item!r} must look like KEY=VALUE with KEY a Python name"
        if key in keys:
            return f"--param {key} is given twice; give each parameter once"
        keys.add(key)
    return None


def cli_params(
    items: tuple[str, ...], pipeline: str, usage: type[Exception] = OptionError
) -> dict[str, Any]:
    """``snap create``'s ``--param`` items, read for the function the spec ``pipeline`` names
    (imported here if any is given; create finds it in the importer's cache). Items that are
    no ``KEY=VALUE`` raise ``usage`` (the CLI's usage error: exit 2), before any import."""
    if (bad := malformed(items)) is not None:
        raise usage(bad)
    return parse_params(items, load_function(pipeline) if items else None)


def untyped(key: str, raw: str) -> Any:
    """A VALUE as JSON (RFC 8259: no NaN or infinity, which the manifest cannot hold), else
    Python's constants, else the string given."""
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (json.JSONDecodeError, _NotJson):
        return PYTHON_CONSTANTS.get(raw.strip(), raw)
    except (ValueError, RecursionError) as err:  # an integer over 4,300 digits, deep nesting
        raise OptionError(f"--param {key}: {str(err)[:200]}") from err


def typed(function: Callable[..., Any], key: str, raw: str, kind: type, optional: bool) -> Any:
    """A VALUE read as ``kind`` (None too if ``optional``), or an OptionError saying what fits."""
    text = raw.strip()
    if optional and text in ("None", "null"):
        return None
    if kind is str:
        return raw
    if kind is bool and text.lower() in TRUE | FALSE:
        return text.lower() in TRUE
    if kind is int:
        try:
            return int(text)
        except ValueError:  # (also an integer over 4,300 digits)
            pass
    if kind is float:
        try:  # (an integer too, 2 as 2.0, as argparse's and click's float read it: it was the
            # int 2, and np.full(3, scale) made an int64 column, scale=2.0 "other params")
            value = float(text)
        except ValueError:
            pass
        else:
            if math.isfinite(value):
                return value
            raise OptionError(
                f"--param {key}={raw[:60]!r}: a param is kept in the manifest as JSON, which has "
                "no NaN or infinity; pass a string (annotate it str) and convert it in the "
                "function"
            )
    name = getattr(function, "__name__", "the pipeline")
    shown = f"{kind.__name__} or None" if optional else kind.__name__
    raise OptionError(
        f"--param {key}={raw[:60]!r}: {name}() annotates {key} as {shown}; give "
        f"{EXAMPLES[kind]}" + (" (or None)" if optional else "")
    )


def annotated(function: Callable[..., Any], key: str) -> tuple[type, bool] | None:
    """``(type, None allowed)`` when ``function`` annotates parameter ``key`` as ``bool``,
    ``int``, ``float`` or ``str``, or one of them or None; otherwise None."""
    if (ann := annotation_of(function, key)) is None:
        return None
    ann = _unannotated(ann)
    if isinstance(ann, str):  # from __future__ import annotations: read the text, run nothing
        m = _TEXT.fullmatch(ann.strip().strip("'\""))
        if m is None:
            return None
        name = m["opt"] or m["left"] or m["right"]
        kind = SIMPLE.get(name)
        return None if kind is None else (kind, not m["left"] or bool(m["or_none"]))
    optional = False
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = typing.get_args(ann)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return None
        ann, optional = _unannotated(rest[0]), len(rest) < len(args)
    return (ann, optional) if ann in SIMPLE.values() else None


_ANNOTATED_TEXT = re.compile(r"(?:typing\.|typing_extensions\.)?Annotated\[\s*([^,\[\]]+?)\s*,")


def _unannotated(ann: Any) -> Any:
    """``Annotated[int, ...]`` (Typer's, pydantic's) as ``int``, also as text: it took the
    text of ``--param a=x`` without a word, where ``a: int`` refuses it naming ``a``."""
    if typing.get_origin(ann) is typing.Annotated:
        return _unannotated(typing.get_args(ann)[0])
    if isinstance(ann, str) and (m := _ANNOTATED_TEXT.match(ann.strip().strip("'\""))):
        return m[1]
    return ann


class _NotJson(Exception):
    pass


def _no_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which JSON has not: such a VALUE is a string."""
    raise _NotJson(name)


def _finite(text: str) -> float:
    """A JSON number too large for a float (1e999) would be infinity: the VALUE is a string."""
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(text)
    return value


def check_params(params: object) -> dict[str, Any]:
    """``params=`` as keyword arguments of JSON values (a numpy scalar becomes the Python
    number it holds), or an OptionError."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise OptionError(
            f"params must be a dict of keyword arguments (name -> JSON value), got a "
            f"{type(params).__name__}: {params!r:.80}"
        )
    bad = [k for k in params if not (isinstance(k, str) and k.isidentifier())]
    if bad:
        raise OptionError(f"params keys must be Python names (keyword arguments), got {bad}")
    for key, value in params.items():
        if problem := key_not_text(value, f"params[{key!r}]"):
            raise OptionError(problem)
    checked = {key: check_json(value, f"params[{key!r}]") for key, value in params.items()}
    for key, value in checked.items():  # (the manifest keeps them at pipeline.params.<key>)
        if problem := manifest_text.unkept(value, f"params.{key}", depth=2):
            raise OptionError(
                f"params[{key!r}] cannot be kept in the snapshot's manifest, which no reader "
                f"would open then: {problem}; pass another value"
            )
    return checked


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (json.dumps' default), a configuration
    library's mapping or list (OmegaConf's ``DictConfig`` and ``ListConfig``: ``params=cfg.data``
    from Hydra) as a dict or list; an array is not taken: the function would get a list where
    it was given an array."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return list(value)
    hint = " (pass a list, arr.tolist(): the function receives JSON values)" * hasattr(
        value, "tolist"
    ) or " (pass its text, str(path): the function receives JSON values)" * isinstance(
        value, os.PathLike
    )
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable{hint}")


def check_json(value: Any, what: str) -> Any:
    """Return ``value`` as its JSON round trip, or explain why it cannot be one (text that
    is not valid Unicode too: the manifest is UTF-8, and no reader would take it)."""
    try:
        plain = json.loads(json.dumps(value, allow_nan=False, default=_plain))
    except (TypeError, ValueError) as err:
        hint = (
            " (NaN and infinities have none: pass a string such as 'inf' and convert it in "
            "the function)"
            if str(err).startswith("Out of range float")
            else ""
        )
        raise OptionError(
            f"{what} must be JSON (str, numbers, bools, lists, dicts; it is kept in the "
            f"manifest): {err}{hint}"
        ) from err
    bad = not_unicode(plain, what)
    if bad is not None:
        raise OptionError(
            f"{bad}, which is not valid Unicode text (a lone surrogate, e.g. from decoding "
            "bytes with errors='surrogateescape'); the manifest keeps params as UTF-8 JSON: "
            "pass valid text (bytes.decode(errors='replace'), or bytes.hex())"
        )
    return plain


def key_not_text(value: Any, where: str) -> str | None:
    """Where in ``value`` (``where``: the value itself) a mapping, at any depth, has a key
    that is not a str, said with what JSON makes of it; None if there is none. JSON keys are
    text: ``{0: "cat"}`` reached the function as ``{"0": "cat"}`` (a ``KeyError: 0`` in
    it), and ``{1: "a", "1": "b"}`` as one of them, silently."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    seen: set[int] = set()  # (a list holding itself: json's "circular reference" to say)
    while pending:  # (not recursive: deep nesting is json's to refuse)
        item, path = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return _key_said(key, where + "".join(f"[{k!r}]" for k in path))
                if _nested(inner):
                    pending.append((inner, (*path, key)))
        elif _nested(item):  # (a list, tuple or a config library's list)
            pending += [(x, (*path, i)) for i, x in enumerate(item) if _nested(x)]
    return None


def _nested(value: Any) -> bool:
    return isinstance(value, Mapping) or (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))
    )


def _key_said(key: Any, at: str) -> str | None:
    try:
        text = next(iter(json.loads(json.dumps({key: 0}))))
    except (TypeError, ValueError):
        return None  # (no JSON key at all: json names it)
    return (
        f"{at} has the key {key!r} (type {type(key).__name__}): JSON keys are text, so the "
        f"function would get {text!r}, and keys that read alike (1 and '1') would keep one "
        "value; give str keys ({str(k): v})"
    )


def not_unicode(value: Any, where: str) -> str | None:
    """Where in a JSON value (``where``: the value itself) the first str, key or value,
    is that UTF-8 cannot encode (a lone surrogate), and the str; None if there is none."""
    if isinstance(value, str):
        return None if is_unicode(value) else f"{where} holds {value!r}"
    if isinstance(value, dict):
        for key, item in value.items():
            if not is_unicode(key):
                return f"{where} has the key {key!r}"
            bad = not_unicode(item, f"{where}[{key!r}]")
            if bad is not None:
                return bad
    if isinstance(value, list):
        for i, item in enumerate(value):
            bad = not_unicode(item, f"{where}[{i}]")
            if bad is not None:
                return bad
    return None
