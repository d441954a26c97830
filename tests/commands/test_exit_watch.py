"""`snap create --workers 0` runs the pipeline in the command's own process; a thread it left
running (a library's uploader, a consumer blocked on a queue) kept Python from exiting after
the summary was printed: the command hung for good. It now gives such threads a few seconds,
names them, and exits with the command's status; a thread that ends in time is waited for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.cli_exit import EXIT_GRACE_S
from tests.conftest import snap_subprocess

PIPE = """
import threading
from pathlib import Path

NEVER = threading.Event()  # never set: the thread waits for good

def stuck(i, fail=False):
    threading.Thread(target=NEVER.wait, name=f"uploader-{i}").start()
    if fail:
        raise ValueError("cannot decode")
    yield {"i": i}

def finishing(i):
    def work():
        Path(f"done-{i}").write_text("flushed")  # what the thread was for: done before exit
    threading.Thread(target=work, name=f"flusher-{i}").start()
    yield {"i": i}
"""


@pytest.mark.parametrize("fail", [False, True])
def test_a_thread_left_running_does_not_hold_the_command(tmp_path: Path, fail: bool) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    args = ["create", "pipe.py:stuck", "out", "--inputs-from", "items.py:items", "--workers", "0"]
    (tmp_path / "items.py").write_text("def items():\n    return [1, 2]\n")
    params = ["--param", "fail=true"] if fail else []
    try:
        done = snap_subprocess(*args, *params, cwd=tmp_path, timeout=EXIT_GRACE_S + 60)
    except subprocess.TimeoutExpired:  # how it failed before: the summary, then no exit
        pytest.fail("snap create did not exit while the pipeline's threads ran")
    assert done.returncode == (1 if fail else 0), done.stderr
    left = "1 thread running (uploader-1)" if fail else "2 threads running (uploader-1, uploader-2)"
    assert (
        f"snap: note: the pipeline left {left} {EXIT_GRACE_S:g} s after the command ended; "
        f"exiting without waiting for {'it' if fail else 'them'}"
    ) in done.stderr
    if fail:
        assert "snap: error: the pipeline raised ValueError on input 1" in done.stderr
        assert not (tmp_path / "out" / "manifest.json").exists()
    else:
        assert done.stdout.startswith("created: ")
        assert [r["i"] for r in snap.open(tmp_path / "out").head()] == [1, 2]


@pytest.mark.parametrize("what", ["thread", "process"])
def test_a_thread_or_process_that_ends_is_waited_for_as_python_does(
    tmp_path: Path, what: str
) -> None:
    (tmp_path / "pipe.py").write_text(PIPE if what == "thread" else PROCESSES)
    (tmp_path / "items.py").write_text("def items():\n    return [1, 2]\n")
    args = ["create", "pipe.py:finishing", "out", "--inputs-from", "items.py:items"]
    done = snap_subprocess(*args, "--workers", "0", cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "left" not in done.stderr and "ended" not in done.stderr
    assert [(tmp_path / f"done-{i}").read_text() for i in (1, 2)] == ["flushed", "flushed"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_it_waits_for_such_threads_ends_it_quietly(
    tmp_path: Path, signum: int
) -> None:
    """A Ctrl-C in those seconds printed Python's "Exception ignored in: <module 'threading'>"
    traceback; SIGTERM and SIGHUP killed it by the signal, with no word. The snapshot is
    made: it ends at once with the command's status."""
    (tmp_path / "pipe.py").write_text(PIPE)
    (tmp_path / "items.py").write_text("def items():\n    return [1]\n")
    args = [sys.executable, "-m", "snapshot_cli", "create", "pipe.py:stuck", "out",
            "--inputs-from", "items.py:items", "--workers", "0", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # (the summary: the command is done, the wait begins)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=EXIT_GRACE_S + 30)
    assert first.startswith("created: "), (first, err)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert snap.open(tmp_path / "out").num_records == 1


SWALLOWS = """
import sys, time

def swallow(i):
    if i == 0:
        print("started", file=sys.stderr, flush=True)  # (the test's cue: a task is running)
    for _ in range(20):
        try:
            time.sleep(0.05)
        except BaseException:  # (a bare except: as much code in the wild has)
            pass
    yield {"i": i}
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_the_pipeline_swallowed_still_stops_a_create_in_this_process(
    tmp_path: Path, signum: int
) -> None:
    """With --workers 0 the function runs in the command's process: its bare ``except:``
    caught the KeyboardInterrupt, and the create ran every input to the end (30 s)."""
    (tmp_path / "pipe.py").write_text(SWALLOWS)
    (tmp_path / "items.py").write_text("def items():\n    return list(range(40))\n")
    args = [sys.executable, "-m", "snapshot_cli", "create", "pipe.py:swallow", "out",
            "--inputs-from", "items.py:items", "--workers", "0", "--inputs-per-task", "1",
            "--quiet"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while "started" not in (line := proc.stderr.readline()):
        assert line, "the create ended before its first task began"
    proc.send_signal(signum)
    err = proc.communicate(timeout=20)[1]  # (all 40 inputs: 40 s)
    assert proc.returncode == 128 + signum, err
    said = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert f"snap: {said}; run the same command again to resume" in err, err
    assert not (tmp_path / "out" / "manifest.json").exists()


LATE = r"""
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((destructor)) static void late_signal(void) {
    const char *sig = getenv("LATE_SIGNAL");
    if (sig) kill(getpid(), atoi(sig));
}
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_as_the_process_exits_after_its_answer_keeps_its_status(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A signal just after ``created:`` was printed, while the interpreter exited (its own
    handlers gone), ended the process by the signal: the commit was made and said, yet
    ``snap create ... && train`` failed (a probe, 20-50 ms after the manifest changed).
    The signal comes here as late as it can: from a library's destructor, run by exit()."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "a C compiler (the project's C extensions need one)"
    late = tmp_path / "late.so"
    (tmp_path / "late.c").write_text(LATE)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(late), str(tmp_path / "late.c")],
                   check=True)  # fmt: skip
    out = str(tmp_path / "s")
    snap.create(lambda: iter([{"i": 1}]), out, workers=0)
    env = {**os.environ, "LD_PRELOAD": str(late), "LATE_SIGNAL": str(int(sig))}
    done = subprocess.run([sys.executable, "-m", "snapshot_cli", "inspect", out], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "records" in done.stdout


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["snap-verify_0", "snap-verify_1"], "snap's own 2 threads (snap-verify_0, snap-verify_1)"),
        (["uploader-1", "snap-verify_0"], "the pipeline left 2 threads running (uploader-1, "),
    ],
)
def test_the_note_of_threads_left_blames_the_pipeline_for_its_own_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], names: list[str],
    said: str,
) -> None:  # fmt: skip
    """``snap verify`` stopped while its reads waited on a silent server was told "the
    pipeline left 15 threads running ... (stop or join threads in the function)": verify
    runs no pipeline; they were its own (a probe)."""
    import threading

    from snapshot_cli import cli_exit

    release = threading.Event()
    threads = [threading.Thread(target=release.wait, name=name) for name in names]
    for thread in threads:
        thread.start()
    left: list[int] = []
    monkeypatch.setattr(cli_exit, "_leave", left.append)
    try:
        cli_exit._exit_after(threads, 3, grace=0.01)  # (a join's timeout: they never end)
    finally:
        release.set()
    note = capsys.readouterr().err
    assert left == [3] and note.startswith(f"snap: note: {said}"), note
    assert ("the function" in note) is (not all(n.startswith("snap-") for n in names))


PROCESSES = """
import multiprocessing as mp
import os
import time
from pathlib import Path

def _sleep_for_good():
    Path(f"child-{os.getpid()}").write_text("")  # (so the test can see it gone)
    time.sleep(3600)

def _finish(i):
    time.sleep(0.5)
    Path(f"done-{i}").write_text("flushed")

def stuck(i):
    mp.Process(target=_sleep_for_good).start()  # not joined, not daemon
    yield {"i": i}

def finishing(i):
    mp.Process(target=_finish, args=(i,)).start()  # ends on its own, its work kept
    yield {"i": i}
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_process_left_running_is_named_and_ended(tmp_path: Path, workers: str) -> None:
    """multiprocessing's exit hook joins every non-daemon child: a pipeline's Process never
    joined held snap create for good, silently (a probe: --workers 2 stuck at 'tasks 0/2',
    --workers 0 after its summary), and left the child running once killed."""
    (tmp_path / "pipe.py").write_text(PROCESSES)
    (tmp_path / "items.py").write_text("def items():\n    return [1, 2]\n")
    args = ["create", "pipe.py:stuck", "out", "--inputs-from", "items.py:items",
            "--workers", workers, "--inputs-per-task", "1"]  # fmt: skip
    try:
        done = snap_subprocess(*args, cwd=tmp_path, timeout=EXIT_GRACE_S + 60)
    except subprocess.TimeoutExpired:
        pytest.fail("snap create did not exit while the pipeline's processes ran")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("created: ")
    assert "after its work was done; ended" in done.stderr, done.stderr
    assert "(join the processes it starts, or make them daemon processes)" in done.stderr
    pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]
    assert len(pids) == 2
    for pid in pids:  # ended, not left behind (a zombie reaped by init counts as gone)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert sorted(r["i"] for r in snap.open(tmp_path / "out").head()) == [1, 2]
