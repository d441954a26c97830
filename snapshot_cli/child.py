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
it is not on it, and only then imports snap.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path


def python_command(entry: str, *args: str) -> list[str]:
    """``[python, "-c", code, *args]`` whose code sets ``sys.path`` and then runs ``entry``
    (statements importing from snapshot_cli; ``sys`` is imported)."""
    return [sys.executable, "-c", f"import sys; sys.path[:] = {child_path()!r}; {entry}", *args]


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
    modules and zip; not the ``site-packages`` inside it)."""
    libs = [sysconfig.get_path(key) for key in ("stdlib", "platstdlib")]
    stdlib = {os.path.normcase(os.path.abspath(p)) for lib in libs
              for p in (lib, os.path.join(lib, "lib-dynload"))}  # fmt: skip
    entry = os.path.normcase(os.path.abspath(entry or os.curdir))
    return entry in stdlib or entry.endswith(".zip")
