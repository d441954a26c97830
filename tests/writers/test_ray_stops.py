"""A stop signal that arrives while the driver is inside one of Ray's calls (see
writers/ray_session.py): Ctrl-C inside ``ray.init`` building its core worker, or inside
``ray.get``, raised KeyboardInterrupt in Ray's Cython code, and the driver died at exit with a
segmentation fault (exit 139) or an abort (134), Ray's "*** SIGTERM received" lines on its
stderr, Ray's processes left behind.

Fault injection places the signal: the driver (a real ``snap create`` process) wraps one of
Ray's functions so that its first call sends the signal to the driver itself and then goes
on into Ray. Whichever thread makes that call must never see the signal raised there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.writers.test_processes import make_inputs

pytestmark = pytest.mark.slow

# argv: the Ray function to wrap, the signal, a file to write if it was raised inside Ray's
# call, then snap's arguments
DRIVER = """
import os, signal, sys, threading
import ray
from snapshot_cli import cli

name, sig, raised_in_ray, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
real = getattr(ray, name)
sent = []

def wrapped(*a, **k):
    if sent:
        return real(*a, **k)
    sent.append(sig)
    try:  # (a handler runs in the main thread, between two bytecodes: at once, if here)
        os.kill(os.getpid(), sig)
        for _ in range(100_000):  # bytecodes, as Ray's code runs them between native calls
            pass
        return real(*a, **k)
    except BaseException as err:
        with open(raised_in_ray, "w") as f:
            f.write(f"{type(err).__name__} in {threading.current_thread().name}")
        raise

setattr(ray, name, wrapped)
sys.argv[:] = ["snap", *args]
cli.main()
"""

PIPE = "def preprocess(path):\n    yield {'x': int(open(path).read())}\n"


@pytest.mark.parametrize(
    ("call", "sig"),
    [("init", signal.SIGINT), ("init", signal.SIGTERM), ("get", signal.SIGINT),
     ("wait", signal.SIGTERM), ("put", signal.SIGINT)],
)  # fmt: skip
def test_a_stop_signal_inside_a_ray_call_stops_the_create_cleanly(
    ray_cluster: str, tmp_path: Path, call: str, sig: signal.Signals
) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    make_inputs(tmp_path / "in", 4)
    out, raised = tmp_path / "snap", tmp_path / "raised-in-ray"
    cmd = [sys.executable, "-c", DRIVER, call, str(int(sig)), str(raised), "create",
           f"{tmp_path / 'pipe.py'}:preprocess", str(out), "--input",
           str(tmp_path / "in" / "*.txt"), "--executor", "ray",
           "--inputs-per-task", "1"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # (the job's copy of the code goes there)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert not raised.exists(), raised.read_text()
    said = "interrupted" if sig == signal.SIGINT else "terminated (SIGTERM)"
    assert done.returncode == 128 + sig, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"snap: {said}; run the same command again to resume"
    ), done.stderr
    assert "received at time=" not in done.stderr  # (Ray's crash report)
    assert not (out / "manifest.json").exists()
    # stopped before or between tasks, it resumes to the same snapshot
    again = subprocess.run([sys.executable, "-m", "snapshot_cli", *cmd[6:], "--json"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["num_records"] == 4


ENDS = """
import os

def preprocess(path):
    if path.endswith("in-002.txt"):
        os._exit(3)  # on Ray, as in a local worker: no exception, the process ends
    yield {"x": int(open(path).read())}
"""


def test_a_function_that_ends_its_worker_process_says_how_to_find_out(
    ray_cluster: str, tmp_path: Path
) -> None:
    """Ray says only "The worker died unexpectedly", after its retries; "run the same
    command again to resume" ran it into the same wall."""
    (tmp_path / "pipe.py").write_text(ENDS)
    make_inputs(tmp_path / "in", 4)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'pipe.py'}:preprocess",
           str(tmp_path / "snap"), "--input", str(tmp_path / "in" / "*.txt"), "--executor",
           "ray", "--inputs-per-task", "1"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.splitlines()[-1]
    assert last.startswith("snap: error: task 2 (inputs ['"), done.stderr
    assert "in-002.txt']) failed on Ray: its worker process died each of the 4 times" in last
    assert "run these inputs with --executor local to see how they end" in last  # (a flag)
    assert not (tmp_path / "snap" / "manifest.json").exists()
    local = subprocess.run(cmd[:-4] + ["--workers", "1"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert "ended its worker process with exit code 3" in local.stderr.splitlines()[-1]


STOPPED = """
import os, signal

def preprocess(path):
    mark = path + ".stopped"
    if path.endswith("in-002.txt") and not os.path.exists(mark):
        open(mark, "w").close()
        os.kill(os.getpid(), signal.SIGTERM)  # (once: Ray stops this worker, as ray stop does)
    yield {"x": int(open(path).read())}
"""


def test_a_ray_worker_stopped_by_sigterm_has_its_task_retried(
    ray_cluster: str, tmp_path: Path
) -> None:
    """Ray's SIGTERM handler raises its own SystemExit in the worker (``ray stop``, a node
    drained or preempted): it was said as "the pipeline raised SystemExit on input ...",
    and the task was not retried (a probe). The worker ends, and Ray retries the task."""
    (tmp_path / "pipe.py").write_text(STOPPED)
    make_inputs(tmp_path / "in", 4)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'pipe.py'}:preprocess",
           str(tmp_path / "snap"), "--input", str(tmp_path / "in" / "*.txt"), "--executor",
           "ray", "--inputs-per-task", "1", "--json"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "in" / "in-002.txt.stopped").exists()  # (the first attempt stopped)
    assert json.loads(done.stdout)["num_records"] == 4
