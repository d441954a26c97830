"""Cached bytecode of an older version of a file is never what a create runs.

Python takes a ``.pyc`` whose header holds its source's size and modification second: a
pipeline file (or a helper it uses) rewritten to the same size within the second it was
imported in kept its old ``.pyc``, and the create's worker processes ran the old code under
the fingerprint of the new bytes (found with bytecode caching on: two tests of the suite
failed that way). The times are set here with ``os.utime``, so that "within the same
second" does not depend on how fast the machine is.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import py_compile
import sys
import uuid
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import PipelineLoadError
from snapshot_cli.writers import bytecode

SECOND = 1_700_000_000 * 10**9  # a whole second, in ns
MS = 10**6


def _write(path: Path, text: str, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _cache(source: Path, at_ns: int, mode: str = "timestamp") -> Path:
    """Compile ``source`` into the ``.pyc`` an import takes, written at ``at_ns``."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    invalidation = py_compile.PycInvalidationMode[mode.upper().replace("-", "_")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a file's own SyntaxWarnings)
        py_compile.compile(
            str(source), cfile=str(cached), doraise=True, invalidation_mode=invalidation
        )
    os.utime(cached, ns=(at_ns, at_ns))
    return cached


def _unremovable_stale_cache(
    source: Path, old: str, new: str, monkeypatch: pytest.MonkeyPatch, code: str = "EACCES"
) -> Path:
    """``source`` cached with ``old``, then edited to ``new`` within the second, and its
    ``.pyc`` refused by ``os.unlink`` with errno ``code``: the cache's path."""
    _write(source, old, SECOND + 100 * MS)
    cached = _cache(source, SECOND + 200 * MS)
    _write(source, new, SECOND + 500 * MS)
    unlink = os.unlink

    def refused(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.fspath(path) == str(cached):
            raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(path))
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", refused)
    return cached


def _imported(source: Path) -> ModuleType:
    """``source`` imported as Python imports a file (its ``.pyc`` taken if Python takes it),
    under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"_stale_{uuid.uuid4().hex}", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_edit_within_the_second_is_what_python_runs_once_dropped(tmp_path: Path) -> None:
    source = tmp_path / "scale.py"
    _write(source, "SCALE = 1\n", SECOND + 100 * MS)
    cached = _cache(source, SECOND + 200 * MS)
    _write(source, "SCALE = 2\n", SECOND + 500 * MS)  # the same size, the same second
    assert _imported(source).SCALE == 1  # what Python does: the hazard is real
    assert bytecode.stale(str(source)) == str(cached)
    bytecode.drop_stale([str(source)])
    assert not cached.exists()
    assert _imported(source).SCALE == 2


def test_a_python_that_caches_no_bytecode_has_none_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``cache_tag`` (``importlib`` then refuses to name a cache file): nothing is stale,
    nothing is dropped, no error."""
    source = tmp_path / "scale.py"
    _write(source, "SCALE = 1\n", SECOND + 100 * MS)
    cached = _cache(source, SECOND + 200 * MS)
    _write(source, "SCALE = 2\n", SECOND + 500 * MS)
    assert bytecode.stale(str(source)) == str(cached)  # (with a cache tag: stale)
    monkeypatch.setattr(sys.implementation, "cache_tag", None)
    assert bytecode.stale(str(source)) is None
    bytecode.drop_stale([str(source)])
    assert cached.exists()


@pytest.mark.parametrize(
    ("edit", "cached_at"),
    [
        ("SCALE = 1\n", SECOND + 200 * MS),  # not edited since it was cached
        ("SCALE = 22\n", SECOND + 200 * MS),  # another size: Python compiles it again
    ],
)
def test_bytecode_python_would_not_take_or_that_is_current_is_kept(
    tmp_path: Path, edit: str, cached_at: int
) -> None:
    source = tmp_path / "scale.py"
    _write(source, "SCALE = 1\n", SECOND + 100 * MS)
    cached = _cache(source, cached_at)
    _write(source, edit, SECOND + (100 if edit == "SCALE = 1\n" else 500) * MS)
    assert bytecode.stale(str(source)) is None
    bytecode.drop_stale([str(source)])
    assert cached.exists()
    now = int(edit.split("=")[1])
    assert now == _imported(source).SCALE


@pytest.mark.parametrize(
    ("mode", "edited", "dropped"),
    [
        ("unchecked-hash", True, True),  # never compared with its source by Python
        ("unchecked-hash", False, False),
        ("checked-hash", True, False),  # compared by Python itself
    ],
)
def test_hash_based_bytecode(tmp_path: Path, mode: str, edited: bool, dropped: bool) -> None:
    source = tmp_path / "scale.py"
    _write(source, "SCALE = 1\n", SECOND)
    cached = _cache(source, SECOND - 10**9, mode)  # (the times do not count for these)
    if edited:
        _write(source, "SCALE = 2\n", SECOND)
    bytecode.drop_stale([str(source)])
    assert cached.exists() is not dropped
    now = 2 if edited else 1
    assert now == _imported(source).SCALE


def test_a_file_python_warns_of_is_compared_without_a_word(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """An invalid escape is a SyntaxWarning when the file is compiled: the import that
    compiles it says it, not every create that compares its cache (and under warnings as
    errors the comparison did not fail)."""
    source = tmp_path / "pattern.py"
    _write(source, 'PATTERN = "\\d+"\n', SECOND + 100 * MS)
    cached = _cache(source, SECOND + 200 * MS)
    assert bytecode.stale(str(source)) is None
    assert cached.exists() and not recwarn.list


def test_no_bytecode_no_source_or_a_foreign_one_is_nothing(tmp_path: Path) -> None:
    source = tmp_path / "scale.py"
    assert bytecode.stale(str(source)) is None  # neither
    _write(source, "SCALE = 1\n", SECOND)
    assert bytecode.stale(str(source)) is None  # no .pyc
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir()
    cached.write_bytes(b"\0" * 40)  # another Python's magic: Python compiles the file
    assert bytecode.stale(str(source)) is None
    cached.write_bytes(importlib.util.MAGIC_NUMBER)  # cut short
    assert bytecode.stale(str(source)) is None
    assert bytecode.stale(str(tmp_path / "notes.txt")) is None


# Any order of the edits and the caching, to any size, in whole seconds or not: once
# dropped, what Python imports is the file as it is.
@given(
    first=st.integers(0, 3_000),
    cached_after=st.integers(-1_500, 1_500),
    edited_after=st.integers(-1_500, 1_500),
    grow=st.booleans(),
    edit=st.booleans(),
)
def test_after_a_drop_python_imports_the_file_as_it_is(
    tmp_path_factory: pytest.TempPathFactory,
    first: int,
    cached_after: int,
    edited_after: int,
    grow: bool,
    edit: bool,
) -> None:
    source = tmp_path_factory.mktemp("any") / "scale.py"
    written = SECOND + first * MS
    _write(source, "SCALE = 10\n", written)
    cached_at = written + cached_after * MS
    _cache(source, cached_at)
    if edit:
        _write(source, "SCALE = 123\n" if grow else "SCALE = 12\n", cached_at + edited_after * MS)
    bytecode.drop_stale([str(source)])
    now = 123 if edit and grow else 12 if edit else 10
    assert now == _imported(source).SCALE


@pytest.mark.parametrize("code", ["EACCES", "EROFS", "EPERM", "EIO", "EBUSY"])
def test_bytecode_that_cannot_be_removed_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    source = tmp_path / "scale.py"
    cached = _unremovable_stale_cache(source, "SCALE = 1\n", "SCALE = 2\n", monkeypatch, code)
    with pytest.raises(PipelineLoadError) as err:
        bytecode.drop_stale([str(source)])
    message = str(err.value)
    assert message.startswith(f"{source} was edited after Python cached its bytecode in {cached}")
    assert f"cannot be removed ({os.strerror(getattr(errno, code))} ({code}))" in message
    assert f"remove it, or touch {source}" in message
    assert cached.exists()


PIPE = """
from {helpers} import offset

SCALE = 1

def preprocess(i):
    yield {{"v": i * SCALE + offset()}}
"""


@pytest.mark.parametrize("workers", [1, 0])
@pytest.mark.parametrize("edited", ["pipeline", "helper"])
def test_a_create_runs_the_edit_made_within_the_second(
    tmp_path: Path, edited: str, workers: int
) -> None:
    """The pipeline file, and a module of yours it uses, each cached and then edited to the
    same size within the same second: the worker processes run the files as they are, and
    so does this process (``workers=0``): the pipeline's import took the helper from its old
    .pyc, and the create refused it as "code older than its files ... restart the kernel"
    (a fresh ``snap create`` too; found by a probe)."""
    helpers = f"offset_{uuid.uuid4().hex[:8]}"
    pipe, helper = tmp_path / "pipe.py", tmp_path / f"{helpers}.py"
    for path, text in (
        (pipe, PIPE.format(helpers=helpers)),
        (helper, "def offset():\n    return 100\n"),
    ):
        _write(path, text, SECOND + 100 * MS)
        _cache(path, SECOND + 200 * MS)
    if edited == "pipeline":
        _write(
            pipe, PIPE.format(helpers=helpers).replace("SCALE = 1", "SCALE = 3"), SECOND + 500 * MS
        )
    else:
        _write(helper, "def offset():\n    return 700\n", SECOND + 500 * MS)
    out = tmp_path / "s"
    info = snap.create(f"{pipe}:preprocess", str(out), inputs=[1, 2], workers=workers)
    assert info.num_records == 2
    values = sorted(int(v) for b in snap.open(str(out)).loader(2, shuffle=False) for v in b["v"])
    assert values == ([103, 106] if edited == "pipeline" else [701, 702])


def test_a_create_whose_stale_pipeline_cache_cannot_be_removed_says_so_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Said before the file is imported: not as a failed import with snap's own traceback,
    and with nothing written."""
    pipe = tmp_path / "pipe.py"
    old, new = "def f(i):\n    yield {'v': i * 1}\n", "def f(i):\n    yield {'v': i * 2}\n"
    _unremovable_stale_cache(pipe, old, new, monkeypatch)
    with pytest.raises(PipelineLoadError) as err:
        snap.create(f"{pipe}:f", str(tmp_path / "out"), inputs=[1], workers=1)
    assert str(err.value).startswith(f"{pipe} was edited after Python cached its bytecode")
    assert "Traceback" not in str(err.value)
    assert not (tmp_path / "out").exists()
