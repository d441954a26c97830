"""A Ctrl-C or SIGTERM that lands in the commit (``tidy.committed``: the commit, the tidying
after it, the lease's release) ends nothing half-way: the create ends as made, exit 0, with
a warning that says the snapshot is committed. One raised in the commit's last steps, once
manifest.json was in place, said "interrupted; run the same command again to resume" of a
committed snapshot, exit 130 and no result (found by a probe of `timeout -s INT`).

Real signals (``signal.pthread_kill`` of this thread), sent at every n-th call of snap's code
from the commit on (a share of them per run, as :mod:`tests.interrupts` sweeps)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.signals import held
from tests.interrupts import OFFSET, SNAP_CODE, calls


class SignalInCommit:
    """A trace sending ``signum`` to this process at the ``k``-th call of snap's code from
    the start of the commit (``commit.commit``, called with the signals held: one before is
    an interrupt of a create that committed nothing, said as such) to the command's end."""

    def __init__(self, k: int, signum: int, commit_only: bool = False) -> None:
        self.k, self.signum, self.calls, self.inside, self.where = k, signum, 0, False, ""
        self.commit_only = commit_only  # (to the end of tidy.committed only)

    def __call__(self, frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if event != "call" or self.where or not code.co_filename.startswith(SNAP_CODE):
            return None
        if code.co_name == "_say_after_work":  # (the command's end: its handlers go next)
            self.where = "-"
            return None
        if (
            self.commit_only
            and code.co_name == "committed"
            and code.co_filename.endswith("tidy.py")
        ):
            return self._until_returned
        if not self.inside:
            self.inside = code.co_name == "commit" and code.co_filename.endswith("commit.py")
            if not self.inside:
                return None
        self.calls += 1
        if self.calls == self.k:
            self.where = f"{code.co_name} ({code.co_filename}), call {self.k} ({OFFSET=})"
            # (to this thread: os.kill lets the kernel pick any thread of the process, whose
            # handler, under load, ran later, past the call: seen as no warning in CI)
            signal.pthread_kill(threading.get_ident(), self.signum)
        return None

    def _until_returned(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "return" and not self.where:
            self.where = "-"  # (committed() returned: the sweep ends there)
        return self._until_returned


# A run tries about a dozen of the commit's calls (~2,700 for a first commit, ~6,700 for
# one that replaces a version: reading and archiving manifests, syncing, the lease): every
# n-th from its offset, so that runs together try them all.
EVERY = {"first": 223, "replacing": 557}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["first", "replacing"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_in_the_commit_ends_the_create_as_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int, which: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipe.py").write_text("def run(x):\n    yield {'x': x}\n")
    (tmp_path / "its.py").write_text("def items():\n    return list(range(12))\n")
    tried = 0
    for k in calls(EVERY[which]):
        out = f"out{k}"
        args = ["create", "pipe.py:run", out, "--inputs-from", "its.py:items", "--workers",
                "0", "--json"]  # fmt: skip
        if which == "replacing":
            assert CliRunner().invoke(cli, args).exit_code == 0
            args.append("--overwrite")
        trace = SignalInCommit(k, signum)
        sys.settrace(trace)
        try:
            result = CliRunner().invoke(cli, args)
        finally:
            sys.settrace(None)
        version = 2 if which == "replacing" else 1  # (committed, the signal or not)
        assert result.exit_code == 0, (trace.where, result.stderr)
        assert json.loads(result.stdout)["version"] == version, trace.where
        made = snap.open(out)
        assert made.version == version and made.num_records == 12, trace.where
        runs = [p.name for p in (tmp_path / out / "_runs").iterdir()]
        assert all(n.startswith("lease-") for n in runs), (trace.where, runs)  # (tidied)
        if trace.where in ("", "-"):
            break  # (past the command's last call)
        tried += 1
        said = "came as the work was committed, which it did not stop: it is done"
        assert result.stderr.count(said) == 1, (trace.where, result.stderr)  # (said once)
        assert "run the same command again" not in result.stderr
    assert tried >= 5  # (the sweep reached the commit's calls)


@pytest.mark.slow
def test_a_ctrl_c_in_the_commit_of_snap_create_in_python_returns_as_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``snap.create`` in a script or a notebook (Python's own Ctrl-C handler): a Ctrl-C in
    the commit and its tidying (``tidy.committed``) returns the committed snapshot and logs a
    warning, not a KeyboardInterrupt out of a done create. (After it, until create returns,
    a few calls of Python are not held: there one still raises.)"""

    def run(x: int) -> Any:
        yield {"x": x}

    # (Python's own Ctrl-C handler, as a script or a notebook has it: a pytest-xdist worker
    # runs with the system's default, which ends the process, as held() then does too)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        tried = 0
        for k in calls(EVERY["replacing"]):
            out = str(tmp_path / f"out{k}")
            snap.create(run, out, inputs=list(range(12)), workers=0)
            trace = SignalInCommit(k, signal.SIGINT, commit_only=True)
            caplog.clear()
            sys.settrace(trace)
            try:
                info = snap.create(run, out, inputs=list(range(12)), workers=0, overwrite=True)
            finally:
                sys.settrace(None)
            assert info.version == 2 and snap.open(out).version == 2, trace.where
            if trace.where in ("", "-"):
                break
            tried += 1
            said = "came during the commit, which it did not stop: the snapshot is committed"
            assert f"{said} (version 2)" in caplog.text, (trace.where, caplog.text)
    finally:
        signal.signal(signal.SIGINT, before)
    assert tried >= 5


def test_a_second_signal_is_taken_as_before_and_a_default_one_is_delivered_after() -> None:
    """held(): the first is noted; a second raises as the handler before does (a commit
    that hangs can still be stopped); a noted SIGTERM whose handler was the default ends the
    process after the block, as it would have (in a subprocess)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # (as test_a_ctrl_c...)
    try:
        with pytest.raises(KeyboardInterrupt), held() as noted:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # (this thread's)
            assert noted == [signal.SIGINT]
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            pytest.fail("the second Ctrl-C was not raised")  # (the loop of the eval breaker)
    finally:
        signal.signal(signal.SIGINT, before)
    script = (
        "import os, signal, sys\n"
        "from snapshot_cli.signals import held\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "with held() as noted:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('step done', noted, flush=True)\n"
        "print('not reached', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == -signal.SIGTERM
    assert done.stdout == f"step done [{int(signal.SIGTERM)}]\n"
