"""The command line of a fresh Python process of snap's own (a create's worker process, a
loader's decode process): this interpreter, running one entry point of snap, with this
process's ``sys.path`` set before anything else is imported.

``python -c`` puts the working directory first on ``sys.path``: a ``random.py`` or
``json.py`` beside the user's pipeline hid the standard library's module from snap's own
imports and ran in every worker. And a child that put snap's directory first to import it
imported snap's dependencies from there too: a numpy or pyarrow the caller chose by
``PYTHONPATH`` or ``sys.path`` was another version in workers than in the caller. So the
child's first statement makes its ``sys.path`` this process's, the standard library's
entries first (the caller imported its standard modules at start-up, before its own
directories could hide them; a child imports them later) and snap's directory appended if
it is not on it, and only then imports snap. The directories snap put on ``sys.path`` for the
user's code (:data:`CODE_DIRS`) join it once snap is imported: a pipeline file named as one of
snap's dependencies (``numpy.py``, ``fsspec.py``) was that dependency to the worker's own
imports, which failed with a traceback from inside pyarrow (the caller, which had imported
them before, gives such a file a private name).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

# The directories snap put on sys.path for the user's code (a pipeline file's, the working
# directory for a module's: writers/importing.py), which a child adds only after importing snap.
CODE_DIRS: set[str] = set()


def python_command(module: str, call: str, *args: str) -> list[str]:
    """``[python, *flags, "-c", code, *args]`` whose code sets ``sys.path``, imports
    ``module`` (of snap) as ``entry`` and exits with what ``entry.CALL`` returns (``sys`` is
    imported: ``main(sys.argv)``).
    ``flags``: this interpreter's (``-O``, ``-W``, ``-X dev``...), as multiprocessing passes
    them: under ``python -O`` workers ran the pipeline's asserts, and a ``-W error``
    pipeline's warning failed with ``--workers 0`` only."""
    path = child_path()
    first = [p for p in path if p not in CODE_DIRS]
    code = (
        f"import sys; sys.path[:] = {first!r}; import {module} as entry; "
        f"sys.path[:] = {path!r}; sys.exit(entry.{call})"
    )
    return [sys.executable, *interpreter_flags(), "-c", code, *args]


def interpreter_flags() -> list[str]:
    """The command-line flags this interpreter was started with (``subprocess``'s own
    reading of them, which multiprocessing's spawn uses too)."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    return list(flags()) if callable(flags) else []


def child_path() -> list[str]:
    """This process's ``sys.path`` (entries as they are: relative ones mean the same in a
    child started in the same directory), the standard library's first, with snap's
    package directory appended where no entry is it."""
    package_parent = str(Path(__file__).resolve().parents[1])
    entries = [p for p in sys.path if isinstance(p, str)]
    paths = [p for p in entries if is_stdlib(p)] + [p for p in entries if not is_stdlib(p)]
    if not any(_same(p, package_parent) for p in paths):
        paths.append(package_parent)
    return paths


def _same(entry: str, directory: str) -> bool:
    try:
        return os.path.realpath(entry or ".") == directory
    except (OSError, ValueError):
        return False


def is_stdlib(entry: str) -> bool:
    """Whether a ``sys.path`` entry is the standard library's (its directories, compiled
    modules and zip; not the ``site-packages`` inside it). A relative one (``''``: the
    working directory, as ``python -c`` and a notebook have it) where the working directory
    was deleted is not: it names nothing then (its ``abspath`` failed, and every create and
    loader of that process with it)."""
    libs = [sysconfig.get_path(key) for key in ("stdlib", "platstdlib")]
    stdlib = {os.path.normcase(os.path.abspath(p)) for lib in libs
              for p in (lib, os.path.join(lib, "lib-dynload"))}  # fmt: skip
    if (absolute := absolute_or_none(entry or os.curdir)) is None:
        return False
    entry = os.path.normcase(absolute)
    return entry in stdlib or entry.endswith(".zip")


def absolute_or_none(path: str) -> str | None:
    """``os.path.abspath(path)``, or None for a relative ``path`` when the working directory
    was deleted (``os.getcwd()`` fails)."""
    try:
        return os.path.abspath(path)
    except FileNotFoundError:
        return None


# What a child of snap killed by these signals met (they come from the kernel, or from the
# child itself: it runs in a session of its own, out of reach of the terminal's Ctrl-C).
THREADS_OUT = (
    'if the messages above say "pthread_create failed" or "Resource temporarily '
    "unavailable\", it could not start a thread (OpenBLAS, numpy's, then raises SIGINT): it "
    "is at its thread limit (ulimit -u, a container's or a job's pids limit)"
)


def how_it_died(code: int) -> tuple[str, bool]:
    """A child's exit status (``Popen.returncode``) as words, and whether they name the
    cause: ``("was killed by SIGXCPU: it used up ...", True)``, ``("exited with code 3",
    False)``. The CPU-time limit is this process's: a child's is inherited."""
    if code >= 0:
        return f"exited with code {code}", False
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}", False
    soft, hard = cpu_limit()
    if name == "SIGXCPU":
        limit = f" ({soft:,} s: ulimit -t)" if soft is not None else " (ulimit -t)"
        return f"was killed by SIGXCPU: it used up its CPU-time limit{limit}", True
    if name == "SIGKILL":
        cpu = f" or at its CPU-time limit of {hard:,} s: ulimit -t" if hard is not None else ""
        return f"was killed by SIGKILL (out of memory?{cpu})", False
    if name == "SIGINT":
        return (
            "was interrupted by a SIGINT it raised itself or got from elsewhere (not a "
            f"Ctrl-C, which reaches snap's own process only); {THREADS_OUT}",
            True,
        )
    return f"was killed by {name}", False


def cpu_limit() -> tuple[int | None, int | None]:
    """This process's CPU-time limit in seconds (``ulimit -t``), soft and hard; None: none."""
    try:
        import resource

        limits = resource.getrlimit(resource.RLIMIT_CPU)
    except (ImportError, ValueError, OSError):  # (not POSIX)
        return None, None
    soft, hard = (None if n == resource.RLIM_INFINITY else n for n in limits)
    return soft, hard
