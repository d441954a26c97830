"""A pipeline run in this process (`workers=0`) runs the code that is on disk, or is refused.

In a notebook, a function of `prep.py` edited after it was imported ran as it was, while the
fingerprint counted the edited file: the old code's records were committed as the new code's,
and every later create found them up to date (with worker processes the edit ran). Now a
pipeline given as `prep.py:f` is imported again when its file changed, and a function object
whose code (or that of a function it reaches in your modules) is behind its file is refused,
naming the file and the function, until it is reloaded.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.abc
import importlib.util
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap

PREP = """
from {helpers} import scale, Shift

def preprocess(i):
    yield {{"v": Shift().apply(scale(i))}}
"""

HELPERS = """
import functools

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper

@logged
def scale(i):
    return i * 10

class Shift:
    def apply(self, x):
        return x + 1

    def __call__(self, i):
        yield {"v": self.apply(i)}
"""

# An edit of HELPERS → whether it changes what runs (then the old code is refused)
EDITS = {
    "a function's body": (("return i * 10", "return i * 10 + i"), True),
    "a constant": (("i * 10", "i * 20"), True),
    "a method's body": (("return x + 1", "return x + 1 + 1"), True),
    "a comment and blank lines": (("def scale(i):", "def scale(i):\n    # ten times\n"), False),
    "code moved down": (("import functools", "import functools\n\n\n\nX = 1"), False),
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A pipeline module and a helper module of names of their own, importable."""
    tag = uuid.uuid4().hex[:8]
    prep, helpers = f"prep_{tag}", f"helpers_{tag}"
    (tmp_path / f"{helpers}.py").write_text(HELPERS)
    (tmp_path / f"{prep}.py").write_text(PREP.format(helpers=helpers))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield prep, helpers
    for name in (prep, helpers):
        sys.modules.pop(name, None)


def _values(out: Path) -> list[int]:
    return sorted(int(r["v"]) for r in snap.open(out).head())


@pytest.mark.parametrize("form", ["function", "partial", "bound method", "callable instance"])
def test_every_form_of_pipeline_is_checked(
    tmp_path: Path, modules: tuple[str, str], form: str
) -> None:
    prep_name, helpers_name = modules
    helpers = importlib.import_module(helpers_name)
    pipeline = {
        "function": lambda: helpers.scale,
        "partial": lambda: functools.partial(helpers.scale),
        "bound method": lambda: helpers.Shift().apply,
        "callable instance": lambda: helpers.Shift(),
    }[form]()
    (tmp_path / f"{helpers_name}.py").write_text(
        HELPERS.replace("return i * 10", "return i * 11").replace("x + 1", "x + 2")
    )
    with pytest.raises(snap.OptionError, match="code older than its files"):
        snap.create(pipeline, tmp_path / "s", inputs=[1, 2], workers=0)


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_function_behind_its_file_is_refused_in_this_process(
    tmp_path: Path, modules: tuple[str, str], edit: str
) -> None:
    prep_name, helpers_name = modules
    prep = importlib.import_module(prep_name)
    out = tmp_path / "s"
    snap.create(prep.preprocess, out, inputs=[1, 2], workers=0)
    assert _values(out) == [11, 21]
    (old, new), changes = EDITS[edit]
    helpers_file = tmp_path / f"{helpers_name}.py"
    helpers_file.write_text(HELPERS.replace(old, new))
    if not changes:  # the same code: it runs, and the snapshot is reused or remade alike
        snap.create(prep.preprocess, out, inputs=[1, 2], workers=0, overwrite=True)
        assert _values(out) == [11, 21]
        return
    with pytest.raises(snap.OptionError) as err:
        snap.create(prep.preprocess, out, inputs=[1, 2], workers=0, overwrite=True)
    message = str(err.value)
    assert message.startswith(
        "the pipeline would run in this process (workers=0) code older than its files, "
        f"edited since they were imported ({helpers_file}: "
    ), message
    assert "run with workers=1 or more" in message
    assert _values(out) == [11, 21]  # nothing was written over
    # worker processes import the file as it is now
    snap.create(prep.preprocess, out, inputs=[1, 2], workers=2, overwrite=True)
    edited = _values(out)
    assert edited != [11, 21]
    # reloading the helper alone leaves the pipeline's `from ... import` bindings old
    importlib.reload(sys.modules[helpers_name])
    with pytest.raises(snap.OptionError):
        snap.create(prep.preprocess, tmp_path / "t", inputs=[1, 2], workers=0)
    prep = importlib.reload(prep)  # the pipeline's module last, as the message says
    snap.create(prep.preprocess, tmp_path / "t", inputs=[1, 2], workers=0)
    assert _values(tmp_path / "t") == edited


def test_a_pipeline_file_edited_between_creates_runs_as_edited(tmp_path: Path) -> None:
    """`snap.create("prep.py:f")` twice in one process (a notebook) with an edit between."""
    pipe = tmp_path / f"edited_{uuid.uuid4().hex[:8]}.py"
    pipe.write_text("def preprocess(i):\n    yield {'v': i}\n")
    spec = f"{pipe}:preprocess"
    snap.create(spec, tmp_path / "s", inputs=[1, 2], workers=0)
    assert _values(tmp_path / "s") == [1, 2]
    pipe.write_text(textwrap.dedent("""
        def preprocess(i):
            yield {'v': i * 10}
    """))  # fmt: skip
    info = snap.create(spec, tmp_path / "s", inputs=[1, 2], workers=0, overwrite=True)
    assert _values(tmp_path / "s") == [10, 20]
    assert (
        snap.create(spec, tmp_path / "w", inputs=[1, 2], workers=2).fingerprint == info.fingerprint
    )
    assert _values(tmp_path / "w") == [10, 20]


class _Rewriter(importlib.abc.MetaPathFinder, importlib.abc.SourceLoader):
    """An import hook that rewrites the code it loads, as pytest's assertion rewriting and
    jaxtyping's or typeguard's hooks do: here every `assert` gets a message."""

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path = name, path

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def get_filename(self, fullname: str) -> str:
        return str(self.path)

    def get_data(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def source_to_code(self, data: Any, path: Any, *, _optimize: int = -1) -> Any:  # type: ignore[override]
        tree = ast.parse(data)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and node.msg is None:
                node.msg = ast.Constant("rewritten")
        return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


def test_a_module_an_import_hook_rewrote_is_not_taken_for_an_edited_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its code differs from its file unedited: pytest's assertion rewriting made a helper
    with an `assert` in a test module "edited since imported", refused with workers=0."""
    name = f"hooked_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text("def preprocess(i):\n    assert i >= 0\n    yield {'v': i}\n")
    hook = _Rewriter(name, path)
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    try:
        module = importlib.import_module(name)
        assert module.__spec__.loader is hook
        snap.create(module.preprocess, tmp_path / "s", inputs=[1, 2], workers=0)
        assert _values(tmp_path / "s") == [1, 2]
    finally:
        sys.modules.pop(name, None)


def _function(source: str) -> Any:
    return next(c for c in compile(source, "prep.py", "exec").co_consts if hasattr(c, "co_code"))


def test_a_class_bodys_line_is_not_its_code() -> None:
    """Python 3.13 keeps a class body's first line as a constant, stored as `__firstlineno__`:
    a comment added above a function that makes a class made it look edited under workers=0
    ("code older than its files"). Written out here as 3.13 compiles it, on any Python: the
    line, then a body whose constant equals it (one shared constant), then an edit that only
    an equal line number could hide."""
    from snapshot_cli.writers.freshness import _essence

    def made(line: int, size: int, above: str = "") -> Any:
        return _function(f"{above}def f(x):\n    class Row:\n        __firstlineno__ = {line}\n"
                         f"        size = {size}\n    return Row\n")  # fmt: skip

    assert _essence(made(2, 5)) == _essence(made(3, 5, "# a comment\n"))
    assert _essence(made(2, 3)) == _essence(made(3, 3, "# a comment\n"))  # (3 shared)
    assert _essence(made(2, 2)) != _essence(made(3, 3, "# a comment\n"))  # an edit
