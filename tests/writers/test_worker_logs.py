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
    assert (
        lines.count("logged snapshot_cli.writers.shard WARNING a warning of snap's (same)") == 1
    ), lines
    assert not [line for line in lines if line.startswith("snap: ")], lines


SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="logged %(name)s %(levelname)s %(message)s")
import snapshot_cli as snap

def logs(n):
    logging.getLogger("mine").info("info from %s", n)
    logging.getLogger("mine").warning("warn from %s", n)
    try:
        raise ValueError("odd")
    except ValueError:
        logging.getLogger("mine").exception("failed on %s", n)
    return {"n": n}

snap.create(logs, "s", inputs=range(2), workers=int(sys.argv[1]), progress=False)
"""


@pytest.mark.parametrize("workers", ["2", "0"])
def test_the_pipeline_s_records_follow_the_program_s_logging(tmp_path: Path, workers: str) -> None:
    """A notebook (a script) that configured logging, then ran ``snap.create(f, workers=2)``
    of a function of its own (sent by value): the workers, where nothing configured logging,
    printed the WARNING lines bare and lost the INFO ones; ``workers=0`` gave all of them in
    the program's format (a probe). Each worker's record is now handled by the program."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", SCRIPT, workers], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    mine = sorted(line for line in lines if line.startswith("logged mine "))
    assert mine == sorted(
        f"logged mine {level} {what} {n}" for n in (0, 1)
        for level, what in (("INFO", "info from"), ("WARNING", "warn from"), ("ERROR", "failed on"))
    ), res.stderr  # fmt: skip
    assert res.stderr.count("ValueError: odd") == 2  # (each record's traceback, as logged)
