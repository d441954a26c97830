"""A Ray cluster that asks for a token (``ray start`` turns Ray's token authentication on by
default): a driver given its address sends none unless RAY_AUTH_MODE=token, and Ray said only
"Failed to connect to Ray cluster" after 20 s of its own "InvalidAuthToken" lines; with
RAY_AUTH_MODE=token and no token, snap called Ray's AuthenticationError "a bug in snap".

A real head node with token authentication, in a HOME of the test's own (a token in the
user's ``~/.ray`` would be found, or overwritten).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.infra.servers import free_port
from tests.writers.test_processes import make_inputs

pytestmark = pytest.mark.slow

AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")


def _environment(home: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AUTH}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", **more}


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A head node whose token authentication is on: (its address, its token)."""
    token = secrets.token_hex(16)
    home = tmp_path_factory.mktemp("head-home")
    temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: Ray's socket paths
    port = free_port()
    start = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--num-cpus=2",
         f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false",
         "--disable-usage-stats"],
        env=_environment(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        said, _ = start.communicate(timeout=180)
        assert start.returncode == 0, said
        yield f"127.0.0.1:{port}", token
    finally:
        with contextlib.suppress(ProcessLookupError):  # GCS, raylet, monitors
            os.killpg(start.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _create(tmp_path: Path, address: str, name: str, **env: str) -> subprocess.CompletedProcess:
    if not (tmp_path / "in").exists():
        make_inputs(tmp_path / "in", 4)
        (tmp_path / "pipe.py").write_text("def f(path):\n    yield {'x': int(open(path).read())}\n")
    home = tmp_path / f"home-{name}"
    home.mkdir()
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'pipe.py'}:f",
           str(tmp_path / name), "--input", str(tmp_path / "in" / "*.txt"), "--executor",
           "ray", "--ray-address", address, "--json"]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=_environment(home, **env), capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def test_a_driver_without_the_token_mode_is_told_to_set_it(
    token_cluster: tuple[str, str], tmp_path: Path
) -> None:
    address, _ = token_cluster
    done = _create(tmp_path, address, "snap")
    assert done.returncode != 0
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"snap: error: cannot connect to Ray at {address}: "), done.stderr
    assert "set RAY_AUTH_MODE=token where snap runs" in last and "RAY_AUTH_TOKEN" in last
    assert not (tmp_path / "snap" / "manifest.json").exists()


def test_the_token_mode_without_a_token_is_said_in_one_line(
    token_cluster: tuple[str, str], tmp_path: Path
) -> None:
    address, _ = token_cluster
    done = _create(tmp_path, address, "snap", RAY_AUTH_MODE="token")
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1] == (
        f"snap: error: cannot connect to Ray at {address}: RAY_AUTH_MODE=token, but this "
        "process has no token: give the cluster's token (`ray get-auth-token` on its head "
        "node) in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
    ), done.stderr


def test_with_the_cluster_s_token_the_snapshot_is_made(
    token_cluster: tuple[str, str], tmp_path: Path
) -> None:
    address, token = token_cluster
    done = _create(tmp_path, address, "snap", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["num_records"] == 4


def test_a_ray_the_run_starts_for_itself_says_nothing_of_its_token(tmp_path: Path) -> None:
    """Nobody else connects to it: Ray's "Token authentication is enabled for this Ray
    cluster" note was said even under --quiet --json."""
    make_inputs(tmp_path / "in", 2)
    (tmp_path / "pipe.py").write_text("def f(path):\n    yield {'x': int(open(path).read())}\n")
    temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: Ray's socket paths
    (tmp_path / "home").mkdir()
    env = _environment(tmp_path / "home", TMPDIR=temp, RAY_TMPDIR=temp)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'pipe.py'}:f",
           str(tmp_path / "snap"), "--input", str(tmp_path / "in" / "*.txt"), "--executor",
           "ray", "--quiet", "--json"]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["num_records"] == 2
    assert done.stderr == ""
