"""Cached bytecode that Python would take for a source file edited after it was cached.

Python takes a timestamp ``.pyc`` as up to date when its header holds the source's size and
its modification time in whole seconds. A file rewritten within the second it was imported in,
to the same size (``SCALE = 1`` made ``SCALE = 2`` by a script, a notebook cell or a code
generator), keeps its old ``.pyc``, and every process that imports it runs the old code: a
create's worker processes computed the old code's records under the fingerprint of the new
file's bytes, and every later create found them up to date. An unchecked hash-based ``.pyc``
(``py_compile --invalidation-mode unchecked-hash``) is never compared with its source at all.

Such a ``.pyc`` is removed before the file is imported here or fingerprinted (the processes a
create starts then compile the file as it is): a timestamp ``.pyc`` whose header matches its
source while its code is not what the source compiles to now (its times cannot tell: the
header holds whole seconds, and a copy or an archive sets a file's time back), and an
unchecked hash-based one whose hash is not the source's. A checked hash-based ``.pyc`` is
compared with its source by Python itself and left alone. The comparison compiles the file
(as the import that follows would, were the ``.pyc`` removed): a few milliseconds for a file
of a few hundred lines, paid only where Python would take the ``.pyc``.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import marshal
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

from ..errors import PipelineLoadError

_HEADER = 16  # magic, flags, then (mtime, size) or the source's 8-byte hash
_HASHED, _CHECKED = 0b01, 0b10  # the flags of a hash-based .pyc (PEP 552)


def stale(source: str) -> str | None:
    """The cached bytecode of ``source`` that an import would take though it may not be the
    file's code as it is now; None if there is none (or the file is gone)."""
    if sys.implementation.cache_tag is None:  # a Python that caches no bytecode: none stale
        return None
    cached = importlib.util.cache_from_source(source)
    try:
        with open(cached, "rb") as f:
            data = f.read()
        st = os.stat(source)
    except OSError:  # no .pyc (or none readable: Python cannot take it either), no source
        return None
    if len(data) < _HEADER or data[:4] != importlib.util.MAGIC_NUMBER:
        return None  # another Python's or a broken one: Python compiles the source instead
    flags = int.from_bytes(data[4:8], "little")
    if flags & _HASHED:
        if flags & _CHECKED:
            return None
        try:
            with open(source, "rb") as f:
                return cached if data[8:16] != importlib.util.source_hash(f.read()) else None
        except OSError:
            return None
    mtime, size = (int.from_bytes(data[i : i + 4], "little") for i in (8, 12))
    if mtime != int(st.st_mtime) & 0xFFFFFFFF or size != st.st_size & 0xFFFFFFFF:
        return None  # Python compiles the source instead
    try:
        with open(source, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (its SyntaxWarnings are the import's to say)
            now = compile(f.read(), source, "exec", dont_inherit=True)
        same = marshal.loads(data[_HEADER:]) == now  # (equal: Python runs the file as it is)
    except OSError:
        return None
    except Exception:  # a broken .pyc, a source that no longer compiles: not the code cached
        return cached
    return None if same else cached


def drop_stale(sources: Iterable[str]) -> None:
    """Remove each of ``sources``' :func:`stale` bytecode; raise a
    :class:`PipelineLoadError` that names it where it cannot be removed."""
    for source in sources:
        cached = stale(source)
        if cached is None:
            continue
        try:
            os.unlink(cached)
        except FileNotFoundError:  # (removed or replaced meanwhile: by Python, up to date)
            pass
        except OSError as err:
            said = f"{err.strerror} ({errno.errorcode.get(err.errno or 0, err.errno)})"
            raise PipelineLoadError(
                f"{source} was edited after Python cached its bytecode in {cached}, which "
                "Python would still run as the file's (its header holds the file's size and "
                f"whole second, or is never checked), and it cannot be removed ({said}): "
                f"remove it, or touch {source} (a newer modification time makes Python "
                "compile a timestamp .pyc's file again), and run again"
            ) from err


class _FreshBytecode:
    """A finder first on ``sys.meta_path`` that finds nothing itself: it removes the stale
    bytecode of each of the user's modules (``own(path)``) before the finders that import it
    see it."""

    def __init__(self, own: Callable[[str], bool]) -> None:
        self.own = own
        self.dirs: dict[str, bool] = {}  # a package's directory: may hold the user's files

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        # (never the import's failure: a deleted working directory, on sys.path as "", is
        # said by the import itself; a .pyc that cannot go, by the fingerprint's check)
        with contextlib.suppress(Exception):
            self._drop_stale_of(name, path)
        return None

    def _drop_stale_of(self, name: str, path: Any) -> None:
        # (looked up in the user's directories only: a submodule of an installed package,
        # most imports, not at all, and a top-level module only where it may be the user's)
        mine = [str(p) for p in (sys.path if path is None else path) if self._may_be_own(str(p))]
        if not mine:
            return
        found = PathFinder.find_spec(name, mine)
        origin = getattr(found, "origin", None)
        if isinstance(origin, str) and origin.endswith(".py") and self.own(origin):
            drop_stale([origin])

    def _may_be_own(self, directory: str) -> bool:
        if directory not in self.dirs:
            self.dirs[directory] = self.own(os.path.join(directory, "__init__.py"))
        return self.dirs[directory]


@contextlib.contextmanager
def fresh_imports(own: Callable[[str], bool]) -> Iterator[None]:
    """Within (the pipeline's import): every module of the user's own (``own(path)``, its
    source's path) imported for the first time has its stale bytecode removed first, as the
    pipeline's file has. A helper module edited within the second of the last import (a
    script's loop editing it, then ``snap create``) was taken from its old .pyc by the
    pipeline's import, and a fresh ``snap create`` refused its own import as "code older than
    its files ... restart the kernel"."""
    finder = _FreshBytecode(own)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
