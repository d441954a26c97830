"""A loader asked for more memory than it can have says so, and what to lower.

A window holds the larger of batch_size and shuffle_buffer records, at most an epoch's; a
batch bigger than the snapshot is one batch of every record (``batch_size=10**7`` over 500
records used to ask for 120 GB and fail with a bare ENOMEM). Requests larger than the memory
the process may use are refused before they are made (shared memory for decode processes is
not reserved when made: it would kill the process once filled), and an allocation that
fails becomes an OutOfMemoryError, in every way the loader reads.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.readers import gather, memory, shm, window

from .conftest import numbered_snapshot

RECORDS = 200
RECORD = '{"label": np.int64(n), "x": np.full(64, k, np.uint8)}'
ROW_BYTES = 8 + 64  # label and x: what a window holds per record
WAYS: dict[str, dict[str, Any]] = {
    "shuffled": {},
    "in order": {"shuffle": False},
    "decode processes": {"processes": 2},
    "rank 1 of 2": {"world_size": 2, "rank": 1},
    "global batch": {"global_batch_size": RECORDS, "batch_size": None},
}


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("oom")
    (root / "zstd").mkdir()
    (root / "none").mkdir()
    return {
        "zstd": numbered_snapshot(root / "zstd", RECORDS, RECORD, "4KiB"),
        "none": snap.create(
            lambda: (eval(RECORD, {"np": np, "n": n, "k": n % 7}) for n in range(RECORDS)),
            str(root / "none" / "snap"), workers=0, compression="none", shard_size="4KiB",
        ).path,
    }  # fmt: skip


@pytest.mark.parametrize("way", list(WAYS))
def test_a_batch_larger_than_the_snapshot_is_one_batch_of_it(
    numbered: dict[str, str], way: str
) -> None:
    # 10**9 records of 72 bytes would be 67 GiB: more than this machine, and any CI's, has
    kw = {"batch_size": 10**9, "seed": 3, **WAYS[way]}
    loader = snap.open(numbered["zstd"]).loader(**kw)
    batches = [b["label"].copy() for b in loader]
    expected = RECORDS // 2 if "rank" in kw else RECORDS
    assert [len(b) for b in batches] == [expected]
    if "rank" not in kw:
        assert sorted(batches[0].tolist()) == list(range(RECORDS))
    assert loader.stats()["settings"]["window_rows"] == expected  # what a window may hold


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_global_batch_larger_than_an_epoch_is_refused(
    numbered: dict[str, str], drop_last: bool
) -> None:
    # every global batch is full (the last one filled up from the epoch's start): one of
    # 10**9 records over 200 would have repeated each 5 million times (and filled the memory
    # with its plan before any check of the window)
    s = snap.open(numbered["zstd"])
    with pytest.raises(snap.OptionError, match=f"an epoch of {RECORDS} records holds no global"):
        s.loader(global_batch_size=RECORDS + 1, drop_last=drop_last)
    assert len(s.loader(global_batch_size=RECORDS, drop_last=drop_last)) == 1


def small_limit(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    """As a cgroup limit of ``nbytes`` would, for a process holding nothing yet:
    :func:`memory.limit` reads it."""
    monkeypatch.setattr(memory, "limit", lambda: nbytes)
    monkeypatch.setattr(memory, "in_use", lambda: 0)


@pytest.mark.parametrize("way", list(WAYS))
def test_a_window_larger_than_the_memory_limit_is_refused_before_it_is_made(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    made: list[tuple[int, ...]] = []
    real_shm = shm.empty
    monkeypatch.setattr(
        shm, "empty", lambda shape, dtype: made.append(shape) or real_shm(shape, dtype)
    )
    # two windows of 100 records (one filled while the other is served) are one byte more
    small_limit(monkeypatch, 2 * 100 * ROW_BYTES - 1)
    kw = {"batch_size": 100, "shuffle_buffer": 100, "seed": 0, **WAYS[way]}
    if "global_batch_size" in kw:
        kw["global_batch_size"] = 100
    with pytest.raises(snap.OutOfMemoryError) as err:
        list(snap.open(numbered["zstd"]).loader(**kw))
    message = str(err.value)
    assert (
        "a loader window of 100 records of 72 bytes (two of them: one filled while the "
        "other is served) needs 14.1 KiB" in message
    )
    assert "lower them" in message and "batch_size and shuffle_buffer" in message
    assert not [s for s in made if s[0] >= 100], "a slab was made before the check"
    assert isinstance(err.value, MemoryError) and isinstance(err.value, snap.SnapError)


def test_a_gathered_batch_larger_than_the_memory_limit_is_refused(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gather, "GATHER_MIN_VALUE_BYTES", 0)  # 36-byte values gather too
    loader = snap.open(numbered["none"]).loader(batch_size=50, shuffle_buffer=50, seed=0)
    assert loader._context.windows.gather
    first = [b["label"].copy() for b in loader]  # the first epoch checks every shard
    assert len(first) == RECORDS // 50
    # later epochs of an uncompressed snapshot gather from the shard files into buffers of
    # their own, a column at a time: x is 50 x 64 bytes a batch
    small_limit(monkeypatch, 50 * 64 - 1)
    with pytest.raises(snap.OutOfMemoryError, match=r"^a batch's column needs 3.1 KiB, more"):
        list(loader)


@pytest.mark.parametrize(
    "error", [MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory")], ids=repr
)
@pytest.mark.parametrize("way", list(WAYS))
def test_a_failed_allocation_is_an_out_of_memory_error(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch, error: Exception, way: str
) -> None:
    def fail(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        raise error

    monkeypatch.setattr(window, "slab_empty", fail)  # threads' slabs
    monkeypatch.setattr(shm, "empty", fail)  # decode processes' slabs
    with pytest.raises(snap.OutOfMemoryError) as err:
        list(snap.open(numbered["zstd"]).loader(**{"batch_size": 64, "seed": 0, **WAYS[way]}))
    assert str(err.value).startswith("out of memory: could not allocate ")
    assert "for a loader window of " in str(err.value) and "lower them" in str(err.value)
    assert err.value.__cause__ is error


def test_other_allocation_errors_are_not_called_out_of_memory(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        raise OSError(errno.EMFILE, "Too many open files")  # memfd_create's, say

    monkeypatch.setattr(shm, "empty", fail)
    with pytest.raises(OSError) as err:
        list(snap.open(numbered["zstd"]).loader(batch_size=64, processes=2))
    assert err.value.errno == errno.EMFILE
    assert not isinstance(err.value, snap.OutOfMemoryError)


def test_batch_buffers_too_large_for_any_machine_are_refused() -> None:
    with pytest.raises(snap.OutOfMemoryError, match=r"a batch's column needs .* TiB, more than"):
        gather.BatchPool().get(1 << 60)


def test_the_limit_is_physical_memory_or_a_cgroup_limit_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory.limit.cache_clear()
    monkeypatch.setattr(memory, "CGROUP_LIMITS", ())
    physical = memory.limit()
    assert physical > 2**26  # this machine has more than 64 MiB
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2: no limit
    v1.write_text(f"{2**30}\n")
    for files, expected in (((v2,), physical), ((v2, v1), min(physical, 2**30))):
        memory.limit.cache_clear()
        monkeypatch.setattr(memory, "CGROUP_LIMITS", tuple(map(str, files)))
        assert memory.limit() == expected
    memory.limit.cache_clear()


def test_snap_bench_answers_in_one_line(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    small_limit(monkeypatch, 64 * ROW_BYTES - 1)
    result = CliRunner().invoke(cli, ["bench", numbered["zstd"], "--batch-size", "64"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    # (auto sized the shuffle window to a quarter of the limit: the batch is the window)
    assert len(lines) == 1 and lines[0].startswith("snap: error: a loader window of 64 records")
    assert "Traceback" not in result.output


def test_a_prefetch_deeper_than_memory_is_refused_when_it_can_fill(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = snap.open(numbered["zstd"])
    small_limit(monkeypatch, 50 * 10 * ROW_BYTES)  # 10 batches of 50 records fit, not 11
    with pytest.raises(snap.OutOfMemoryError, match=r"^prefetch=11 \(11 batches of 50 records\)"):
        s.loader(batch_size=50, prefetch=11, epochs=None)  # endless: it could hold 11
    # an epoch of 200 records has 4 batches: a deeper prefetch never holds more than those
    assert len(list(s.loader(batch_size=50, prefetch=1000, epochs=2))) == 8


LIMITED = """
import resource, sys
import snapshot_cli as snap
from snapshot_cli.readers import verify as V
s = snap.open(sys.argv[1])
vm = next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (int(sys.argv[2]) << 20), resource.RLIM_INFINITY))
try:
    report = V.verify(s, threads=1)
    print("report", report.ok, [d.problem for d in report.damaged][:1])
except snap.OutOfMemoryError as err:
    print("out of memory", err)
"""


@pytest.mark.parametrize("margin_mib", [40, 120, 250])  # (the failing call differs: mmap, malloc)
def test_verify_short_of_memory_calls_no_shard_damaged(tmp_path: Path, margin_mib: int) -> None:
    """Under a memory limit (`ulimit -v`, a job's), `snap verify` reported healthy shards
    DAMAGED ("cannot be read: [Errno 12] Cannot allocate memory", "malloc of size ... failed")
    and advised deleting them."""
    import subprocess
    import sys

    def f(i: int) -> Any:
        yield {"x": np.random.default_rng(i).integers(0, 256, 96 << 20, np.uint8)}

    out = str(tmp_path / "s")
    snap.create(f, out, inputs=[0, 1], workers=0)
    (tmp_path / "limited.py").write_text(LIMITED)
    res = subprocess.run([sys.executable, str(tmp_path / "limited.py"), out, str(margin_mib)],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    said = res.stdout.strip()
    assert said.startswith("out of memory") and "is not damaged" in said, said


@pytest.mark.parametrize(
    "err",
    [RuntimeError("can't start new thread"),
     __import__("pyarrow").ArrowException(
         "Unknown error: Failed to launch worker thread: Resource temporarily unavailable"),
     MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory"),
     __import__("pyarrow").ArrowMemoryError("malloc of size 998784 failed")],
)  # fmt: skip
def test_a_read_short_of_memory_is_no_damaged_shard(err: BaseException) -> None:
    """The loader's decode: CorruptShardError "record batch 30 cannot be decoded: malloc of
    size 998784 failed" (a healthy shard)."""
    from snapshot_cli import faults

    said = faults.read_failure("shard s/shards/a-00000-0000.arrow", err)  # type: ignore[arg-type]
    assert isinstance(said, snap.OutOfMemoryError) and "is not damaged" in str(said)


@pytest.mark.parametrize(
    "message",
    ["malloc of size 94557999988736 failed", "capacity too large",
     "realloc of size 18446744073709551615 failed"],
)  # fmt: skip
def test_an_allocation_no_machine_could_make_is_damage(message: str) -> None:
    """A damaged length (a record batch of flipped bytes asking for 94 TB, or a size Arrow's
    allocator refuses outright) is the shard's fault, not the memory's: it stays a
    CorruptShardError (the mutation suite's fresh clones met both)."""
    import pyarrow as pa

    from snapshot_cli import faults

    err = pa.ArrowMemoryError(message)
    said = faults.read_failure("shard s/shards/a-00000-0000.arrow record batch 0", err)
    assert isinstance(said, snap.CorruptShardError), said
    huge = MemoryError("Unable to allocate 86.0 TiB for an array with shape (1, 2) and ...")
    assert isinstance(faults.read_failure("shard s", huge), snap.CorruptShardError)


def test_the_limit_of_the_processs_own_cgroup_or_an_ancestor(tmp_path: Path) -> None:
    """A Slurm step's or a systemd unit's cgroup is not the mount's root (a container's is):
    only the root's limit was read, and a window over the job's limit was killed."""
    v1 = tmp_path / "memory" / "slurm" / "job_7" / "step_0"
    v1.mkdir(parents=True)
    (v1.parent / "memory.limit_in_bytes").write_text(f"{600 << 20}\n")  # the job's
    (v1 / "memory.limit_in_bytes").write_text(f"{2**63 - 4096}\n")  # (v1's "none")
    membership = "12:memory:/slurm/job_7/step_0\n5:cpu,cpuacct:/slurm/job_7/step_0\n"
    assert memory.cgroup_limit(tmp_path, membership) == 600 << 20
    v2 = tmp_path / "v2" / "system.slice" / "run-u7.service"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text(f"{512 << 20}\n")
    (v2.parent / "memory.max").write_text("max\n")
    assert memory.cgroup_limit(tmp_path / "v2", "0::/system.slice/run-u7.service\n") == 512 << 20
    assert memory.cgroup_limit(tmp_path / "v2", "0::/elsewhere\n") is None


def test_a_real_cgroups_limit_is_read(tmp_path: Path) -> None:
    """A process moved into a cgroup of 600 MiB (as root, the v1 memory controller or v2's
    unified hierarchy, whichever this kernel mounts) reads that limit."""
    import subprocess
    import sys
    import uuid

    assert os.geteuid() == 0, "the suite runs as root (CI): it makes a cgroup"
    v1 = Path("/sys/fs/cgroup/memory")
    base = v1 if (v1 / "memory.limit_in_bytes").exists() else Path("/sys/fs/cgroup")
    group = base / f"snaptest-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        limit_file = "memory.limit_in_bytes" if base == v1 else "memory.max"
        (group / limit_file).write_text(str(600 << 20))
        code = "from snapshot_cli.readers import memory; print(memory.limit())"
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert int(res.stdout) == 600 << 20
    finally:
        group.rmdir()


def test_what_the_process_holds_already_counts(
    numbered: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two windows under the limit passed though the process held most of the rest (288 MiB
    windows under 600 MiB: killed once they were full)."""
    kw = {"batch_size": 100, "shuffle_buffer": 100, "seed": 0}
    monkeypatch.setattr(memory, "limit", lambda: 2 * 100 * ROW_BYTES + 1000)
    monkeypatch.setattr(memory, "in_use", lambda: 1000)
    assert sum(len(b["label"]) for b in snap.open(numbered["zstd"]).loader(**kw)) == RECORDS
    monkeypatch.setattr(memory, "in_use", lambda: 1001)
    with pytest.raises(snap.OutOfMemoryError, match=r"\(1001 B of it in use already\)"):
        list(snap.open(numbered["zstd"]).loader(**kw))


def test_in_use_is_this_processs_resident_memory() -> None:
    before = memory.in_use()
    block = np.ones(64 << 20, np.uint8)  # 64 MiB, touched
    assert memory.in_use() - before >= 60 << 20 and block[-1] == 1
