"""A process forked while a command runs takes SIGTERM as it did before the command, even
one signalled before snap's at-fork hook gave it the handlers from before back.

A pipeline's ``multiprocessing`` Pool (fork start) ended by ``with`` sends SIGTERM to any
worker still starting; on a loaded machine one could get it while the at-fork hook ran: the
command's handler raised ``Terminated`` there ("Exception ignored in: <function _forked>"),
the worker lived on, and ``Pool.terminate()`` waited for it: the create hung (seen in
``make test``, ``test_a_forked_pool_of_the_pipeline_ends_as_python_ends_it``, 2 runs in 40
under load).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

FORK_SIGNALLED_AT_ONCE = """
import os, signal, sys

# the default handler, as a shell gives it, also where this test runs under nohup (SIGHUP
# ignored: snap leaves an ignored signal ignored, and the child would rightly live on)
signal.signal(signal.{sig}, signal.SIG_DFL)

# registered before snap's hook, so it runs first in the child: the child is signalled
# before snap's hook gave it the handlers from before back
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.{sig}))

from snapshot_cli.signals import termination_as_interrupt

{before}
with termination_as_interrupt():
    pid = os.fork()
    if pid == 0:
        print("the child lived on", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(status), flush=True)
"""


def run(sig: str, before: str = "") -> subprocess.CompletedProcess[str]:
    script = FORK_SIGNALLED_AT_ONCE.format(sig=sig, before=textwrap.dedent(before))
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_child_signalled_before_the_hook_ends_as_the_default_handler_ends_it(
    sig: str,
) -> None:
    res = run(sig)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"exit -{getattr(signal, sig).value}"], res.stdout
    assert "Terminated" not in res.stderr and "Exception ignored" not in res.stderr


def test_a_child_signalled_before_the_hook_runs_the_handler_from_before() -> None:
    """A handler of the program's own, set before the command, is the one the child runs."""
    before = """
    def mine(signum, frame):
        print("mine", signum, flush=True)
        os._exit(3)

    signal.signal(signal.SIGTERM, mine)
    """
    res = run("SIGTERM", before)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"mine {signal.SIGTERM.value}", "exit 3"], res.stdout
    assert "Terminated" not in res.stderr and "Exception ignored" not in res.stderr
