"""The GIL's switch interval while a loader's pass runs (``snapshot_cli/readers/switching.py``):
1 ms from CPython's default 5 ms, set back when the last pass ends however it ends; an
interval the program set itself is left alone, during the pass and after it."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import switching


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    path = tmp_path_factory.mktemp("switching") / "s"

    def records() -> Iterator[dict[str, np.ndarray]]:
        for i in range(2_000):
            yield {"x": np.full(16, i, np.float32), "label": np.int64(i)}

    snap.create(records, str(path), workers=0, batch_rows=100, shard_size="16KiB")
    return snap.open(str(path))


@pytest.fixture(autouse=True)
def _default_interval() -> Iterator[None]:
    """Each test starts at CPython's default with no pass running (passes of earlier tests in
    this process that were never ended, such as one a kept traceback holds, forgotten), and
    leaves it so."""
    before = sys.getswitchinterval()
    gc.collect()  # (passes no longer referenced end here, not in the middle of a test)
    with switching._lock:
        switching._passes, switching._lowered = 0, False
    sys.setswitchinterval(switching.DEFAULT)
    yield
    sys.setswitchinterval(before)


def _seen(loader: snap.Loader) -> list[float]:
    """The switch interval at every batch of a pass."""
    return [sys.getswitchinterval() for _ in loader]


def test_lowered_while_a_pass_runs_and_set_back_at_its_end(snapshot: snap.Snapshot) -> None:
    with snapshot.loader(64, shuffle=True) as loader:
        seen = _seen(loader)
        assert len(seen) == 32 and set(seen) == {switching.LOWERED}
        assert sys.getswitchinterval() == switching.DEFAULT
        assert set(_seen(loader)) == {switching.LOWERED}  # a second pass: again
    assert sys.getswitchinterval() == switching.DEFAULT


def test_set_back_when_the_loop_breaks_or_raises(snapshot: snap.Snapshot) -> None:
    loader = snapshot.loader(64, epochs=None)
    for i, _ in enumerate(loader):
        assert sys.getswitchinterval() == switching.LOWERED
        if i == 3:
            break
    assert sys.getswitchinterval() == switching.DEFAULT
    with pytest.raises(ZeroDivisionError):
        for _ in loader:
            1 / 0  # noqa: B018 - a step that fails
    assert sys.getswitchinterval() == switching.DEFAULT
    loader.close()


def test_an_interval_the_program_set_is_left_alone(snapshot: snap.Snapshot) -> None:
    sys.setswitchinterval(0.002)
    with snapshot.loader(64) as loader:
        assert set(_seen(loader)) == {0.002}
    assert sys.getswitchinterval() == 0.002


def test_an_interval_set_during_a_pass_is_kept_after_it(snapshot: snap.Snapshot) -> None:
    with snapshot.loader(64) as loader:
        for i, _ in enumerate(loader):
            if i == 2:
                sys.setswitchinterval(0.003)
    assert sys.getswitchinterval() == 0.003


def test_lowered_until_the_last_of_several_passes_ends(snapshot: snap.Snapshot) -> None:
    """Two loaders iterated together (a sweep's trials in threads, a train and an eval
    loader): the first to end does not set it back under the other."""
    a, b = snapshot.loader(64, seed=1), snapshot.loader(64, seed=2)
    first, second = iter(a), iter(b)
    next(first)
    next(second)
    for _ in first:
        pass
    assert sys.getswitchinterval() == switching.LOWERED  # b's pass still runs
    for _ in second:
        pass
    assert sys.getswitchinterval() == switching.DEFAULT
    a.close()
    b.close()


def test_a_pass_started_at_the_default_lowers_it_beside_one_that_did_not(
    snapshot: snap.Snapshot,
) -> None:
    """A pass started under the program's own interval, and kept, does not keep later passes
    from lowering CPython's default once the program sets that back."""
    sys.setswitchinterval(0.002)
    kept = iter(snapshot.loader(64, seed=3))
    next(kept)
    sys.setswitchinterval(switching.DEFAULT)
    with snapshot.loader(64) as loader:
        assert set(_seen(loader)) == {switching.LOWERED}
    assert sys.getswitchinterval() == switching.LOWERED  # the kept pass still runs
    kept.close()
    assert sys.getswitchinterval() == switching.DEFAULT


def test_another_pass_ending_inside_enter_does_not_deadlock() -> None:
    """The garbage collector may end a pass (its leave) while enter holds the lock, in the
    same thread: a forked child resuming its parent's pass did, and hung. Run in a thread
    with a deadline, so that a lock that is not reentrant fails here rather than hangs."""
    switching.enter()

    class Finalized:
        def __del__(self) -> None:
            switching.leave()

    def ends_a_pass_inside_the_lock() -> None:
        with switching._lock:  # as enter holds it when a collection runs a finalizer
            obj = Finalized()
            del obj

    thread = threading.Thread(target=ends_a_pass_inside_the_lock, daemon=True)
    thread.start()
    thread.join(timeout=30)
    if thread.is_alive():
        switching._new_lock()  # (the stuck thread keeps the old one)
        pytest.fail("leave() inside a held lock deadlocked")
    assert sys.getswitchinterval() == switching.DEFAULT


def test_enter_and_leave_count_passes() -> None:
    """The bookkeeping alone: nested entries, and a leave too many changes nothing."""
    switching.enter()
    switching.enter()
    switching.leave()
    assert sys.getswitchinterval() == switching.LOWERED
    switching.leave()
    assert sys.getswitchinterval() == switching.DEFAULT
    switching.leave()  # (one more than entered: nothing to set back)
    assert sys.getswitchinterval() == switching.DEFAULT
    switching.enter()
    assert sys.getswitchinterval() == switching.LOWERED
    switching.leave()


def test_a_pass_resumed_in_a_new_process_lowers_it_there(tmp_path: Path) -> None:
    """What a DataLoader worker or a sweep's trial process sees: its own passes lower its
    own interval."""
    import subprocess

    path = str(tmp_path / "s")
    code = (
        "import sys, numpy as np, snapshot_cli as snap\n"
        f"snap.create(lambda: ({{'x': np.int64(i)}} for i in range(300)), {path!r}, workers=0)\n"
        f"seen = {{sys.getswitchinterval() for _ in snap.open({path!r}).loader(8)}}\n"
        "print(sorted(seen), sys.getswitchinterval())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[0.001]", "0.005"]


def test_a_pass_over_remote_storage_leaves_it_alone() -> None:
    """Only passes over local storage lower it (a remote snapshot's fetches run Python in
    several threads): ``memory://`` stands for remote storage here."""
    path = "memory://switching/s"
    snap.create(lambda: ({"x": np.int64(i)} for i in range(300)), path, workers=0)
    with snap.open(path).loader(8) as loader:
        assert set(_seen(loader)) == {switching.DEFAULT}
    assert sys.getswitchinterval() == switching.DEFAULT
