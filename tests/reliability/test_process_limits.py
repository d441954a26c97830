"""A process's own limits (``ulimit -f``, ``-t``, a pids limit), met by snap's commands and
their child processes: each said as that limit, with what to do, and nothing half-written left.

Real processes with their limits set (``resource.setrlimit`` before they start, or as they
run): a file-size limit makes writes fail with EFBIG (Python ignores SIGXFSZ); a CPU-time
limit kills with SIGXCPU at the soft limit and SIGKILL at the hard one. A thread that cannot
start is made as tests/reliability/test_thread_limits.py makes it: 1 GiB stacks under an
address-space limit.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from tests.conftest import REPO, snap_subprocess

SNAP = str(Path(sys.executable).with_name("snap"))


def file_size_limit(nbytes: int) -> Callable[[], None]:
    """A preexec_fn: the child may write files of at most ``nbytes`` bytes."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.RLIM_INFINITY))


def _python(
    code: str, *args: str, env: dict[str, str] | None = None, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports this tree's snap."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=300, check=False,
        env={**(env or os.environ), "PYTHONPATH": str(REPO)}, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> str:
    """400 records of 4 KiB: a loader's window is over a 64 KiB file-size limit."""

    def f(i: int) -> object:
        yield {"i": i, "x": np.full(1024, i, np.float32)}

    out = str(tmp_path_factory.mktemp("wide") / "s")
    snap.create(f, out, inputs=range(400), workers=0)
    return out


def _pipeline(tmp_path: Path, body: str) -> tuple[str, str]:
    """A pipeline file ``prep.py:f`` of ``body`` and two inputs: (spec, input pattern)."""
    (tmp_path / "prep.py").write_text(textwrap.dedent(body))
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(2):
        (raw / f"{i}.bin").write_bytes(bytes([i]) * 100)
    return f"{tmp_path / 'prep.py'}:f", str(raw / "*.bin")


# --- a file-size limit (ulimit -f) ---------------------------------------------------------


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_shard_over_the_file_size_limit_is_said_so_and_not_left(
    tmp_path: Path, workers: str
) -> None:
    spec, pattern = _pipeline(tmp_path, """
        import numpy as np
        def f(path):
            yield {"x": np.random.default_rng(0).integers(0, 256, 1 << 20, np.uint8)}
    """)  # fmt: skip
    out = tmp_path / "out"
    res = snap_subprocess("create", spec, str(out), "--input", pattern, "--workers", workers,
                          preexec_fn=file_size_limit(256 << 10))  # fmt: skip
    assert res.returncode == 1, res.stderr
    said = res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr and "/shards/" in said and "EFBIG" in said, said
    assert "this process's file-size limit (256.0 KiB: ulimit -f 256)" in said, said
    assert "--shard-size" in said and "it resumes" not in said, said
    # (a record batch, 1 MiB here, is over the limit too: a smaller shard alone is not enough)
    assert "--batch-bytes" in said, said
    # The partial shard is removed at once (it stayed until the next create or gc).
    assert not list((out / "shards").glob("*.arrow")), sorted((out / "shards").iterdir())
    assert not (out / "manifest.json").exists()


def test_a_task_table_over_the_file_size_limit_names_the_limit_not_the_shard_size(
    tmp_path: Path,
) -> None:
    # 3,000 tiny inputs: each shard is small; the version's task table lists them all.
    res = _python("""
        import resource, sys
        import snapshot_cli as snap
        def f(i):
            yield {"i": i}
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 10, resource.RLIM_INFINITY))
        try:
            snap.create(f, sys.argv[1], inputs=list(range(3000)), workers=0, inputs_per_task=3000)
        except snap.StorageError as err:
            print(err)
    """, str(tmp_path / "s"))  # fmt: skip
    said = res.stdout.strip()
    assert res.returncode == 0 and "tasks.json: File too large (EFBIG)" in said, res.stderr
    assert "this process's file-size limit (8.0 KiB: ulimit -f 8): raise it" in said, said
    assert "shard-size" not in said and "FAT32" not in said, said


def test_decode_processes_over_the_file_size_limit_say_so(wide: str) -> None:
    res = _python("""
        import resource, sys
        import snapshot_cli as snap
        s = snap.open(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))
        try:
            print(sum(len(b["i"]) for b in s.loader(64, processes=1)))
        except snap.OutOfMemoryError as err:
            print("out of memory:", err)
    """, wide)  # fmt: skip
    said = res.stdout.strip()
    assert res.returncode == 0 and said.startswith("out of memory:"), res.stdout + res.stderr
    assert "decode processes' shared memory" in said, said
    assert "this process's file-size limit (64.0 KiB: ulimit -f 64)" in said, said
    assert "processes=0" in said and "shard-size" not in said, said


def test_a_trace_that_cannot_be_written_is_named_and_not_left_half(
    wide: str, tmp_path: Path
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"old": 1}')  # a trace of an earlier run, kept whole
    res = snap_subprocess("bench", wide, "--epochs", "1", "--trace", str(trace),
                          preexec_fn=file_size_limit(1 << 10))  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    said = res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr and f"--trace {trace}" in said, said
    assert "EFBIG" in said and "file-size limit (1.0 KiB: ulimit -f 1)" in said, said
    assert "it resumes" not in said and "shard-size" not in said, said
    assert json.loads(trace.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_a_file_size_limit_leaves_no_cut_bytecode_behind(tmp_path: Path) -> None:
    """A snap first imported under ``ulimit -f 8`` (here: a copy of this tree, not compiled
    yet) had Python write its modules' ``.pyc`` files cut at 8 KiB and rename them into
    place: every later import, limit or not, failed "EOFError: marshal data too short"."""
    shutil.copytree(REPO / "snapshot_cli", tmp_path / "snapshot_cli",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = "import snapshot_cli.faults, snapshot_cli.readers.loader, snapshot_cli.cli"
    run = [sys.executable, "-c", code]
    kw: dict[str, object] = {"cwd": tmp_path, "env": {**env, "PYTHONPATH": str(tmp_path)}}
    limited = subprocess.run(run, capture_output=True, text=True, timeout=120,
                             preexec_fn=file_size_limit(8 << 10), **kw)  # type: ignore[call-overload]  # fmt: skip
    assert limited.returncode == 0, limited.stderr
    later = subprocess.run(run, capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]
    assert later.returncode == 0, later.stderr  # (each module compiled whole, and cached)
    cached = list((tmp_path / "snapshot_cli").rglob("*.pyc"))
    assert len(cached) > 20 and max(p.stat().st_size for p in cached) > 8 << 10


# --- a CPU-time limit (ulimit -t) ------------------------------------------------------------

BURN = """
import signal
def f(path):
    {ignore}
    while True:
        pass
    yield {{"x": 1}}
"""


@pytest.mark.parametrize(
    ("ignore", "signal_said"),
    [("", "SIGXCPU: it used up its CPU-time limit (3 s: ulimit -t)"),
     ("signal.signal(signal.SIGXCPU, signal.SIG_IGN)",
      "SIGKILL (out of memory? or at its CPU-time limit of 5 s: ulimit -t)")],
    ids=["soft", "hard"],
)  # fmt: skip
def test_a_worker_over_its_cpu_time_limit_is_said_so(
    tmp_path: Path, ignore: str, signal_said: str
) -> None:
    spec, pattern = _pipeline(tmp_path, BURN.format(ignore=ignore))

    def cpu_limit() -> None:  # this process's too: a worker inherits it (snap idles: < 3 s)
        resource.setrlimit(resource.RLIMIT_CPU, (3, 5))

    res = snap_subprocess("create", spec, str(tmp_path / "out"), "--input", pattern,
                          "--workers", "1", preexec_fn=cpu_limit)  # fmt: skip
    assert res.returncode == 1, res.stderr
    said = res.stderr.strip().splitlines()[-1]
    assert f"a worker process was killed by {signal_said} while running task" in said, said
    if ignore == "":
        assert "crash in native code" not in said, said


# --- a signal the worker raised itself --------------------------------------------------------

SELF_INTERRUPTED = """
import os, signal
from snapshot_cli.writers import worker

def interrupt():  # as OpenBLAS does when it cannot start its threads (a pids limit)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)

if worker.IMPORTING and {at_import}:
    interrupt()

def f(path):
    interrupt()
    yield {{"x": 1}}
"""


@pytest.mark.parametrize("at_import", [True, False], ids=["loading", "running a task"])
def test_a_worker_that_interrupted_itself_is_not_said_killed(
    tmp_path: Path, at_import: bool
) -> None:
    spec, pattern = _pipeline(tmp_path, SELF_INTERRUPTED.format(at_import=at_import))
    res = snap_subprocess("create", spec, str(tmp_path / "out"), "--input", pattern,
                          "--workers", "1")  # fmt: skip
    assert res.returncode == 1, res.stderr
    said = res.stderr.strip().splitlines()[-1]
    assert "a worker process was interrupted by a SIGINT it raised itself or got from " \
           "elsewhere (not a Ctrl-C" in said, said  # fmt: skip
    assert "pthread_create failed" in said and "pids limit" in said, said
    assert "killed by SIGINT" not in said and "crash in native code" not in said, said
    assert ("before it could run a task" in said) is at_import, said


# --- a thread that cannot start --------------------------------------------------------------

NO_ARROW_THREAD = """
import os, resource, sys, threading
import numpy as np
import snapshot_cli as snap
from snapshot_cli.writers import create as _  # (imported before the limit)
threading.stack_size(8 << 20)  # Python's threads start; Arrow's (1 GiB stacks) do not
mib = int(sys.argv[3])  # zstd buffers of this size, made before the limit
rng = np.random.default_rng(0)
columns = {f"c{k}": rng.integers(0, 256, mib << 20, np.uint8) for k in range(8)}

def f(i):
    yield columns

vm = next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (int(sys.argv[2]) << 20), resource.RLIM_INFINITY))
try:
    print("created", snap.create(f, sys.argv[1], inputs=[0], workers=0).num_records)
except snap.SnapError as err:
    print(type(err).__name__, err)
shards = os.path.join(sys.argv[1], "shards")
print(sorted(os.listdir(shards)) if os.path.exists(shards) else [])
"""


def _no_arrow_thread(out: Path, margin_mib: int, column_mib: int) -> tuple[str, list[str]]:
    def big_stacks() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 30, resource.RLIM_INFINITY))

    res = _python(
        NO_ARROW_THREAD, str(out), str(margin_mib), str(column_mib), preexec_fn=big_stacks
    )
    assert res.returncode == 0, res.stdout + res.stderr
    said, left = res.stdout.strip().splitlines()
    return said, eval(left)


def test_a_shard_writer_needs_no_thread_of_arrows(tmp_path: Path) -> None:
    """Arrow's pool compressed a shard's buffers, and a create whose Arrow threads could not
    start failed (or crashed, where some did: tests/reliability/test_arrow_thread_pool.py)."""
    said, left = _no_arrow_thread(tmp_path / "s", 768, 4)
    assert said == "created 1" and len(left) == 1, (said, left)


def test_a_shard_writer_out_of_memory_says_so_and_leaves_no_part(tmp_path: Path) -> None:
    """Arrow's failed allocation, compressing a shard's buffers, was a storage fault: "failed
    while writing ...: malloc of size 4194304 failed; check the URL and the storage"; numpy's,
    copying a record yielded, came out of snap.create as itself. Room here for the records'
    copy (8 columns of 32 MiB), not for it compressed too: which of the two fails first is
    the allocators' (of this numpy's and pyarrow's versions), and each is said the same way."""
    out = tmp_path / "s"
    said, left = _no_arrow_thread(out, 384, 32)
    assert said.startswith("OutOfMemoryError "), said
    where = ("input 0 (task 0), 1st item it yielded: ", f"writing {out}/shards/")
    assert any(said.startswith(f"OutOfMemoryError {w}") for w in where), said
    assert said.count("out of memory") == 1 and "ulimit -v" in said, said
    assert "--batch-bytes" in said, said
    assert "failed while writing" not in said and "check the URL" not in said, said
    assert left == []  # (the shard begun was deleted)


# --- decode processes leave nothing open -----------------------------------------------------

CLEAN_EXIT = """
import sys
import snapshot_cli as snap
from snapshot_cli.readers import procs
assert len(procs.pool().wait_ready(1)) == 1  # (the loader's windows go through it)
print(sum(len(b["i"]) for b in snap.open(sys.argv[1]).loader(64, processes=1)))
"""


@pytest.mark.parametrize("env", [{"PYTHONDEVMODE": "1"}, {"PYTHONWARNINGS": "error"}],
                         ids=["dev mode", "warnings are errors"])  # fmt: skip
def test_decode_processes_exit_without_resource_warnings(wide: str, env: dict[str, str]) -> None:
    res = _python(CLEAN_EXIT, wide, env={**os.environ, **env})
    assert res.returncode == 0 and res.stdout.split() == ["400"], res.stdout + res.stderr
    assert "ResourceWarning" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


# --- a current directory deleted -------------------------------------------------------------


def test_relative_paths_in_a_deleted_directory_say_so(tmp_path: Path, wide: str) -> None:
    spec, pattern = _pipeline(tmp_path, """
        def f(path):
            yield {"x": 1}
    """)  # fmt: skip
    gone = tmp_path / "gone"
    shutil.copytree(wide, tmp_path / "copy")
    for args in (["create", spec, "out", "--input", pattern, "--workers", "0"],
                 ["inspect", "copy"], ["bench", "copy"]):  # fmt: skip
        gone.mkdir()

        def in_deleted_directory(where: Path = gone) -> None:
            os.chdir(where)
            os.rmdir(where)

        res = subprocess.run(
            [SNAP, *args],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=in_deleted_directory,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # (this tree's snap)
        assert res.returncode == 1, res.stderr
        said = res.stderr.strip().splitlines()[-1]
        assert said.startswith(f"snap: error: cannot open {args[1 if args[0] != 'create' else 2]}")
        assert "the current directory was deleted" in said and "absolute paths" in said, said


def test_a_relative_pipeline_file_in_a_deleted_directory_says_so(tmp_path: Path) -> None:
    """``snap create prep.py:f ...`` in a deleted directory said "No such file or directory
    (ENOENT)", naming nothing (OUTPUT and inputs said why; the pipeline's file did not)."""
    gone = tmp_path / "gone"
    gone.mkdir()

    def in_deleted_directory() -> None:
        os.chdir(gone)
        os.rmdir(gone)

    res = subprocess.run(
        [SNAP, "create", "prep.py:f", str(tmp_path / "out"), "--input", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=120, preexec_fn=in_deleted_directory,
        check=False, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    said = res.stderr.strip().splitlines()[-1]
    assert said.startswith("snap: error: cannot load the pipeline 'prep.py:f'"), said
    assert "the current directory was deleted" in said, said
