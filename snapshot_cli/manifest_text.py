"""The text rules of a manifest (docs/format.md §3.1): every string, keys and values at any
depth, is Unicode without NUL, and no value lies more than MAX_DEPTH levels inside a
top-level value. Readers check them; a create checks what it is given to record."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .errors import ManifestError

MAX_DEPTH = 32  # levels a value may lie inside a top-level value of a manifest (that one: 0)


def text_problem(text: str) -> str | None:
    """What makes ``text`` no manifest's string: a lone surrogate (JSON "\\ud800"), a NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "text that is not valid Unicode (a lone surrogate)"
    return "text with a NUL character" if "\x00" in text else None


def check_text(value: Any, where: str, key: str, depth: int = 0) -> None:
    """Every string in a manifest, keys and values at any depth, known keys or not (``extra``
    too), is Unicode text without NUL, and nesting is bounded (docs/format.md §3.1): a
    ManifestError naming the key path (``extra.a[2]``)."""
    if depth > MAX_DEPTH:  # (a top-level value: 0; an empty list at 32 was always read)
        raise ManifestError(f"{where}: {key!r} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str) and (problem := text_problem(value)):
        raise ManifestError(f"{where}: {key!r} holds {problem}")
    if isinstance(value, dict):
        for k, v in value.items():
            if problem := text_problem(k):
                at = f"in {key!r}" if key else "at the top level"
                raise ManifestError(f"{where}: the key {k!r:.40} {at} holds {problem}")
            check_text(v, where, f"{key}.{k}" if key else k, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_text(v, where, f"{key}[{i}]", depth + 1)


def unkept(value: Any, key: str, depth: int) -> str | None:
    """Why a manifest could not keep ``value`` at ``key`` (``depth`` levels inside a
    top-level value): text with a NUL or a lone surrogate, nesting past MAX_DEPTH; or None.
    What a create is given to record (``params=``) is asked before any work."""
    try:
        check_text(value, "", key, depth)
    except ManifestError as err:
        return str(err).removeprefix(": ")
    return None


def names(t: pa.Schema | pa.DataType) -> list[str]:
    """Every field name of a schema or type, nested ones too, each decoded: a name that is not
    UTF-8 (a damaged schema) is a UnicodeDecodeError (a ValueError) here, not where it is used
    (pyarrow decodes names only when asked; its text of a schema replaces bad bytes)."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    fields = list(t) if isinstance(t, pa.Schema) else [t.field(i) for i in range(t.num_fields)]
    return [n for f in fields for n in (f.name, *names(f.type))]
