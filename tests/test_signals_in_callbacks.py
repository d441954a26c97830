"""A Ctrl-C whose handler runs inside a garbage collector's callback (a weakref callback, a
``__del__``): Python cannot raise it there and printed "Exception ignored in: <function
WeakSet.__init__.<locals>._remove ...> ... KeyboardInterrupt" with a traceback, and the
interrupt was lost (a new-user probe: ``snap bench`` under ``timeout -s INT``, 2 in 200).
Now it is said by nothing there and kept, and :func:`signals.raise_received` raises it;
any other exception so swallowed is printed as before. A real signal, in a real process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, wait_for

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


@pytest.mark.parametrize("resumes", [True, False])
def test_a_stop_given_up_on_says_a_create_resumes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], resumes: bool
) -> None:
    """A create stopped while its threads waited on storage gone silent ended with "exiting
    without waiting for them" alone, not README's "run the same command again to resume"
    (a probe: it did resume)."""
    import os
    import signal
    import threading

    from snapshot_cli import signals

    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)  # (the watch ends the process so)
    signals._stop_within(signal.SIGINT, threading.Event(), grace=0.0, resumes=resumes)
    wait_for(lambda: bool(exits), "the watch to give up")
    said = capsys.readouterr().err.strip()
    assert exits == [128 + signal.SIGINT]
    assert said.startswith("snap: interrupted (SIGINT), and still stopping 0 s later")
    assert said.endswith("; run the same command again to resume") == resumes, said
