"""Text on the command line that Python could not decode: whether a string is valid Unicode
(no lone surrogate, which is how Python holds an argument's bytes its codec could not
decode), and what to do about one, which depends on the locale: in a UTF-8 locale the bytes
are no UTF-8 and no locale can help (the advice to set one did not); in another, a UTF-8
locale may decode them."""

from __future__ import annotations

import sys


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate: UTF-8, JSON and Arrow take it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def not_text(shown: str, kept: str) -> str:
    """Why ``shown`` (an argument, as said) cannot be used where ``kept`` (what it becomes,
    plural: "params", "column names") is UTF-8, and what to do."""
    codec = sys.getfilesystemencoding()
    if codec.lower().replace("-", "").replace("_", "") == "utf8":
        return (
            f"{shown} is not valid UTF-8 (bytes that are no text, and {kept} are UTF-8 text): "
            "give it as UTF-8 text"
        )
    return (
        f"{shown} is not valid text in this locale (Python decoded the command line as "
        f"{codec}, and {kept} are UTF-8): set a UTF-8 locale (export LANG=C.UTF-8) or "
        "PYTHONUTF8=1 and run again"
    )
