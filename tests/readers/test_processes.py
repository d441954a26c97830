"""Decode processes (``processes=N``, readers/procs.py): the same batches as threads, the
same checks, clear errors, and no shared memory left mapped."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli.readers import limits, procs

from .conftest import damaged_snapshot, numbered_snapshot


@pytest.fixture(scope="module")
def ready() -> procs.DecodePool:
    """Two decode processes, started: every window below goes through them."""
    pool = procs.pool()
    assert len(pool.wait_ready(2)) == 2
    return pool


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full((4, 5), n % 251, np.uint8), "w": np.float32(n)}'
    return numbered_snapshot(tmp_path_factory.mktemp("images"), 2400, record, "24KiB")


def _epochs(loader: snap.Loader, passes: int = 1) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(passes):
        out.extend({k: v.copy() for k, v in b.items()} for b in loader)
    return out


def _same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("n", [1, 2])
def test_processes_give_the_batches_threads_give(
    ready: procs.DecodePool, images: str, shuffle: bool, n: int
) -> None:
    s = snap.open(images)
    kw: dict[str, Any] = {"shuffle": shuffle, "seed": 7, "epochs": 2, "shuffle_buffer": 500}
    with s.loader(64, **kw) as threads:
        expected = _epochs(threads)
    with s.loader(64, processes=n, **kw) as loader:
        got = _epochs(loader)
        stats = loader.stats()
    _same(got, expected)
    # Every window went through the processes (they were ready), and they did the decoding.
    assert stats["stage_seconds"]["decode_process_cpu"] > 0
    for batch in got:
        assert batch["x"].shape[1:] == (4, 5)
        assert (batch["x"][:, 0, 0] == batch["label"] % 251).all()


def test_batches_kept_across_windows_stay_intact(ready: procs.DecodePool, images: str) -> None:
    """A batch is a view of shared memory that a process writes: its window's memory is not
    reused while the batch is alive, so keeping every batch of three epochs (no copy) reads
    the same values as copying each at once."""
    s = snap.open(images)
    kw: dict[str, Any] = {"seed": 1, "epochs": 3, "shuffle_buffer": 300}
    with s.loader(50, **kw) as threads:
        expected = _epochs(threads)
    with s.loader(50, processes=2, **kw) as loader:
        kept = list(loader)
    _same([dict(b) for b in kept], expected)


def test_resume_mid_epoch_with_processes(ready: procs.DecodePool, images: str) -> None:
    s = snap.open(images)
    kw: dict[str, Any] = {"seed": 3, "epochs": 2, "shuffle_buffer": 400, "processes": 2}
    with s.loader(32, **kw) as whole:
        expected = _epochs(whole)
    with s.loader(32, **kw) as first:
        head = []
        for batch in first:
            head.append({k: v.copy() for k, v in batch.items()})
            if len(head) == 57:
                break
        state = first.state_dict()
    with s.loader(32, **kw) as second:
        second.load_state_dict(state)
        tail = _epochs(second)
    _same(head + tail, expected)


def test_a_mixture_decodes_in_processes(ready: procs.DecodePool, images: str) -> None:
    a, b = snap.open(images), snap.open(images)
    kw: dict[str, Any] = {"seed": 5, "shuffle_buffer": 300}
    with snap.mix([a, b], [0.25, 0.75]).loader(64, **kw) as threads:
        expected = _epochs(threads)
    with snap.mix([a, b], [0.25, 0.75]).loader(64, processes=2, **kw) as loader:
        got = _epochs(loader)
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0
    _same(got, expected)


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_damaged_shard_raises_and_none_of_its_records_arrive(
    ready: procs.DecodePool, images: str, tmp_path: Path, shuffle: bool
) -> None:
    out, victim = damaged_snapshot(tmp_path)
    seen: list[int] = []
    with snap.open(out).loader(10, shuffle=shuffle, shuffle_buffer=60, processes=2) as loader:
        damaged = f"{victim} is damaged: record batch 0 has crc32c"
        with pytest.raises(snap.CorruptShardError, match=damaged):
            for batch in loader:
                seen.extend(int(v) for v in batch["label"])
    assert seen and 2 not in {label // 50 for label in seen}
    # The processes that answered with the error decode the next loader's windows as before.
    kw: dict[str, Any] = {"seed": 8, "shuffle_buffer": 300}
    with snap.open(images).loader(64, **kw) as threads:
        expected = _epochs(threads)
    with snap.open(images).loader(64, processes=2, **kw) as loader:
        _same(_epochs(loader), expected)
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0


def test_a_killed_process_loses_nothing(images: str) -> None:
    """A decode process killed mid-pass (the OOM killer): the pass still delivers every
    batch, the same as threads, with a warning naming the process; the next pass has a new
    one. (Whether it dies between windows or during one, the outcome is the same.)"""
    s = snap.open(images)
    kw: dict[str, Any] = {"seed": 2, "shuffle_buffer": 200}
    with s.loader(64, **kw) as threads:
        expected = _epochs(threads)
    pool = procs.pool()
    victim = pool.wait_ready(2)[0]
    got = []
    killed = f"decode process {victim.proc.pid} was killed"
    with pytest.warns(RuntimeWarning, match=killed), s.loader(64, processes=2, **kw) as loader:
        for batch in loader:
            got.append({k: v.copy() for k, v in batch.items()})
            if len(got) == 1:
                os.kill(victim.proc.pid, signal.SIGKILL)
    _same(got, expected)
    assert victim not in pool.wait_ready(2) and len(pool.ready(2)) == 2  # replaced
    with s.loader(64, processes=2, **kw) as loader:
        _same(_epochs(loader), expected)


def test_more_loaders_than_a_process_keeps_open_take_turns(
    ready: procs.DecodePool, images: str
) -> None:
    """A decode process keeps KEEP_READERS loaders' shards open; loaders beyond that, used
    in turn, are opened again as needed (the two sides agree on which it has)."""
    s = snap.open(images)
    kw: dict[str, Any] = {"seed": 4, "shuffle_buffer": 600, "processes": 2}
    with s.loader(128, **kw) as threads:
        expected = _epochs(threads)
    loaders = [s.loader(128, **kw) for _ in range(procs.KEEP_READERS + 3)]
    for _ in range(2):
        for loader in loaders:
            loader.set_epoch(0)
            _same(_epochs(loader), expected)
    for loader in loaders:
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0
        loader.close()


def test_processes_that_cannot_start_leave_the_threads_decoding(
    images: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode process that exits before it starts (here the interpreter is a program that
    exits at once: a broken environment) costs one warning naming it; the passes are the
    threads', and no process is started again for each pass."""
    s = snap.open(images)
    kw: dict[str, Any] = {"seed": 6, "shuffle_buffer": 300}
    with s.loader(64, **kw) as threads:
        expected = _epochs(threads)
    pool = procs.DecodePool()
    monkeypatch.setattr(procs, "_pool", pool)
    monkeypatch.setattr(procs, "_pool_pid", os.getpid())
    monkeypatch.setattr(sys, "executable", "/bin/false")
    pool.start(2)
    first = list(pool.children)
    for child in first:
        assert child.proc.wait(timeout=30) == 1
    with (
        pytest.warns(RuntimeWarning, match="before it could start") as warned,
        s.loader(64, processes=2, **kw) as loader,
    ):
        _same(_epochs(loader), expected)
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] == 0
    assert len([w for w in warned if "before it could start" in str(w.message)]) == 1
    with s.loader(64, processes=2, **kw) as loader:
        _same(_epochs(loader), expected)
    assert pool.children == first  # none started again
    pool.close()


def test_a_process_killed_after_its_hello_is_replaced_not_taken_for_a_broken_start(
    images: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode process killed after it had started, before the loader had read its hello,
    was said to have died "before it could start (its error is above)", of no error, and
    no process was started again in this Python (a probe's kill -9 in the first epoch)."""
    pool = procs.DecodePool()
    monkeypatch.setattr(procs, "_pool", pool)
    monkeypatch.setattr(procs, "_pool_pid", os.getpid())
    pool.start(1)
    (victim,) = pool.children
    assert limits.readable(victim.sock, 60)  # its hello sent, not read
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(timeout=30)
    with pytest.warns(RuntimeWarning, match="killed by SIGKILL .*between windows") as warned:
        assert pool.ready(1) == []
    assert not any("before it could start" in str(w.message) for w in warned)
    assert not pool.broken
    (fresh,) = pool.wait_ready(1)  # replaced
    assert fresh is not victim and fresh.alive()
    with snap.open(images).loader(64, processes=1, seed=1) as loader:
        assert sum(len(b["label"]) for b in loader) == 2400
        assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0
    pool.close()


def _mapped_windows(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("snap-window" in line for line in f)


def test_processes_unmap_the_windows_this_process_dropped(
    ready: procs.DecodePool, images: str
) -> None:
    s = snap.open(images)
    for rows in (200, 300, 400, 500):  # another window size each time: new memory
        with s.loader(64, processes=2, shuffle_buffer=rows) as loader:
            _epochs(loader)
        del loader
        gc.collect()
    with s.loader(64, processes=2, shuffle_buffer=100) as loader:
        _epochs(loader)  # its first window carries the news of what was dropped
        # What is left mapped is this loader's own windows (3 columns and slot tables, a
        # few windows), not the 4 loaders' before it.
        for child in ready.ready(2):
            assert _mapped_windows(child.proc.pid) <= 4 * 4, child.name


def _open_under(pid: int, folder: Path) -> list[str]:
    """The files under ``folder`` process ``pid`` has open."""
    fds = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


def test_a_closed_or_dropped_loader_leaves_no_file_open_in_the_processes(
    ready: procs.DecodePool, images: str, tmp_path: Path
) -> None:
    """The decode processes kept the shard files of up to KEEP_READERS loaders open after
    the loaders were closed or gone: a snapshot deleted since (gc, a sweep's old versions)
    kept its disk space until the training process ended."""
    record = '{"label": np.int64(n), "x": np.full((4, 5), n % 251, np.uint8)}'
    url = numbered_snapshot(tmp_path, 600, record, "8KiB")
    loader = snap.open(url).loader(64, seed=2, processes=2)
    first = _epochs(loader)
    children = ready.ready(2)
    assert any(_open_under(c.proc.pid, tmp_path) for c in children)  # they read it
    for step in ("close", "drop"):
        if step == "close":
            loader.close()
        else:
            loader.set_epoch(0)  # a closed loader reads again (its files opened again)
            _same(_epochs(loader), first)
            del loader
            gc.collect()
        for c in ready.ready(2):  # (asked, it has read what was sent before)
            assert c.open_readers() == [] and not _open_under(c.proc.pid, tmp_path), step


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"processes": -1}, "processes must be an integer >= 0"),
        ({"processes": True}, "processes must be an integer >= 0"),
        ({"processes": "2"}, "processes must be an integer >= 0"),
        ({"processes": 2, "columns": ["label", "name"]}, "column 'name' is str:"),
    ],
)
def test_bad_processes_options_are_errors_naming_the_option(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    def preprocess(i: int) -> Any:
        yield {"label": i, "name": f"record {i}"}

    out = str(tmp_path / "s")
    snap.create(preprocess, out, inputs=[0, 1, 2], workers=0)
    with pytest.raises(snap.OptionError, match=message):
        snap.open(out).loader(2, **kwargs)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (lambda i: {"label": i, "col": np.zeros((i % 3, 4), np.float32)}, "float32[?,?] (ragged)"),
        (lambda i: {"label": i, "col": f"record {i}"}, "str"),
        (  # (an Arrow table the pipeline yields: a date has no numpy window column)
            lambda i: pa.table({"label": [i], "col": pa.array([i], pa.int32()).cast(pa.date32())}),
            "date32[day]",
        ),
    ],
)
def test_a_column_the_processes_cannot_write_is_named_as_it_reads(
    tmp_path: Path, value: Any, shown: str
) -> None:
    """As ``inspect`` shows its type (a ragged 2-D column was shown as its Arrow storage,
    ``struct<data: list<item: float> ...>``; found by a probe)."""

    @snap.ragged("col")
    def preprocess(i: int) -> Any:
        yield value(i)

    out = str(tmp_path / "s")
    snap.create(preprocess, out, inputs=[0, 1, 2], workers=0)
    with pytest.raises(snap.OptionError) as err:
        snap.open(out).loader(2, processes=1)
    assert f"column 'col' is {shown}: leave it out (columns=[...]) or use processes=0" in str(
        err.value
    )
    with snap.open(out).loader(2, processes=1, columns=["label"]) as left_out:
        assert sorted(int(x) for b in left_out for x in b["label"]) == [0, 1, 2]


def test_memory_filesystem_snapshots_are_refused_with_processes(tmp_path: Path) -> None:
    def preprocess(i: int) -> Any:
        yield {"label": i}

    url = f"memory://{tmp_path.name}/s"
    snap.create(preprocess, url, inputs=[0, 1], workers=0)
    with pytest.raises(snap.OptionError, match="memory://"):
        snap.open(url).loader(2, processes=1)


def test_more_processes_than_cores_is_warned_of(images: str) -> None:
    # as torch's DataLoader warns of more workers than cores: they add memory, not speed
    cores = os.cpu_count() or 1
    with pytest.warns(UserWarning, match=rf"processes={cores + 1} on {cores} cores: decode") as w:
        loader = snap.open(images).loader(8, processes=cores + 1)
    loader.close()
    # shown at the line that made the loader (it pointed at snap's keywords.py, in a wrapper)
    assert [x.filename for x in w] == [__file__]


def test_windows_dropped_in_the_main_thread_are_unmapped_without_another_message(
    ready: procs.DecodePool, images: str
) -> None:
    """(The review's.) A loader dropped without close(), and the last batch of a `with`
    kept past it, left their windows mapped in the decode processes until some later loader
    sent them a message (none may): the main thread's finalizers now hand them to a sender
    thread, which tells the processes at once."""
    s = snap.open(images)
    loader = s.loader(64, processes=2, shuffle_buffer=300)
    kept = _epochs(loader)
    del loader, kept
    with s.loader(64, processes=2, shuffle_buffer=400) as other:
        for b in other:
            assert len(b["label"])  # (the last one kept past the with)
    del b
    gc.collect()
    deadline = time.monotonic() + 30
    pids = [c.proc.pid for c in ready.ready(2)]
    while any(_mapped_windows(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # (polling a condition, with a deadline)
    assert [_mapped_windows(p) for p in pids] == [0, 0]
