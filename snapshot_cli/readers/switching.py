"""The interpreter's switch interval while a loader's pass runs: 1 ms instead of CPython's 5.

A thread that wants the GIL while another runs Python gets it only when that one lets go, and
a thread running pure Python lets go once the switch interval has passed since the request
(``sys.getswitchinterval()``, 5 ms by default). A training step that holds the GIL (kernel
launches, logging, optimizer code) therefore keeps the loader's serving and gather threads
waiting up to 5 ms at each of their few takes of it per group of batches, even though they
copy and decode without it: with a consumer spending twice the loader's own CPU per batch in
pure Python, the loop waited 8.7-11.3 % of an uncompressed epoch for data at 5 ms, and
2.5-3.7 % at 1 ms (lz4: 2.4 against 2.2 %); the bare loader ran as fast either way
(``benchmarks/replay.py``'s busy step; README, Performance).

So while any pass runs, the interval is 1 ms, and when the last one ends it is set back. Only
CPython's default is lowered: an interval the program set itself (any other value) is left
as it is, and one changed while a pass ran is not set back. A pass that starts while the
interval is the default lowers it whatever other passes run (one started under the
program's own interval, and kept, does not stop later ones). The lock is reentrant: the
garbage collector may end another pass (its ``leave``) inside ``enter``; a forked child gets
a new one (a thread of the parent may have held it at the fork). Pure bookkeeping.

Only passes over local storage lower it: a remote snapshot's fetches run Python in several
threads (gcsfs's event loop, the fetch pool), for which more frequent switches are more
overhead, and the gain was measured on local disk only (the storage backends' tests ran
258 s with it left alone against 325 s lowered, in one run each: not measured further).
"""

from __future__ import annotations

import os
import sys
import threading

DEFAULT = 0.005  # CPython's switch interval (seconds), unless the program set another
LOWERED = 0.001

_lock = threading.RLock()
_passes = 0  # passes running in this process
_lowered = False  # whether this module set the interval now in force


def _new_lock() -> None:
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def enter(local: bool = True) -> None:
    """A pass starts: lower the switch interval if it is CPython's default (a pass over
    local storage only: see the module's docstring)."""
    global _passes, _lowered
    if not local:
        return
    with _lock:
        _passes += 1
        if sys.getswitchinterval() == DEFAULT:
            sys.setswitchinterval(LOWERED)
            _lowered = True


def leave(local: bool = True) -> None:
    """A pass ended: with the last one, set back the interval this module lowered (unless
    something set another since); ``local`` as given to :func:`enter`."""
    global _passes, _lowered
    if not local:
        return
    with _lock:
        _passes = max(0, _passes - 1)
        if _passes == 0 and _lowered:
            _lowered = False
            if sys.getswitchinterval() == LOWERED:
                sys.setswitchinterval(DEFAULT)
