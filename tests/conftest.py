"""Shared fixtures: pipeline modules written to disk, a clean memory filesystem, CLI helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import settings

from tests import forks as forks_module
from tests.forks import Forks

REPO = Path(__file__).resolve().parent.parent

# No Hypothesis test fails for taking long: a deadline is a timed assertion, and a loaded CI
# machine met one (test_encode_decode_round_trip's first example took 293 ms against 200).
# Speed is measured by benchmarks/, not asserted here.
settings.register_profile("snap", deadline=None)
settings.load_profile("snap")


@pytest.fixture
def write_pipeline(tmp_path: Path) -> Callable[[str, str], str]:
    """Write a pipeline module ``name.py`` with ``source``; returns ``path:preprocess``."""

    def write(source: str, name: str = "pipe") -> str:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return f"{path}:preprocess"

    return write


@pytest.fixture(scope="session")
def forks() -> Forks:
    """snap commands forked from a server that imported snap once (:mod:`tests.forks`), for
    tests that run many; one server per pytest process."""
    return forks_module.shared()


@pytest.fixture
def memfs() -> Iterator[fsspec.AbstractFileSystem]:
    """fsspec's in-memory filesystem, emptied before and after the test."""
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    """Poll ``condition`` until it holds (fails the test after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def create_at_once(fs: Any, path: str, payloads: list[bytes]) -> list[bool]:
    """``storage.create_exclusive`` of ``path`` from one thread per payload, released
    together: which of them won."""
    from snapshot_cli import storage

    barrier = threading.Barrier(len(payloads))

    def contend(data: bytes) -> bool:
        barrier.wait(timeout=30)
        return storage.create_exclusive(fs, path, data)

    with ThreadPoolExecutor(len(payloads)) as pool:
        return list(pool.map(contend, payloads))


def snap_subprocess(
    *args: str, cwd: Path | str = REPO, timeout: float = 120, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m snapshot_cli ARGS`` as a real process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "snapshot_cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the storage backend suite last: its hdfs:// tests load a JVM (libhdfs) into this
    process, and a process with JVM threads cannot fork safely afterwards (the fork tests
    and torch DataLoader workers would hang). Run the tests on the local Ray cluster
    (tests/writers/conftest.py) first, together: pytest-xdist gives the first worker the
    first share, so one worker starts one cluster and stops it after them (each of three
    workers had its own, idle to the end)."""
    last = ("tests/backends/", "tests/infra/test_hdfs_harness.py")

    def order(item: pytest.Item) -> tuple[bool, bool]:
        ray = "ray_cluster" in getattr(item, "fixturenames", ())
        return item.nodeid.startswith(last), not ray

    items.sort(key=order)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without the interpreter's teardown once libhdfs has started a JVM here.

    The JVM that pyarrow's libhdfs starts in-process is never destroyed; its threads keep
    running while the interpreter and the C runtime tear down, which now and then ends in a
    segmentation fault *after* every test has passed and been reported (seen in `make test`).
    By the time this hook runs, fixtures are finished and the report is printed, so exit
    with pytest's own status directly.
    """
    if _jvm_running() and _EXIT_STATUS in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT_STATUS])


_EXIT_STATUS = pytest.StashKey[int]()


def _jvm_running() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libjvm" in f.read()
    except OSError:
        return False
