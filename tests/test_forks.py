"""The fork server (:mod:`tests.forks`) gives what a command started anew gives:
the same exit status, stdout and stderr; SIGKILL as minus the signal; a hang as
``TimeoutExpired``; and a command left running by a failed test does not answer for the
next."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from tests.forks import Forks
from tests.reliability import faultfs
from tests.reliability.faultfs import Plan


def fresh(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshot_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def timeless(text: str) -> str:
    """``text`` with its decimal numbers (durations: "0.04 s", "seconds": 0.038) masked."""
    return re.sub(r"\d+\.\d+", "#", text)


def test_a_forked_command_says_and_exits_as_one_started_anew(tmp_path: Path, forks: Forks) -> None:
    snap.create(lambda i: {"x": np.full(3, i)}, tmp_path / "s", inputs=[1, 2], workers=0,
                progress=False)  # fmt: skip
    env = dict(os.environ)
    for args in (["verify", "s", "--json"], ["inspect", "s"], ["inspect", "nowhere"],
                 ["head", "s", "--bogus"], ["gc", "s", "--dry-run"]):  # fmt: skip
        forked, anew = forks.run(args, tmp_path, env, 120), fresh(args, tmp_path, env)
        said = [(r.returncode, timeless(r.stdout), timeless(r.stderr)) for r in (forked, anew)]
        assert said[0] == said[1], args
    assert {forks.run(a, tmp_path, env, 120).returncode for a in (["inspect", "s"], ["x"])} == {
        0, 2
    }  # fmt: skip
    # stdin reads as /dev/null, as subprocess.run's does with stdin=DEVNULL (a user's code)
    (tmp_path / "pipe.py").write_text(
        "import sys\ndef preprocess(i):\n    yield {'i': i}\n"
        "def items():\n    return [len(sys.stdin.read())]\n"
    )
    args = ["create", "pipe.py:preprocess", "t", "--inputs-from", "pipe.py:items"]
    forked = forks.run([*args, "--workers", "0"], tmp_path, env, 120)
    assert forked.returncode == 0, forked.stderr
    assert [b["i"].tolist() for b in snap.open(tmp_path / "t").loader(4)] == [[0]]


def test_a_killed_command_is_minus_sigkill_and_the_next_one_runs(
    tmp_path: Path, forks: Forks
) -> None:
    faultfs.register()
    (tmp_path / "pipe.py").write_text(
        "def preprocess(i):\n    yield {'i': i}\ndef items():\n    return [1, 2, 3]\n"
    )
    plan = Plan("kill", str(tmp_path / "plan"), ops=("write",), after_calls=2, times=1)
    args = ["create", "pipe.py:preprocess", faultfs.url(tmp_path / "out"), "--inputs-from",
            "pipe.py:items", "--workers", "0"]  # fmt: skip
    killed = forks.run(args, tmp_path, faultfs.subprocess_env(tmp_path, plan), 120)
    assert killed.returncode == -signal.SIGKILL and plan.fired()
    assert plan.fired()[0]["pid"] != os.getpid()
    again = forks.run(args, tmp_path, faultfs.subprocess_env(tmp_path, None), 120)
    assert again.returncode == 0, again.stderr
    assert snap.open(faultfs.url(tmp_path / "out")).num_records == 3


def test_a_hang_is_a_timeout_and_a_command_never_waited_for_is_not_the_next_ones(
    tmp_path: Path, forks: Forks
) -> None:
    (tmp_path / "pipe.py").write_text(
        "import time\ndef preprocess(i):\n    time.sleep(600)\n    yield {'i': i}\n"
        "def items():\n    return [1]\n"
    )
    args = ["create", "pipe.py:preprocess", "out", "--inputs-from", "pipe.py:items", "--workers",
            "0"]  # fmt: skip
    with pytest.raises(subprocess.TimeoutExpired):
        forks.run(args, tmp_path, dict(os.environ), 1)
    forks.start(["inspect", "nowhere"], tmp_path, dict(os.environ), 120)  # (never waited for)
    assert forks.run(["--version"], tmp_path, dict(os.environ), 120).returncode == 0
