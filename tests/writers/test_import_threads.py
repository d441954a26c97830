"""Threads that create from one pipeline file at once each get the whole module.

A pipeline file is put in ``sys.modules`` before its code runs (as Python's import does); a
second ``snap.create`` of the same file in another thread (a train and a val snapshot made
side by side) took that half-run module and failed with "has no function 'prep'; it
defines: no functions". Imports of one file are now one at a time, and a thread that waits
gets the module whole.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.writers import shipping

# The module's top level takes a while, as one importing pandas or torch does: the other
# threads ask for it while it runs.
SLOW = """
import time

time.sleep(0.6)


def prep(i):
    yield {"i": i}
"""


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_importing_one_pipeline_file_each_get_its_records(
    tmp_path: Path, threads: int
) -> None:
    name = f"slow_prep_{threads}"
    (tmp_path / f"{name}.py").write_text(SLOW)
    spec = f"{tmp_path / name}.py:prep"
    jobs = [
        (str(tmp_path / f"out{k}"), list(range(100 * k, 100 * k + 10 + k))) for k in range(threads)
    ]
    start = threading.Barrier(threads)

    def make(job: tuple[str, list[int]]) -> snap.CreateInfo:
        start.wait()  # (every create asks for the module at once)
        return snap.create(spec, job[0], inputs=job[1], workers=0)

    try:
        with ThreadPoolExecutor(threads) as ex:
            infos = list(ex.map(make, jobs))
    finally:
        for module in [m for m, p in shipping.FROM_FILES.items() if p.startswith(str(tmp_path))]:
            sys.modules.pop(module, None)
    for info, (out, items) in zip(infos, jobs, strict=True):
        assert info.num_records == len(items)
        got = sorted(int(i) for b in snap.open(out).loader(7) for i in b["i"])
        assert got == items


def test_a_file_that_fails_to_import_fails_in_every_thread(tmp_path: Path) -> None:
    """The threads that waited for a file whose import failed import it again themselves
    (and fail the same way), not take a module that was taken out of ``sys.modules``."""
    (tmp_path / "broken_prep.py").write_text(SLOW + "\nraise ValueError('no config')\n")
    spec = f"{tmp_path / 'broken_prep'}.py:prep"
    start = threading.Barrier(2)

    def make(k: int) -> str:
        start.wait()
        try:
            snap.create(spec, str(tmp_path / f"out{k}"), inputs=[1, 2], workers=0)
        except snap.PipelineLoadError as err:
            return str(err)
        return "created"

    with ThreadPoolExecutor(2) as ex:
        said = list(ex.map(make, range(2)))
    assert all("ValueError: no config" in s for s in said), said
    assert "broken_prep" not in sys.modules
