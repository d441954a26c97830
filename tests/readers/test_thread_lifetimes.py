"""A pass's threads end however its loader is left: a Ctrl-C as the pass starts, a trainer
that holds the loader and is its map's owner, a loader the garbage collector frees in one of
its own threads; and the decode processes' side: a Ctrl-C never cuts a message to them nor
is lost in a finalizer, nor printed from the exit hook that ends them.

Each race is driven at its exact point (a patched ``Thread.start``, a trace raising at each
call, a map that holds or collects, a socket interrupted after a call), and the threads are
counted until a deadline, not after a sleep."""

from __future__ import annotations

import gc
import inspect
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import prefetch, procs, wire
from tests.interrupts import SNAP_CODE

DEADLINE = 30.0  # seconds a test waits for threads to end (they end in milliseconds)


def records(i: int) -> Iterator[snap.Batch]:
    ids = np.arange(100 * i, 100 * (i + 1))
    yield snap.Batch(id=ids, x=(ids[:, None] * np.ones(1024)).astype(np.float32))


@pytest.fixture(scope="module")
def numbers(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    """4,000 records of 4 KiB: a batch of 256 is 1 MiB, handed over alone (not in a group)."""
    out = tmp_path_factory.mktemp("lifetimes") / "snap"
    snap.create(records, str(out), inputs=list(range(40)), workers=0, progress=False)
    return snap.open(str(out))


def snap_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("snap-")]


def until(condition: Callable[[], bool], timeout: float = DEADLINE) -> bool:
    """Whether ``condition()`` held before ``timeout`` seconds (asked every 10 ms)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def first_ids(loader: snap.Loader) -> list[int]:
    return [int(i) for i in next(iter(loader))["id"]]


# --- a Ctrl-C as a pass starts ------------------------------------------------------------


class _WaitInterrupted(threading.Event):
    """A thread's started-event whose first wait is a Ctrl-C (as it lands in Thread.start's
    wait for the thread, which may not be running yet)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().wait(timeout)


@pytest.mark.parametrize("where", ["after the start", "in its wait"])
def test_a_ctrl_c_in_the_start_of_a_pass_leaves_no_thread(
    numbers: snap.Snapshot, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The pass's Run was made, and its snap-batch thread started, before the loader held
    it: a Ctrl-C landing in ``Thread.start`` left the thread filling the prefetch buffer for
    good, with its window and read threads, after ``close()`` (30 interrupted loaders: 92
    threads, 1.9 GB)."""
    real, started = threading.Thread.start, []

    def start(thread: threading.Thread) -> None:
        if thread.name != "snap-batch" or started:
            return real(thread)
        started.append(thread)
        if where == "in its wait":
            thread._started = _WaitInterrupted()  # type: ignore[attr-defined]
        real(thread)
        raise KeyboardInterrupt  # (after the start)

    expected = first_ids(numbers.loader(batch_size=256, seed=5, epochs=None))
    monkeypatch.setattr(threading.Thread, "start", start)
    with numbers.loader(batch_size=256, seed=5, epochs=None) as loader:
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        assert started
        assert until(lambda: not started[0].is_alive()), "the interrupted pass's thread runs on"
        assert first_ids(loader) == expected  # the loop run again: nothing was handed over
    assert until(lambda: not snap_threads()), snap_threads()


class SetUpInterrupt:
    """A trace raising KeyboardInterrupt at the k-th call of a pass's set-up, from ``next()``
    until the pass waits for its first batch: snap's code, ``Thread.start`` and the calls it
    makes itself (a Ctrl-C lands where Python checks for signals, the start of a function
    among them; not inside the Condition a wait uses, which no signal leaves half-done)."""

    def __init__(self, k: int) -> None:
        self.k, self.calls, self.where, self.done = k, 0, "", False

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event != "call" or self.where or self.done or code.co_flags & inspect.CO_GENERATOR:
            return None  # (a trace's raise as a generator resumes is printed, not raised)
        if code.co_name == "get" and code.co_filename == prefetch.__file__:
            self.done = True  # set up: the pass waits for its first batch
            return None
        caller = frame.f_back.f_code if frame.f_back is not None else None
        starting = code.co_filename == threading.__file__ and (
            code.co_name == "start"
            or (caller is not None and caller.co_name == "start"
                and caller.co_filename == threading.__file__)
        )  # fmt: skip
        if not (code.co_filename.startswith(SNAP_CODE) or starting):
            return None
        self.calls += 1
        if self.calls == self.k:
            self.where = f"{code.co_name} ({code.co_filename}:{frame.f_lineno})"
            raise KeyboardInterrupt
        return None


def test_a_ctrl_c_at_any_call_of_a_pass_s_set_up_leaves_no_thread_after_close(
    numbers: snap.Snapshot,
) -> None:
    expected = first_ids(numbers.loader(batch_size=256, seed=5, epochs=None))
    k, where, points = 0, "", []
    loader = numbers.loader(batch_size=256, seed=5, epochs=None)
    while True:
        k += 1
        trace = SetUpInterrupt(k)
        it = iter(loader)
        sys.settrace(trace)
        try:
            batch = next(it)
        except KeyboardInterrupt:
            if not trace.where:
                raise
        finally:
            sys.settrace(None)
        del it
        loader.close()
        if not trace.where:  # the set-up made fewer than k calls: every point was tried
            break
        points.append(trace.where)
        where = trace.where
        assert until(lambda: not snap_threads()), (where, snap_threads())
    assert batch["id"].tolist() == expected  # none of the interrupted passes moved it
    loader.close()
    assert any("threading.py" in p and p.startswith("wait") for p in points), points
    assert len(points) > 20, points


# --- a trainer holding the loader, its method the map ---------------------------------------


class Trainer:
    def __init__(self, numbers: snap.Snapshot, how: str) -> None:
        augment = self.augment if how == "bound method" else (lambda b: self.augment(b))
        self.loader = numbers.loader(batch_size=64, seed=0, epochs=None, map=augment)
        self.batches = iter(self.loader)  # the usual endless-iterator training loop

    def augment(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return batch


@pytest.mark.parametrize("how", ["bound method", "closure"])
def test_a_dropped_trainer_whose_method_is_the_map_stops_its_threads(
    numbers: snap.Snapshot, how: str
) -> None:
    """Running threads are roots for the garbage collector: they held the run, the run the
    map, the map the trainer, and the trainer the loader and its iterator, so nothing was
    ever collected (10 trainers: 60 threads, 900 MB)."""
    trainer = Trainer(numbers, how)
    for _ in range(5):
        next(trainer.batches)
    assert snap_threads()
    gone = weakref.ref(trainer)
    del trainer
    assert until(lambda: gc.collect() >= 0 and gone() is None and not snap_threads()), (
        gone(),
        snap_threads(),
    )


def test_a_map_outliving_nothing_but_its_loader_still_maps(numbers: snap.Snapshot) -> None:
    """The run holds the map weakly; the loader (kept by its iterator) holds it."""
    it = iter(numbers.loader(batch_size=64, seed=0, map=lambda b: {"twice": 2 * b["id"]}))
    gc.collect()
    got = [b["twice"] for b in it]
    assert np.array_equal(np.sort(np.concatenate(got)), 2 * np.arange(4_000))


# --- a loader the collector frees in one of its own threads --------------------------------


class _Held:
    """What the map does: on ``armed``, its second call waits for ``go``, then collects."""

    def __init__(self) -> None:
        self.armed, self.reached, self.go = threading.Event(), threading.Event(), threading.Event()
        self.calls, self.lock, self.collected_in = 0, threading.Lock(), ""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            self.calls += 1
            mine = self.calls
        if mine == 2:
            self.reached.set()
            self.go.wait(DEADLINE)
            self.collected_in = threading.current_thread().name
            gc.collect()  # where an allocation of the map's would run the collector
        return batch


held = _Held()


def held_map(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return held(batch)


class Cycle:
    def __init__(self, numbers: snap.Snapshot) -> None:
        self.loader = numbers.loader(batch_size=256, seed=0, epochs=None, map=held_map)
        self.batches = iter(self.loader)
        self.me = self  # a reference cycle: only the collector frees it


def test_a_loader_collected_in_its_own_map_thread_stops_its_threads(
    numbers: snap.Snapshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector ran the finalizers of a loader in a cycle in a snap-map thread: closing
    the pass there joined snap-batch, which waited for that very map call (both hung for
    good), or joined the map pool from its own thread ("cannot join current thread")."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    gc.collect()
    gc.disable()
    try:
        cycle = Cycle(numbers)
        next(cycle.batches)
        assert held.reached.wait(DEADLINE)  # the second map call waits in its thread
        gone = weakref.ref(cycle)
        del cycle
        held.go.set()
        assert until(lambda: gone() is None and not snap_threads()), snap_threads()
    finally:
        gc.enable()
    assert held.collected_in.startswith("snap-")
    assert not unraisable, [str(u.exc_value) for u in unraisable]


# --- decode processes: their messages, their exit --------------------------------------------


class InterruptedSocket:
    """A socket whose first send is interrupted as it returns: a Ctrl-C landing right after
    that call (what it sent went out)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.calls = sock, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sock, name)
        if name not in ("send", "sendall", "sendmsg"):
            return attr

        def call(*args: Any) -> Any:
            out = attr(*args)
            self.calls += 1
            if self.calls == 1:
                raise KeyboardInterrupt
            return out

        return call


@pytest.mark.parametrize("with_fd", [False, True], ids=["plain", "with-a-descriptor"])
def test_a_ctrl_c_never_cuts_a_message_in_two(with_fd: bool) -> None:
    """The header and the body went in two calls: a Ctrl-C between them had the decode
    process read the next message's header as this one's body, and die."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.settimeout(DEADLINE)
    r, w = os.pipe()
    try:
        fds = [r] if with_fd else []
        cut = InterruptedSocket(mine)
        with pytest.raises(KeyboardInterrupt):
            wire.send(cut, {"free": [1, 2]}, fds)  # type: ignore[arg-type]
        assert cut.calls == 1
        nxt = {"free": [3], "forget": [4], "padding": "x" * 200}
        wire.send(mine, nxt)
        first, got = wire.recv(theirs)
        assert first == {"free": [1, 2]} and len(got) == len(fds)
        for fd in got:
            os.close(fd)
        assert wire.recv(theirs) == (nxt, [])
    finally:
        for s in (mine, theirs):
            s.close()
        os.close(r)
        os.close(w)


def _free_only(obj: object) -> bool:
    return isinstance(obj, dict) and bool(obj) and set(obj) <= {"free", "forget"}


def test_a_ctrl_c_as_a_dropped_window_is_freed_cuts_nothing_and_is_not_lost(
    numbers: snap.Snapshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's memory let go in the main thread ran a finalizer that sent the decode
    processes a "free" message there; a Ctrl-C in that send was swallowed ("Exception
    ignored in: <finalize object>") and cut it: the process read on as garbage and died, and
    the pass fell back to threads. Here a Ctrl-C lands wherever the main thread sends one,
    after its header (as the two calls of the old send let it)."""
    pool = procs.pool()
    child = pool.wait_ready(1)[0]
    real, cut = procs.send, []

    def send(sock: socket.socket, obj: Any, fds: Any = ()) -> None:
        if threading.current_thread() is threading.main_thread() and _free_only(obj):
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            sock.send(wire._HEADER.pack(len(data), len(fds)))
            cut.append(obj)
            raise KeyboardInterrupt
        real(sock, obj, fds)

    unraisable: list[Any] = []
    monkeypatch.setattr(procs, "send", send)
    gc.collect()  # (what earlier tests left is not this test's)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    def options(seed: int) -> dict[str, int]:  # (new memory each time: a window of another size)
        return {"batch_size": 64, "seed": seed, "shuffle_buffer": 500 * (seed + 1)}

    expected = [first_ids(numbers.loader(**options(seed))) for seed in range(3)]
    for seed in range(3):
        loader = numbers.loader(**options(seed), processes=1)
        assert first_ids(loader) == expected[seed]
        del loader  # its windows let go, in this (the main) thread
        gc.collect()
    assert not cut and not unraisable, (cut, [str(u.exc_value) for u in unraisable])
    assert child.alive() and child in pool.ready(1)  # (a RuntimeWarning would be an error)
    assert child.open_readers() == []  # its stream is whole: it answers, told of every loader


SCRIPT = """
import os, signal, subprocess
from snapshot_cli.readers import procs

pool = procs.pool()
children = pool.wait_ready(2)
print(*(c.proc.pid for c in children), flush=True)
real, seen = subprocess.Popen.wait, []

def wait(self, timeout=None):
    if not seen:  # the exit hook waits for its first process: a Ctrl-C, now
        seen.append(1)
        print("sockets open:", sum(c.sock.fileno() != -1 for c in children), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    return real(self, timeout)

subprocess.Popen.wait = wait
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # (a zombie not reaped yet)
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not procs.shm.AVAILABLE, reason="decode processes need Linux")
def test_a_ctrl_c_while_the_exit_hook_ends_the_decode_processes_is_quiet(tmp_path: Path) -> None:
    """After ``snap bench --processes 2`` printed its report, the exit hook closed each
    process and waited for it in turn (about half a second each): a Ctrl-C then printed
    "Exception ignored in atexit callback" and a traceback."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    here = str(Path(snap.__file__).parent.parent)  # (the snapshot_cli under test)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 2, (done.stdout, done.stderr)
    assert lines[1] == "sockets open: 0"  # every one closed before the first wait
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    pids = [int(p) for p in lines[0].split()]
    assert until(lambda: all(_gone(p) for p in pids)), pids


def test_a_map_method_of_a_slots_object_maps(tmp_path: Path) -> None:
    """(The review's.) A method of an object that takes no weak reference (a slots class)
    made iter() fail with "cannot create weak reference": such a map is held strongly."""
    from dataclasses import dataclass

    @dataclass(frozen=True, slots=True)
    class Scale:
        k: int

        def apply(self, batch: dict[str, Any]) -> dict[str, Any]:
            return {"i": batch["i"] * self.k}

    def records(n: int) -> Any:
        yield {"i": n}

    out = str(tmp_path / "s")
    snap.create(records, out, inputs=list(range(20)), workers=0)
    with snap.open(out).loader(4, shuffle=False, map=Scale(2).apply) as loader:
        assert sorted(int(i) for b in loader for i in b["i"]) == list(range(0, 40, 2))
