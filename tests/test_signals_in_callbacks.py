"""A Ctrl-C whose handler runs inside a garbage collector's callback (a weakref callback, a
``__del__``): Python cannot raise it there and printed "Exception ignored in: <function
WeakSet.__init__.<locals>._remove ...> ... KeyboardInterrupt" with a traceback, and the
interrupt was lost (a new-user probe: ``snap bench`` under ``timeout -s INT``, 2 in 200).
Now it is said by nothing there and kept, and :func:`signals.raise_received` raises it;
any other exception so swallowed is printed as before. A real signal, in a real process."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

CODE = r"""
import os, signal, weakref
from snapshot_cli import signals

class Thing:
    pass

class Bad:
    def __del__(self):
        raise ValueError("a __del__ of the user's own")

def callback(ref):
    os.kill(os.getpid(), signal.SIGINT)
    total = 0
    for i in range(10000):  # bytecodes: the handler runs here, inside the callback
        total += i

with signals.termination_as_interrupt():
    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    print("went on after the callback", flush=True)
    bad = Bad()
    del bad
    try:
        signals.raise_received()
    except KeyboardInterrupt:
        print("raised where it is checked", flush=True)
"""


def test_a_ctrl_c_taken_by_a_callback_is_kept_and_raised_where_checked() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["went on after the callback", "raised where it is checked"]
    assert "KeyboardInterrupt" not in done.stderr, done.stderr
    # the user's own __del__ error is still said
    assert "Exception ignored" in done.stderr and "a __del__ of the user's own" in done.stderr
