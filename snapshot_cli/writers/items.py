"""Items as inputs: JSON values given as a list (``inputs=[...]``) or returned by the
``--inputs-from`` function, checked and put in a stable order (pure but for that call).

Each item is one call of the pipeline, compared by value for the fingerprint: an item that is
not JSON is refused naming its index, a set's items are sorted by their JSON text, and a
function that cannot be called with no arguments, or a file of items given in its place, is
told what to give.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..console import named
from ..errors import OptionError, PipelineLoadError
from . import foreign, importing, params


def checked(values: list[Any], given: Any, source: str | None = None) -> list[Any]:
    """``values`` (the elements of ``given``) as JSON items, in a stable order."""
    return _ordered(as_items(values, source), given)


def as_items(values: Iterable[Any], source: str | None = None) -> list[Any]:
    """Check each value is JSON (numpy scalars become Python ones); name the first that is not
    (``inputs[i]``, or item i of what the ``source`` function returned). All in one
    ``json`` call each way (1M items: 0.8 s, against 6 s one by one); a value that is not
    JSON is then found one by one, to be named."""
    values = list(values)
    try:
        with _collector_paused():  # 1M dicts: 1.2 s, against 3.8 s with the collector
            plain = list(json.loads(json.dumps(values, allow_nan=False, default=_numpy_value)))
    except (TypeError, ValueError) as err:
        for i, value in enumerate(values):
            _check_one(i, value, source)
        raise OptionError(f"inputs are not JSON values ({err})") from err  # (each one was)
    try:  # (the same values as given: no key made text on the way; else look for one)
        same = bool(plain == values)
    except (TypeError, ValueError):  # (an array compared: ambiguous)
        same = False
    if not same:
        for i, value in enumerate(values):
            if problem := params.key_not_text(value, f"inputs[{i}]" if source is None else "it"):
                of = f" (item {i} of what {_said(source)} returned)" if source else ""
                raise OptionError(problem + of)
    return plain


def _check_one(i: int, value: Any, source: str | None) -> None:
    """An OptionError naming item ``i`` if it is not a JSON value."""
    try:
        json.dumps(value, allow_nan=False, default=_numpy_value)
    except (TypeError, ValueError) as err:
        kind = type(value).__name__
        nan = isinstance(value, float) and not math.isfinite(value)
        what = f"inputs[{i}]" if source is None else f"item {i} of what {_said(source)} returned"
        path = ""
        if isinstance(value, os.PathLike):
            path = (
                " (a list of paths must hold paths and globs only)"
                if source is None
                else " (return files' paths from it as str, or pass files with "
                f"{named('--input', 'inputs=')}, which fingerprints their contents)"
            )
        raise OptionError(
            f"{what} is {'not finite' if nan else f'a {kind}'} ({value!r:.80}): items "
            "must be JSON values (str, int, float, bool, None, and lists and dicts of them)"
            f"{path} ({err})"
        ) from err


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while JSON makes millions of objects that hold
    no cycles: its passes over every object made so far are most of the time otherwise."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _numpy_value(value: Any) -> Any:
    """A numpy scalar or array at any depth of an item (``{"id": np.int64(3)}``, as
    ``[{"id": i} for i in np.arange(n)]`` makes) → its Python value; anything else is not
    JSON."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def refuse_a_table(value: Any, what: str) -> None:
    """A DataFrame or Arrow table given as the inputs: iterated, it gives its column names
    (which were taken as file patterns). Say how to give its rows or a column of it."""
    if not foreign.is_table(value):
        return
    raise OptionError(
        f"{what} is a {type(value).__name__} (a table): give its rows as items "
        "(df.to_dict('records') in pandas, df.to_dicts() in polars, table.to_pylist() in "
        "pyarrow), or the column of file paths (list(df['path']))"
    )


LIST_FILES = (".json", ".jsonl", ".txt", ".csv", ".tsv", ".lst", ".list", ".yaml", ".yml")


def _refuse_a_list_file(spec: str) -> None:
    """``--inputs-from items.json`` (a file of inputs, as tar's --files-from takes): say how
    to give such a list, which --inputs-from takes as the function that returns it."""
    ext = os.path.splitext(spec)[1]
    remote = "://" in spec  # gs://bucket/items.json: a URL, not file.py:function
    if (":" in spec and not remote) or not (
        ext.lower() in LIST_FILES or (ext != ".py" and not remote and os.path.isfile(spec))
    ):
        return
    opener = "fsspec" if remote else "pathlib"
    text = f"fsspec.open({spec!r}, 'r').open().read()" if remote else (
        f"pathlib.Path({spec!r}).read_text()")  # fmt: skip
    read = {".json": f"json.loads({text})",
            ".jsonl": f"[json.loads(line) for line in {text}.splitlines() if line.strip()]",
            }.get(ext.lower(), f"{text}.split()")  # fmt: skip
    imports = f"import json, {opener}" if "json" in read else f"import {opener}"
    give = named("--inputs-from items.py:items", "inputs_from='items.py:items'")
    files = named("with --input, which may be repeated", "in inputs= (a list of them)")
    raise PipelineLoadError(
        f"{named('--inputs-from', 'inputs_from=')} takes a function that returns the inputs "
        f"(items.py:items), not a file of them: put `def items(): {imports}; return {read}` "
        f"in items.py and give {give} (its items are compared by value); for files, give "
        f"each path or pattern {files}"
    )


def from_function(inputs_from: str | Callable[[], Any]) -> tuple[list[Any], str]:
    """The items the ``inputs_from`` function (or spec) returns, checked, and its name."""
    if isinstance(inputs_from, str):
        _refuse_a_list_file(inputs_from)  # (a Python caller is told inputs_from, not the flag)
        fn = importing.load_function(inputs_from, named("--inputs-from", "inputs_from"))
        name = inputs_from
    elif callable(inputs_from):
        fn, name = inputs_from, getattr(inputs_from, "__qualname__", repr(inputs_from))
    else:
        raise OptionError(
            f"inputs_from must be a function or 'module:function', got {inputs_from!r:.80}"
        )
    _check_takes_nothing(fn, name)
    said = _said(name)
    raw = _called(fn, said)
    if isinstance(raw, np.ndarray):
        raw = raw.tolist()
    refuse_a_table(raw, f"what {said} returned")
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Iterable):
        raise OptionError(
            f"{said} returned a value of type {type(raw).__name__}, not a list of items"
        )
    values = _called(lambda: list(raw), said)  # (a generator's own error comes here)
    if not values:
        raise OptionError(f"{said} returned no items: nothing to preprocess")
    return checked(values, raw, name), name


def _called(fn: Callable[[], Any], said: str) -> Any:
    """``fn()``; what it raises a PipelineLoadError with the user's traceback. So is a
    sys.exit() in it (argparse's parse_args()), which ended the command silently with its
    code (0: "success", with no snapshot), and an error a generator raises once it has
    yielded, which was called a bug in snap."""
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except BaseException as err:
        hint = (
            "\nit exits when called (sys.exit(), or argparse's parse_args()): return the "
            "inputs instead; a command line's values go to the pipeline as --param"
            if isinstance(err, SystemExit) else ""
        )  # fmt: skip
        raise PipelineLoadError(
            f"{said} raised:\n{importing.format_user_traceback(err)}{hint}"
        ) from err


def _said(name: str) -> str:
    """The ``inputs_from`` function called ``name``, as its caller gave it."""
    return named(f"--inputs-from {name!r}", f"inputs_from={name!r}")


def _check_takes_nothing(fn: Callable[..., Any], name: str) -> None:
    """--inputs-from is called with no arguments: one that needs some (the pipeline given by
    mistake) is refused, with its signature."""
    try:
        signature = inspect.signature(fn)
        signature.bind()
    except ValueError:  # no signature to read (a builtin): let the call tell
        return
    except TypeError as err:
        raise OptionError(
            f"{_said(name)} is called with no arguments and returns the list of inputs, but "
            f"{getattr(fn, '__name__', 'it')}{signature} cannot be ({err}); give a "
            "function such as `def items(): return [...]`"
        ) from None


def _ordered(items: list[Any], given: Any) -> list[Any]:
    """Items of a set in the order of their JSON text: a set's own order differs from one
    process to the next (str hashes are salted), which would change the snapshot's record
    order and its fingerprint, so that it was computed again on every run; a sequence keeps
    the order it has."""
    if not isinstance(given, (set, frozenset)):
        return items
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
