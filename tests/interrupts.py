"""A KeyboardInterrupt raised at the k-th call of snap's own code, as a Ctrl-C may land.

Python raises a signal's KeyboardInterrupt in the main thread where it checks for signals: at
the start of a Python function, among other points (it does not check at every line: a trace
raising at a ``with`` statement's exit would leave its lock held, which no signal can). The
tests that use it raise one at each such point of an operation in turn, for every k until
the operation calls fewer functions than k, and check what a user relies on after Ctrl-C.

A sweep too long for one run of the suite tries a share of the calls (:func:`calls`): every
n-th from an offset drawn for the run, so that runs together try every call; each point
names the offset, and ``SNAP_INTERRUPT_OFFSET=k`` runs that share again."""

from __future__ import annotations

import itertools
import os
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TypeVar

import snapshot_cli

SNAP_CODE = str(Path(snapshot_cli.__file__).parent)
OFFSET = int(os.environ.get("SNAP_INTERRUPT_OFFSET", random.randrange(1 << 16)))
T = TypeVar("T")


class InterruptAt:
    """A trace function raising KeyboardInterrupt (or ``raises``, a subclass: the CLI's
    SIGTERM) at the ``k``-th call of snap's code (of the files under it whose path ends with
    one of ``only``, if given; not of the functions named in ``skip``)."""

    def __init__(
        self,
        k: int,
        only: tuple[str, ...] = (),
        raises: type[KeyboardInterrupt] = KeyboardInterrupt,
        skip: tuple[str, ...] = (),
    ) -> None:
        self.k, self.only, self.calls, self.where, self.raises = k, only, 0, "", raises
        self.skip = skip  # functions (code names) not counted

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        name = frame.f_code.co_filename
        if event != "call" or self.where or not name.startswith(SNAP_CODE):
            return None
        if self.only and not name.endswith(self.only) or frame.f_code.co_name in self.skip:
            return None
        self.calls += 1
        if self.calls == self.k:
            self.where = (
                f"{frame.f_code.co_name} ({name}:{frame.f_lineno}), call {self.k}"
                f" (SNAP_INTERRUPT_OFFSET={OFFSET})"
            )
            raise self.raises
        return None  # no line events in the frame


def interrupted(call: Callable[[], T], trace: InterruptAt) -> T | None:
    """``call()`` under ``trace``: its result, or None if the interrupt came."""
    sys.settrace(trace)
    try:
        return call()
    except KeyboardInterrupt:
        if not trace.where:
            raise
        return None
    finally:
        sys.settrace(None)


def calls(every: int) -> Iterator[int]:
    """The k's a sweep tries in this run: every ``every``-th call from the run's offset (1
    to ``every``); the sweep ends at the first k past the operation's last call."""
    return itertools.count(OFFSET % every + 1, every)
