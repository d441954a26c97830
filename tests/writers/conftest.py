"""Fixtures of the writers' tests: the suite's local Ray cluster for every module that runs
creates on it (``test_ray.py`` and others): one head node a pytest-xdist worker starts for a
run of such tests and stops after its last (:func:`pytest_runtest_teardown`). The suite
runs them one after another, in one worker (tests/conftest.py orders them first)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.infra.servers import free_port

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class _Head:
    """A local Ray head node with 2 CPUs, its address exported as RAY_ADDRESS while it runs.

    Started in a process group of its own, and only that group stopped: ``ray stop --force``
    stops every Ray process on the machine, another worker's cluster too, mid-test (a create
    then failed with "cannot reach the Ray cluster"). The Ray workers its raylet starts leave
    the group, and exit when the raylet is gone. Not left running while the worker runs
    other tests: an idle head took 5 % of a core (its GCS, raylet and monitors), ~100 CPU-s
    of the suite for three workers' heads kept to the end."""

    def __init__(self) -> None:
        self.address = ""
        self.pid = 0
        self.temp = ""
        self.saved: dict[str, str | None] = {}

    def start(self) -> str:
        if self.address:
            return self.address
        ray_bin = str(Path(sys.executable).parent / "ray")
        self.temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: its sockets
        port = free_port()
        env = {**os.environ, **RAY_ENV}
        start = subprocess.Popen(
            [ray_bin, "start", "--head", "--num-cpus=2", f"--port={port}",
             f"--temp-dir={self.temp}", "--include-dashboard=false", "--disable-usage-stats"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.pid = start.pid
        said, _ = start.communicate(timeout=180)
        if start.returncode != 0:
            self.stop()
            pytest.fail(f"ray start failed:\n{said}")
        self.saved = {k: os.environ.get(k) for k in (*RAY_ENV, "RAY_ADDRESS")}
        os.environ.update(RAY_ENV, RAY_ADDRESS=f"127.0.0.1:{port}")
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):  # GCS, raylet, monitors (no TERM)
                os.killpg(self.pid, signal.SIGKILL)
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)
        self.address, self.pid, self.temp, self.saved = "", 0, "", {}


_HEAD = _Head()


@pytest.fixture
def ray_cluster() -> str:
    """The address of this worker's local Ray head (started if none runs)."""
    return _HEAD.start()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last of a run of tests on the head (the next needs none, or is not yet
    given to this worker), the head is stopped; a later one starts it again."""
    if nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ()):
        _HEAD.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run stopped in the middle (Ctrl-C, ``-x``) leaves no head running."""
    _HEAD.stop()
