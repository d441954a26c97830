"""A thread that cannot be started is the process's limit, said as one, never damage.

Under `ulimit -v` (or a job's or container's memory or pids limit) Linux refuses a new
thread's stack with EAGAIN: pyarrow's pool says "Failed to launch worker thread: Resource
temporarily unavailable", Python's threads "can't start new thread". `snap verify` called a
healthy record batch undecodable ("record batch 0 cannot be decoded: ... Failed to launch
worker thread") and advised deleting it; the loader, `create` and the CLI raised or printed
the bare RuntimeError ("a bug in snap").

Each case runs in a child whose threads' stacks are 1 GiB (RLIMIT_STACK when it starts: the
default of every thread Arrow starts) under an address-space limit 256 MiB above what it
maps once snap is loaded: no such thread can start, while every batch here fits. With
``threading.stack_size`` set small, Python's own threads start and only Arrow's fail.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from tests.conftest import REPO

CHILD = """
import resource, sys, threading
import numpy as np
import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.readers import verify as V
from snapshot_cli.writers import create as _  # (imported before the limit)
op, out, python_stack = sys.argv[1], sys.argv[2], int(sys.argv[3])
if python_stack:
    threading.stack_size(python_stack)  # Python's threads start; Arrow's do not
s = snap.open(out)

def f(i):
    yield {"x": np.arange(10)}

vm = next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
try:
    if op == "verify":
        report = V.verify(s, threads=1)
        print("report", report.ok, [d.problem for d in report.damaged][:1])
    elif op == "loader":
        print("records", sum(len(b["c0"]) for b in s.loader(batch_size=1, num_parallel_reads=1)))
    elif op.startswith("create"):  # create0, create1: --workers 0 or 1
        print("created", snap.create(f, out + "-new", inputs=[0], workers=int(op[-1])).url)
    elif op.startswith("cli "):  # "cli verify", "cli bench": that command of the snapshot
        cli([*op.split()[1:], out], standalone_mode=True)
except snap.OutOfMemoryError as err:
    print("out of memory:", err)
"""


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One record of 8 columns of 4 MiB, zstd: Arrow decompresses its buffers in its pool."""

    def f(i: int) -> Any:
        rng = np.random.default_rng(i)
        yield {f"c{k}": rng.integers(0, 256, 4 << 20, np.uint8) for k in range(8)}

    tmp = tmp_path_factory.mktemp("threads")
    out = tmp / "s"
    snap.create(f, str(out), inputs=[0], workers=0)
    (tmp / "child.py").write_text(CHILD)
    return out


def _run(out: Path, op: str, python_stack: int) -> subprocess.CompletedProcess[str]:
    def big_stacks() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 30, resource.RLIM_INFINITY))

    return subprocess.run(
        [sys.executable, str(out.parent / "child.py"), op, str(out), str(python_stack)],
        capture_output=True, text=True, timeout=300, preexec_fn=big_stacks,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # (this tree's snap, not the installed)
    )  # fmt: skip


@pytest.mark.parametrize("python_stack", [0, 8 << 20], ids=["no thread", "no Arrow thread"])
def test_verify_short_of_threads_calls_no_shard_damaged(
    compressed: Path, python_stack: int
) -> None:
    res = _run(compressed, "verify", python_stack)
    said = res.stdout.strip()
    assert res.returncode == 0 and said.startswith("out of memory:"), res.stdout + res.stderr
    assert "no thread could be started" in said and "ulimit" in said, said
    if python_stack:  # Arrow's pool, decoding the shard's record batch
        assert "could not be read" in said and "the shard is not damaged" in said, said
        assert "Failed to launch worker thread" in said, said
    else:  # verify's own threads
        assert f"verify of {compressed}" in said and "(threads=)" in said, said  # (Python)


@pytest.mark.parametrize("python_stack", [0, 8 << 20], ids=["no thread", "no Arrow thread"])
def test_a_loader_short_of_threads_says_so_or_needs_none_of_arrows(
    compressed: Path, python_stack: int
) -> None:
    res = _run(compressed, "loader", python_stack)
    said = res.stdout.strip()
    if python_stack:  # the loader decodes in its own threads, not in Arrow's pool
        assert res.returncode == 0 and said == "records 1", res.stdout + res.stderr
        return
    assert res.returncode == 0 and said.startswith("out of memory:"), res.stdout + res.stderr
    assert "no thread could be started" in said and "num_parallel_reads" in said, said
    assert "damaged" not in said.replace("is not damaged", ""), said


@pytest.mark.parametrize("workers", [0, 1])
def test_create_short_of_threads_says_so_and_leaves_no_snapshot(
    compressed: Path, workers: int
) -> None:
    res = _run(compressed, f"create{workers}", 0)
    said = res.stdout.strip()
    assert res.returncode == 0 and said.startswith("out of memory:"), res.stdout + res.stderr
    assert f"create of {compressed}-new: no thread could be started" in said, said
    # (fewer workers is no answer where there are none: it was advised with --workers 0)
    assert ("use fewer --workers" in said) is (workers > 0), said
    assert not (Path(f"{compressed}-new") / "manifest.json").exists()


# the loader's advice in its Python keywords, which a command names as its flags or not at all
API_WORDS = re.compile(
    r"num_parallel_reads|shuffle_buffer|processes=|shuffle=False|close\(\)|columns=|batch_size"
)


@pytest.mark.parametrize("command", ["verify", "bench", "head", "inspect"])
@pytest.mark.parametrize("python_stack", [0, 8 << 20], ids=["no thread", "no Arrow thread"])
def test_a_command_short_of_threads_says_so_in_one_line_in_its_words(
    compressed: Path, python_stack: int, command: str
) -> None:
    """``snap bench`` and ``snap head`` said "read with fewer threads (a smaller
    num_parallel_reads, no processes=)": words of the Python API (a probe)."""
    res = _run(compressed, f"cli {command}", python_stack)
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr and "bug in snap" not in res.stderr, res.stderr
    if command in ("inspect", "head"):  # (inspect reads no record, head without threads)
        assert res.returncode == 0, res.stderr
        return
    if python_stack and command == "bench" and res.returncode == 0:
        return  # (it decodes in threads of its own, not Arrow's: as many as fit, as work comes)
    # (verify has Arrow read each shard as a file: its IO pool starts a thread)
    assert res.returncode == 1, res.stdout + res.stderr
    said = lines[-1]
    assert "DAMAGED" not in res.stdout + res.stderr, res.stdout
    assert said.startswith("snap: error: ") and not API_WORDS.search(said), said
    if python_stack and command == "bench" and "no thread could be started" not in said:
        # (its threads' 8 MiB stacks count under the limit too: where more had started, its
        # window did not fit, a memory limit, said as one; in CI it said "columns=[...]")
        assert said.startswith("snap: error: out of memory: could not allocate"), said
        assert "--batch-size and --shuffle-buffer" in said and "(--columns)" in said, said
        return
    assert "no thread could be started" in said, said
    assert {"verify": "(--threads)", "bench": "--num-parallel-reads"}[command] in said, said
