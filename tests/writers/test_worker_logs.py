"""snap's own log records in worker processes reach the command once, through the parent:
each worker printed its own on stderr, the same warning once per worker, and in a notebook
(whose cell output is the kernel's ``sys.stderr``, not file descriptor 2) not at all. The
pipeline logs on snap's logger here, as snap's code in a worker does (a temporary file it
could not remove, ``durable.py``), so that every task says the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, snap_subprocess

PIPELINE = """
import logging

def items():
    return list(range(6))

def preprocess(item):
    logging.getLogger("snapshot_cli.writers.shard").warning("a warning of snap's (%s)", "same")
    if item == 5:
        logging.getLogger("snapshot_cli.durable").warning("another, for item %d", item)
    yield {"x": item}
"""


@pytest.mark.parametrize("workers", ["2", "3"])
def test_a_warning_every_worker_meets_is_said_once(tmp_path: Path, workers: str) -> None:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    res = snap_subprocess("create", "pipe.py:preprocess", "s", "--inputs-from", "pipe.py:items",
                          "--workers", workers, "--inputs-per-task", "1", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines.count("snap: warning: a warning of snap's (same)") == 1, res.stderr
    assert lines.count("snap: warning: another, for item 5") == 1, res.stderr


def test_a_library_user_s_logging_gets_the_workers_records(tmp_path: Path) -> None:
    """In Python, with logging configured, a worker's record goes to the program's handlers
    (here a format naming the logger), once."""
    (tmp_path / "pipe.py").write_text(PIPELINE)
    script = (
        "import logging, sys\n"
        "logging.basicConfig(format='logged %(name)s %(levelname)s %(message)s')\n"
        "import snapshot_cli as snap\n"
        "sys.path.insert(0, '.')\n"
        "from pipe import items, preprocess\n"
        "snap.create('pipe.py:preprocess', 's', inputs_from=items, workers=2,\n"
        "            inputs_per_task=1, progress=False)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines.count("logged snapshot_cli WARNING a warning of snap's (same)") == 1, lines
    assert not [line for line in lines if line.startswith("snap: ")], lines
