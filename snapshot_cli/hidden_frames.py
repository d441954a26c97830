"""Snap's own frames left out of a notebook's traceback of snap's errors.

A pipeline that raised in a notebook showed 8-10 of snap's frames, each with its lines of
context (about 70 lines), above the error that says what to do: its message names the cell
and line of the user's function already. IPython skips a frame whose locals hold a true
``__tracebackhide__`` (it says "[... skipping hidden N frame]"; the last frame, where the
error was raised, is kept), as pytest does. The functions on the way from snap's API to such
an error set ``__tracebackhide__ = HIDDEN``:

- true while a :class:`SnapError` is handled (IPython formats a traceback inside its
  ``except``): an error of snap's own making, whose message is the whole story. Any other
  exception (a bug of snap's, a KeyboardInterrupt) keeps every frame;
- for pytest (it calls a callable one with the exception), never: snap's own frames stay in
  a failing test's report, where they are what is looked for.

Plain Python (a script) ignores the name and prints every frame, as before.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import SnapError

__all__ = ["HIDDEN"]


class _WhileSnapErrorHandled:
    def __bool__(self) -> bool:
        return isinstance(sys.exc_info()[1], SnapError)

    def __call__(self, excinfo: Any) -> bool:  # (pytest's ExceptionInfo)
        return False

    def __repr__(self) -> str:
        return "<snap's frames hidden while a SnapError is shown>"


HIDDEN = _WhileSnapErrorHandled()
