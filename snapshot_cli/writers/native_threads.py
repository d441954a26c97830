"""How many threads the native libraries in each local worker process may start.

numpy's OpenBLAS, MKL, BLIS, Accelerate, OpenMP (torch's intra-op pool and any OpenMP code),
numexpr and numba each start a thread per core in every process that uses them. ``--workers
N`` on N cores then runs N x N such threads: a pipeline of numpy matrix products (six 384
x 384 float32 products an input, 400 inputs) with 2 workers on 2 cores took 7.2-11.7 s and
~22 CPU-s, and 2.7-3.0 s and ~5 CPU-s with one thread a worker (``benchmarks/threads.py``,
2026-12-04). With ``--workers 0`` a second thread took the same time and twice the CPU.

So each worker's environment caps them at ``cores // workers`` (at least 1), as joblib's
process workers do, for each variable the user has not set: a value in snap's environment
(even ``OMP_NUM_THREADS=8`` with 8 workers) is passed on as it is, and so is what it means to
the libraries that fall back to it (OpenBLAS, MKL, BLIS and numexpr read ``OMP_NUM_THREADS``
when their own variable is unset; OpenBLAS ``GOTO_NUM_THREADS`` first): with
``OMP_NUM_THREADS=4`` set, numpy's OpenBLAS still runs 4. The processes a pipeline starts
inherit the caps. ``--workers 0`` runs in the calling process and changes nothing;
Ray sets its own (``OMP_NUM_THREADS`` to the task's CPUs).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..cores import cores

# The variables each library reads for its pool size (joblib's list, in its order).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def per_worker(workers: int, available: int) -> int:
    """The threads each of ``workers`` processes may start on ``available`` cores."""
    return max(1, available // max(1, workers))


# What a library reads when its own variable is unset, in its order.
FALLBACKS = {
    "OPENBLAS_NUM_THREADS": ("GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "MKL_NUM_THREADS": ("OMP_NUM_THREADS",),
    "BLIS_NUM_THREADS": ("OMP_NUM_THREADS",),
    "NUMEXPR_NUM_THREADS": ("OMP_NUM_THREADS",),
}


def capped(environ: Mapping[str, str], threads: int) -> dict[str, str]:
    """A copy of ``environ`` with each of :data:`THREAD_VARIABLES` set to ``threads`` where
    neither it nor a variable its library falls back to (:data:`FALLBACKS`) is set in
    ``environ`` (an empty value, which the libraries ignore, counts as unset)."""

    def given(name: str) -> bool:
        return bool(environ.get(name, "").strip())

    env = dict(environ)
    for name in THREAD_VARIABLES:
        if not any(map(given, (name, *FALLBACKS.get(name, ())))):
            env[name] = str(threads)
    return env


def worker_environment(environ: Mapping[str, str], workers: int) -> dict[str, str]:
    """The environment of each of ``workers`` local worker processes started from here."""
    return capped(environ, per_worker(workers, cores()))
