"""Local workers cap the native libraries' thread pools (OpenBLAS, OpenMP, MKL, ...) at
``cores // workers`` for each variable the user left unset.

Without the caps, N workers on N cores ran N x N BLAS threads: a pipeline of numpy matrix
products took 3-4x the time with 2 workers on 2 cores (``benchmarks/threads.py``). What the
workers' OpenBLAS really runs is asked of it (threadpoolctl), not only read from the
environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cores import cores
from snapshot_cli.writers.native_threads import FALLBACKS, THREAD_VARIABLES, capped, per_worker

PIPELINE = f"""
import json, os
import numpy as np
from threadpoolctl import threadpool_info

NAMES = {THREAD_VARIABLES!r}


def preprocess(i):
    a = np.ones((64, 64), np.float32)
    a @ a  # (OpenBLAS has started its pool)
    pools = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
    env = {{name: os.environ.get(name) for name in NAMES}}
    return [{{"i": i, "env": json.dumps(env), "blas": pools[0] if pools else -1,
              "pid": os.getpid()}}]
"""


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the variables set in this process (as on a machine nobody tuned)."""
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def seen(write_pipeline: Callable[..., str], tmp_path: Path, workers: int) -> list[dict[str, Any]]:
    """What each task's process saw: its environment's variables and its OpenBLAS pool."""
    out = tmp_path / f"snap-{workers}"
    snap.create(write_pipeline(PIPELINE), str(out), inputs=list(range(4)), inputs_per_task=1,
                workers=workers)  # fmt: skip
    records = snap.open(str(out)).head(4)
    return [
        {"env": json.loads(r["env"]), "blas": int(r["blas"]), "pid": int(r["pid"])} for r in records
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_every_pool_a_user_left_unset_is_capped_at_the_cores_of_a_worker(
    write_pipeline: Callable[..., str], tmp_path: Path, unset: pytest.MonkeyPatch, workers: int
) -> None:
    unset.setenv("MKL_NUM_THREADS", "7")  # the user's: kept
    unset.setenv("NUMEXPR_NUM_THREADS", " ")  # blank, which the libraries ignore: capped
    share = per_worker(workers, cores())
    records = seen(write_pipeline, tmp_path, workers)

    assert os.getpid() not in {r["pid"] for r in records}
    for r in records:
        expected = {name: str(share) for name in THREAD_VARIABLES} | {"MKL_NUM_THREADS": "7"}
        assert r["env"] == expected
        assert r["blas"] == share
    assert "OMP_NUM_THREADS" not in os.environ  # this process's environment as it was


def test_a_pool_size_the_user_set_is_what_the_workers_run(
    write_pipeline: Callable[..., str], tmp_path: Path, unset: pytest.MonkeyPatch
) -> None:
    unset.setenv("OPENBLAS_NUM_THREADS", "1")  # below one worker's cap where cores > 1
    unset.setenv("OMP_NUM_THREADS", "3")
    for r in seen(write_pipeline, tmp_path, 1):
        assert r["blas"] == 1
        assert r["env"]["OPENBLAS_NUM_THREADS"] == "1" and r["env"]["OMP_NUM_THREADS"] == "3"
        assert r["env"]["MKL_NUM_THREADS"] is None  # (MKL reads OMP_NUM_THREADS then)
        assert r["env"]["NUMBA_NUM_THREADS"] == str(cores())


def test_omp_num_threads_set_by_the_user_reaches_the_libraries_that_read_it(
    write_pipeline: Callable[..., str], tmp_path: Path, unset: pytest.MonkeyPatch
) -> None:
    """OpenBLAS, MKL, BLIS and numexpr fall back to ``OMP_NUM_THREADS``: a cap of their own
    variables would have overruled it (OpenBLAS ran 1 thread where the user asked for 2)."""
    unset.setenv("OMP_NUM_THREADS", "2")
    share = per_worker(2, cores())
    for r in seen(write_pipeline, tmp_path, 2):
        assert r["blas"] == min(2, os.cpu_count() or 1)  # (OpenBLAS: at most the CPUs)
        for name in FALLBACKS:
            assert r["env"][name] is None, name
        assert r["env"]["OMP_NUM_THREADS"] == "2"
        assert r["env"]["NUMBA_NUM_THREADS"] == r["env"]["VECLIB_MAXIMUM_THREADS"] == str(share)


def test_in_process_tasks_change_nothing(
    write_pipeline: Callable[..., str], tmp_path: Path, unset: pytest.MonkeyPatch
) -> None:
    for r in seen(write_pipeline, tmp_path, 0):
        assert r["pid"] == os.getpid()
        assert r["env"] == dict.fromkeys(THREAD_VARIABLES)


ENVIRONMENTS = st.dictionaries(
    st.sampled_from([*THREAD_VARIABLES, "GOTO_NUM_THREADS", "PATH", "HOME", "omp_num_threads"]),
    st.sampled_from(["", " ", "1", "4", "16", "x"]),
)


@given(environ=ENVIRONMENTS, threads=st.integers(1, 512))
def test_capped_sets_only_what_neither_the_user_nor_a_fallback_sets(
    environ: dict[str, str], threads: int
) -> None:
    env = capped(environ, threads)
    for name, value in environ.items():
        if name not in THREAD_VARIABLES or value.strip():
            assert env[name] == value
    for name in THREAD_VARIABLES:
        read = (name, *FALLBACKS.get(name, ()))  # what the library reads, in its order
        if any(environ.get(n, "").strip() for n in read):
            assert env.get(name) == environ.get(name)  # the user's say, kept
        else:
            assert env[name] == str(threads)
    assert set(env) - set(environ) <= set(THREAD_VARIABLES)


@given(workers=st.integers(0, 300), available=st.integers(1, 300))
def test_a_worker_gets_its_share_of_the_cores_and_never_none(workers: int, available: int) -> None:
    share = per_worker(workers, available)
    assert share >= 1
    assert share * max(1, workers) <= max(available, max(1, workers))
    if 0 < workers <= available:
        assert share == available // workers


def test_more_workers_than_cores_is_said_once_and_fewer_tasks_start_fewer(
    write_pipeline: Callable[..., str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """64 workers on 2 cores started 64 interpreters, each with the pipeline's imports,
    unsaid (torch's DataLoader warns of this). Said once; workers a create does not start (no
    task for them) are not counted."""
    pipeline = write_pipeline("def preprocess(i):\n    return [{'i': i}]\n")
    n = cores() + 1
    snap.create(pipeline, str(tmp_path / "a"), inputs=list(range(n)), inputs_per_task=1,
                workers=n)  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "cores:" in r.getMessage()]
    assert said == [
        f"workers={n} on {cores()} cores: each worker is a Python process with the pipeline's "
        "imports and memory, and workers beyond the cores speed up only a pipeline that waits "
        f"(on downloads, a service); else pass workers={cores()} (the default: one per core)"
    ]
    assert snap.open(str(tmp_path / "a")).num_records == n
    caplog.clear()
    snap.create(pipeline, str(tmp_path / "b"), inputs=list(range(cores())), inputs_per_task=1,
                workers=n)  # fmt: skip
    assert not [r for r in caplog.records if "cores:" in r.getMessage()]
