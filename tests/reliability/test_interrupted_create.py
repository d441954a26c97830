"""Ctrl-C during ``snap.create`` in a notebook or a script: readers see the snapshot whole or
not at all, and the same create run again in the same process finishes at once, without
waiting for the lease the interrupted one left, and leaves no thread behind.

A KeyboardInterrupt is raised at each call of snap's code in turn (:mod:`tests.interrupts`):
every call of the lease's code, every other call of the local writes' and every 40th call of
the whole create (the other calls in other runs of the suite: a share drawn for each run).
An interrupt between writing the lease file and holding it made the next create of the
process wait the lease's 30 s ttl for itself ("held by host:<its own pid>"); one at the
lease's release left its heartbeat running, and a create needing the lease waited forever.
Also: `gc` interrupted, a forked child beside a held lease, and a terminal's Ctrl-C (a SIGINT
to `snap create`'s whole process group), as README says."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import layout
from snapshot_cli.writers import lease
from tests.interrupts import InterruptAt, calls, interrupted

OPTIONS: dict[str, Any] = {"inputs": list(range(8)), "workers": 0, "progress": False,
                           "inputs_per_task": 2}  # fmt: skip


def records(i: int, scale: int = 1) -> Iterator[dict[str, Any]]:
    for k in range(10):
        yield {"label": np.int64((10 * i + k) * scale), "x": np.full(4, k, np.float32)}


def labels(path: Path) -> list[int]:
    loader = snap.open(path).loader(batch_size=7, shuffle=False)
    return sorted(int(v) for batch in loader for v in batch["label"])


WANT = list(range(80))


# (an interrupt where a generator is freed is printed as "Exception ignored", not raised)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    ("only", "every"),
    [
        (("writers/lease.py", "writers/guards.py"), 1),
        ((), 40),
        (("snapshot_cli/durable.py", "snapshot_cli/interrupted.py"), 2),
    ],
    ids=["every call of the lease", "every 40th call", "every other call of the local writes"],
)
def test_a_create_interrupted_anywhere_is_whole_or_absent_and_runs_again_at_once(
    tmp_path: Path, only: tuple[str, ...], every: int
) -> None:
    threads = threading.active_count()
    interrupts = 0
    for k in calls(every):  # (from the run's offset: tests.interrupts)
        out = tmp_path / f"at-{k}"
        trace = InterruptAt(k, only)
        interrupted(lambda: snap.create(records, out, **OPTIONS), trace)  # noqa: B023
        if not trace.where:  # the create called fewer functions than k: all were tried
            break
        interrupts += 1
        try:
            seen = labels(out)
        except snap.SnapError:  # no snapshot yet (ManifestError): a clean error, not a part
            pass
        else:
            assert seen == WANT, trace.where
        # wait=False: a lease left alive by the interrupted create is an error here, not a wait
        # (overwrite: the lease is taken even where the interrupted create had committed)
        snap.create(records, out, **OPTIONS, wait=False, overwrite=True)
        assert labels(out) == WANT, trace.where
        assert threading.active_count() == threads, trace.where  # no heartbeat left
        assert not [p for p in out.rglob("*") if layout.is_temporary(p.name)], trace.where
    assert interrupts > {1: 15, 2: 7, 40: 100}[every]


def test_another_thread_s_lease_of_this_process_is_still_waited_for(tmp_path: Path) -> None:
    """The takeover above is of this thread's own abandoned lease only: a lease held by
    another thread of the process is a live writer, whose snapshot is not written over."""
    out = tmp_path / "snap"
    out.mkdir()
    held: list[Any] = []
    taker = threading.Thread(target=lambda: held.append(lease.try_acquire(snap_fs(), str(out))))
    taker.start()
    taker.join()
    assert isinstance(held[0], lease.Lease)
    try:
        with pytest.raises(lease.LeaseError, match="another snap create is writing"):
            snap.create(records, out, **OPTIONS, wait=False)
        got = lease.try_acquire(snap_fs(), str(out))
        assert isinstance(got, lease.LeaseInfo) and lease.is_alive(got)
    finally:
        held[0].release()
    snap.create(records, out, **OPTIONS, wait=False)
    assert labels(out) == WANT


def snap_fs() -> Any:
    import fsspec

    return fsspec.filesystem("file")


@pytest.mark.parametrize(
    ("workers", "sig", "to"),
    [("0", "SIGINT", "group"), ("2", "SIGINT", "group"), ("0", "SIGTERM", "group"),
     ("2", "SIGTERM", "process"), ("2", "SIGHUP", "group")],
)  # fmt: skip
def test_ctrl_c_or_sigterm_is_one_line_its_exit_code_and_no_process_left(
    tmp_path: Path, workers: str, sig: str, to: str
) -> None:
    """A terminal's Ctrl-C sends SIGINT to the whole foreground process group: `snap create`
    and its workers. It ends in one line, exit 130, nothing of the group left running, and the
    same command then finishes. So does a SIGTERM (a scheduler preempting the job sends it to
    the group; a container's stop to its first process only), with exit 143, and a SIGHUP (a
    closed terminal or SSH session), 129: before, each killed it where it stood, without a
    word, its lease held and its workers left to notice."""
    (tmp_path / "pipe.py").write_text(
        "import os, threading\n"
        "def f(i, block=True):\n"
        "    open(os.path.join(os.environ['STARTED'], f'{os.getpid()}-{i}'), 'w').close()\n"
        "    if block:\n"
        "        threading.Event().wait()  # a long computation\n"
        "    yield {'x': i}\n"
    )
    (tmp_path / "items.py").write_text("def items():\n    return list(range(8))\n")
    started = tmp_path / "started"
    started.mkdir()
    args = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'pipe.py'}:f",
            str(tmp_path / "s"), "--inputs-from", f"{tmp_path / 'items.py'}:items",
            "--workers", workers, "--inputs-per-task", "1"]  # fmt: skip
    env = {**os.environ, "STARTED": str(started)}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=terminal_signals)  # fmt: skip
    try:
        until(lambda: len(list(started.iterdir())) >= max(1, int(workers)), "tasks to start")
        (os.killpg if to == "group" else os.kill)(proc.pid, getattr(signal, sig))
    finally:
        err, said = _ended(proc, sig)
    assert err.splitlines()[-1] == f"snap: {said}; run the same command again to resume", err
    assert "Traceback" not in err, err
    until(lambda: not _group_alive(proc.pid), "the process group to end")
    until(lambda: not any(_workers_of(started)), "the workers to end")
    assert not (tmp_path / "s" / "manifest.json").exists()
    lease = json.loads(next((tmp_path / "s" / "_runs").glob("lease-*.json")).read_text())
    assert lease.get("released"), lease  # let go on the way out: the next create need not judge
    done = subprocess.run([*args, "--param", "block=false"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(int(v) for b in snap.open(tmp_path / "s").loader(batch_size=8)
                  for v in b["x"]) == list(range(8))  # fmt: skip


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stop_while_inputs_are_read_to_identify_them_is_at_once(tmp_path: Path, sig: str) -> None:
    """The reads that identify large inputs (a first create over them) ran to the end of
    every file being read after a Ctrl-C: 10 s for 8 GiB, then "still stopping 10 s later
    (threads waiting on storage that does not answer?)" over a local disk that answered, a
    lease left that gc removed only the second time (a probe). And nothing was said while
    they ran: it says it reads them first."""
    (tmp_path / "pipe.py").write_text("def f(path):\n    yield {'p': path}\n")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):  # (sparse: read as zeros, ~1-3 GB/s; no disk used)
        with open(data / f"{i}.bin", "wb") as f:
            f.truncate(4 << 30)
    args = [sys.executable, "-m", "snapshot_cli", "create", "pipe.py:f", "out", "--input",
            "data/*.bin"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=terminal_signals)  # fmt: skip
    assert proc.stderr is not None
    try:
        first = proc.stderr.readline()  # (said before the reads: the cue to stop them)
        assert "reading 4 input files (16.0 GiB) to identify their contents" in first, first
        os.killpg(proc.pid, getattr(signal, sig))
    finally:
        err, said = _ended(proc, sig)
    assert err.splitlines() == [f"snap: {said}; run the same command again to resume"], err
    assert not (tmp_path / "out").exists()  # (the lease is taken after the inputs are known)


def _ended(proc: subprocess.Popen[str], sig: str) -> tuple[str, str]:
    """``proc``'s stderr once it ended of ``sig`` (killed if it did not within a minute: the
    test then fails), and how it says such a stop."""
    try:
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + getattr(signal, sig), err
    return err, "interrupted" if sig == "SIGINT" else f"terminated ({sig})"


def terminal_signals() -> None:
    """In the child: the signals a terminal's foreground job has (handled by default). A
    suite run in the background of a shell without job control, or under nohup, passes
    SIGINT or SIGHUP ignored to its children, and an ignored signal stays ignored there (a
    Python started with SIGINT ignored installs no handler): snap, rightly, keeps nohup's."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def _workers_of(started: Path) -> list[int]:
    """The pids that started a task (named in ``started``) still running."""
    alive = []
    for pid in {int(p.name.split("-")[0]) for p in started.iterdir()}:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def until(condition: Any, what: str, seconds: float = 60.0) -> None:
    """Wait for ``condition()`` to hold (an observable state, polled), failing after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_never_lets_go_of_its_parent_s_lease(tmp_path: Path) -> None:
    """A child forked by a thread holding a lease has a copy of it, the same thread id: it
    still sees its parent's live lease, not an abandoned one of its own."""
    held = lease.try_acquire(snap_fs(), str(tmp_path))
    assert isinstance(held, lease.Lease)
    try:
        pid = os.fork()
        if pid == 0:  # the child: take the lease, report, exit without cleanup
            got = lease.try_acquire(snap_fs(), str(tmp_path))
            os._exit(0 if isinstance(got, lease.LeaseInfo) and lease.is_alive(got) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lease.current(snap_fs(), str(tmp_path)).holder.get("released") is None
        held.check()  # still this process's
    finally:
        held.release()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_gc_interrupted_anywhere_loses_nothing_and_leaves_no_lease(tmp_path: Path) -> None:
    """``snap.gc`` interrupted at every 46th call of snap's code (from the run's offset): the
    snapshot still reads whole, gc run again removes all the garbage, and a create needing
    the lease goes at once."""
    from snapshot_cli.writers import gc as gc_mod

    template = tmp_path / "template"  # (copied for each interrupt: the creates took most
    snap.create(records, template, **OPTIONS)  # of this test's time)
    snap.create(records, template, **OPTIONS, params={"scale": 2}, overwrite=True)  # garbage
    want = labels(template)
    interrupts = 0
    for k in calls(46):
        out = tmp_path / f"at-{k}"
        shutil.copytree(template, out, copy_function=shutil.copy2)
        trace = InterruptAt(k)
        interrupted(lambda: gc_mod.gc(str(out), retention=0), trace)  # noqa: B023
        if not trace.where:
            break
        interrupts += 1
        assert labels(out) == want, trace.where
        gc_mod.gc(str(out), retention=0)
        assert not gc_mod.gc(str(out), retention=0, dry_run=True).garbage, trace.where
        snap.create(records, out, **OPTIONS, wait=False, overwrite=True)
        assert labels(out) == WANT, trace.where
    assert interrupts > 20
