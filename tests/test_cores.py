"""snap's "one per core" defaults count the CPUs the job was given, not the machine's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.cores import cgroup_quota


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_v2_quota_of_the_cgroup_or_an_ancestor(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "max 100000\n")
    write(tmp_path / "slurm/job_7/cpu.max", "400000 100000\n")
    write(tmp_path / "slurm/job_7/step_0/cpu.max", "max 100000\n")
    assert cgroup_quota(tmp_path, "0::/slurm/job_7/step_0\n") == 4.0  # the ancestor's
    write(tmp_path / "slurm/job_7/step_0/cpu.max", "150000 100000\n")
    assert cgroup_quota(tmp_path, "0::/slurm/job_7/step_0\n") == 1.5  # the lowest
    assert cgroup_quota(tmp_path, "0::/elsewhere\n") is None  # only "max" on the way up


def test_a_container_sees_its_own_cgroup_as_the_root(tmp_path: Path) -> None:
    # /proc/self/cgroup names the host's path; the container's mount shows its cgroup alone
    write(tmp_path / "cpu.max", "200000 100000")
    assert cgroup_quota(tmp_path, "0::/docker/abc123\n") == 2.0


def test_a_v1_quota(tmp_path: Path) -> None:
    write(tmp_path / "cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us", "250000\n")
    write(tmp_path / "cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us", "100000\n")
    write(tmp_path / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    membership = "4:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1\n"
    assert cgroup_quota(tmp_path, membership) == 2.5
    assert cgroup_quota(tmp_path, "3:cpu,cpuacct:/\n") is None  # -1: none set


@given(st.text(max_size=40), st.text(max_size=40))
def test_any_text_in_the_files_is_no_quota_or_a_positive_one(cpu_max: str, groups: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write(root / "cpu.max", cpu_max)
        write(root / "cpu/cpu.cfs_quota_us", cpu_max)
        write(root / "cpu/cpu.cfs_period_us", cpu_max)
        got = cgroup_quota(root, groups + "\n0::/\n3:cpu:/\n")
        assert got is None or got > 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux: CPU affinity")
def test_a_job_given_one_cpu_gets_one_worker_and_one_read_thread(tmp_path: Path) -> None:
    """As ``taskset -c 0`` or a Slurm cpuset: os.cpu_count() is still the machine's."""
    if os.cpu_count() == 1:
        pytest.skip("the machine has one CPU: nothing to tell apart")  # (not this project's)
    script = tmp_path / "one.py"
    script.write_text(
        "import json, os, sys\n"
        "os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "import numpy as np, snapshot_cli as snap\n"
        "from snapshot_cli.writers.options import CreateOptions\n"
        "def f(i):\n"
        "    yield {'x': np.full(4, i)}\n"
        "if __name__ == '__main__':\n"
        "    snap.create(f, sys.argv[1], inputs_from=lambda: list(range(8)), workers=0)\n"
        "    s = snap.open(sys.argv[1])\n"
        "    stats = s.loader(2, shuffle=False).stats()\n"
        "    print(json.dumps({'machine': os.cpu_count(), 'workers':\n"
        "        CreateOptions().worker_count, 'reads': stats['settings']['parallel_reads']}))\n"
    )
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "s")], check=True,
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    got = json.loads(out.splitlines()[-1])
    assert got["machine"] > 1 and (got["workers"], got["reads"]) == (1, 1), got
