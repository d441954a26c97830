"""Fixtures of the writers' tests: the suite's local Ray cluster, one per pytest-xdist worker
and session, for every module that runs creates on it (``test_ray.py`` and others)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.servers import free_port

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray head node with 2 CPUs; its address is exported as RAY_ADDRESS.

    Each pytest-xdist worker starts its own, in a process group of its own, and stops only
    that group: ``ray stop --force`` stops every Ray process on the machine, the other
    worker's cluster too, mid-test (a create then failed with "cannot reach the Ray cluster").
    The Ray workers its raylet starts leave the group, and exit when the raylet is gone."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: Ray's socket paths
    port = free_port()
    env = {**os.environ, **RAY_ENV}
    start = subprocess.Popen(
        [ray_bin, "start", "--head", "--num-cpus=2", f"--port={port}", f"--temp-dir={temp}",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    said, _ = start.communicate(timeout=180)
    assert start.returncode == 0, said
    saved = {k: os.environ.get(k) for k in (*RAY_ENV, "RAY_ADDRESS")}
    os.environ.update(RAY_ENV, RAY_ADDRESS=f"127.0.0.1:{port}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):  # GCS, raylet, monitors (not SIGTERM)
            os.killpg(start.pid, signal.SIGKILL)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(temp, ignore_errors=True)
