"""The fork server (:mod:`tests.forks`) gives what a command started anew gives:
the same exit status, stdout and stderr, for ``-m snapshot_cli``, ``-c CODE`` and a script;
SIGKILL as minus the signal; a hang as ``TimeoutExpired``; commands started together run
together; and a command left running by a failed test does not answer for the next."""

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
from tests import forks as forks_module
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


PY = """
import os, sys
print(__name__, sys.argv[1:], os.getcwd(), sys.path[0] in ("", os.getcwd()), sys.stdin.read())
print("to stderr", file=sys.stderr)
if sys.argv[1] == "fail":
    raise ValueError("as a user's code fails")
sys.exit(int(sys.argv[1]))
"""


def test_code_and_scripts_run_as_python_runs_them(tmp_path: Path, forks: Forks) -> None:
    script = tmp_path / "dir" / "script.py"
    script.parent.mkdir()
    script.write_text(PY.replace('sys.path[0] in ("", os.getcwd())', "sys.path[0]"))
    env = dict(os.environ)
    for argv in (["-c", PY, "0"], ["-c", PY, "3"], ["-c", PY, "fail"], [str(script), "0"],
                 [str(script), "fail"]):  # fmt: skip
        forked = forks.python(argv, tmp_path, env, 120)
        anew = subprocess.run(
            [sys.executable, *argv],
            cwd=tmp_path,
            env=env,
            text=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert (forked.returncode, forked.stdout) == (anew.returncode, anew.stdout), argv
        assert forked.stderr.splitlines()[-1] == anew.stderr.splitlines()[-1], argv
    assert forks.python(["-c", PY, "fail"], tmp_path, env, 120).stderr.endswith(
        "ValueError: as a user's code fails\n"
    )


def test_commands_started_together_run_together(tmp_path: Path, forks: Forks) -> None:
    """A reader and a writer of one FIFO: each blocks until the other runs (as two ranks of
    a job wait for each other), so run one after the other they would time out."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read = "import sys; print(open(sys.argv[1]).read())"
    write = "import sys; open(sys.argv[1], 'w').write('from the other')"
    env = dict(os.environ)
    reader = forks.start_python(["-c", read, str(fifo)], tmp_path, env, 60)
    writer = forks.start_python(["-c", write, str(fifo)], tmp_path, env, 60)
    assert writer().returncode == 0  # (answered in either order)
    assert reader().stdout == "from the other\n"


def test_a_server_preloads_what_it_is_given_with_its_environment(tmp_path: Path) -> None:
    code = "import os, sys; print('colorsys' in sys.modules, os.environ.get('SNAP_SERVER'))"
    preloaded = forks_module.shared(("colorsys",), {"SNAP_SERVER": "server"})
    assert preloaded is forks_module.shared(("colorsys",), {"SNAP_SERVER": "server"})
    said = preloaded.python(["-c", code], tmp_path, dict(os.environ), 120).stdout
    assert said == "True None\n"  # imported once; the command's own environment
    assert forks_module.shared().python(["-c", code], tmp_path, dict(os.environ), 120).stdout == (
        "False None\n"
    )
