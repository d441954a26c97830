"""A record's or Batch's column names, checked (pure: messages only): unique, non-empty,
printable and Unicode; and what differs between two records' keys."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..arg_text import is_unicode
from ..errors import RecordError


def different_columns(before: Iterable[Any], now: Iterable[Any]) -> str:
    """``has different columns than ...``: which are missing and which are new, by name."""
    before, now = list(before), list(now)
    missing = [k for k in before if k not in now]
    extra = [k for k in now if k not in before]
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    parts += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
    return (
        f"has different columns than the records before it ({'; '.join(parts)}); "
        "every record must have the same keys"
    )


def check_names(names: Sequence[str]) -> None:
    """The first record or batch's column names are usable: unique, non-empty, printable."""
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RecordError(
            f"the column names {twice} are given more than once in {list(names)}; a column "
            "needs a name of its own: rename them"
        )
    if "" in names:  # (no columns=, --columns or to_tf() could name it)
        raise RecordError(f"a column name is empty ('') in {list(names)}; name it")
    for name in names:  # a CSV header's "\r", an escape: none meant, all shown
        if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):
            raise RecordError(
                f"column name {name!r} holds a control character; strip it "
                "(df.columns.str.strip() for a CSV's line ends)"
            )
        if not name.isascii() and not is_unicode(name):  # (Arrow keeps names as UTF-8)
            raise RecordError(
                f"column name {name!r} is not valid Unicode text (a lone surrogate, e.g. from "
                "decoding bytes with errors='surrogateescape'); rename it"
            )
