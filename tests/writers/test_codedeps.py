"""A pipeline counts by the files of your own modules its code reaches, not only its own file:
an edit to a helper module it imports from left the snapshot "up to date" with the records
of the old code."""

from __future__ import annotations

import hashlib
import importlib
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers import codedeps, shipping
from snapshot_cli.writers.importing import load_function
from snapshot_cli.writers.pipeline import code_hash, file_hash


class Project:
    """A directory of modules on ``sys.path``, named uniquely for this test."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.tag = root, uuid.uuid4().hex[:8]
        monkeypatch.syspath_prepend(str(root))

    def name(self, stem: str) -> str:
        return f"{stem}_{self.tag}"

    def write(self, stem: str, source: str) -> Path:
        path = self.root / f"{self.name(stem)}.py"
        path.write_text(textwrap.dedent(source).replace("TAG", self.tag))
        importlib.invalidate_caches()
        return path

    def load(self, stem: str) -> Any:
        return importlib.import_module(self.name(stem))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    return Project(tmp_path, monkeypatch)


def layout(project: Project) -> Path:
    """pipe → (from helper import scale) → other.offset; pipe also imports unused, never
    reached; a class of helper's whose method calls third; an object made at import from
    tok's class (only the object is named in the code)."""
    project.write("other", "OFFSET = 0\ndef offset(v):\n    return v + OFFSET\n")
    project.write("third", "def twice(v):\n    return 2 * v\n")
    project.write("unused", "X = 1\n")
    project.write("tok", "class Tokenizer:\n    def encode(self, v):\n        return v\n")
    project.write(
        "helper",
        """
        import other_TAG
        import third_TAG
        SCALE = 1
        def scale(v):
            return other_TAG.offset(v * SCALE)
        class Doubler:
            def __call__(self, v):
                return third_TAG.twice(v)
        """,
    )
    return project.write(
        "pipe",
        """
        import numpy as np
        import unused_TAG
        from helper_TAG import Doubler, scale
        from tok_TAG import Tokenizer
        TOKENIZER = Tokenizer()
        def preprocess(i):
            yield {"x": int(np.int64(scale(Doubler()(TOKENIZER.encode(i)))))}
        """,
    )


@pytest.mark.parametrize(
    ("edited", "counts"),
    [
        ("helper", True),
        ("other", True),
        ("third", True),
        ("tok", True),
        ("unused", False),
        ("pipe", True),
    ],
)
def test_an_edit_counts_where_the_code_reaches(project: Project, edited: str, counts: bool) -> None:
    pipe = layout(project)
    fn = load_function(f"{pipe}:preprocess")
    before = code_hash(f"{pipe}:preprocess", fn)
    path = project.root / f"{project.name(edited)}.py"
    path.write_text(path.read_text() + "\n# an edit\n")  # (read again: the digest)
    assert (code_hash(f"{pipe}:preprocess", fn) != before) is counts
    reached = set(codedeps.user_modules(fn))
    assert {project.name(m) for m in ("helper", "other", "third", "tok")} <= reached
    assert project.name("unused") not in reached and "numpy" not in reached


def test_a_self_contained_pipeline_counts_by_its_file_alone(project: Project) -> None:
    """So that snapshots made before dependencies counted keep their fingerprint (made before
    the function's name counted too: test_functions_of_one_file.py)."""
    pipe = project.write("alone", "import numpy as np\ndef preprocess(i):\n    yield {'x': i}\n")
    fn = load_function(f"{pipe}:preprocess")
    assert file_hash(fn) == hashlib.sha256(pipe.read_bytes()).hexdigest()
    assert code_hash(f"{pipe}:preprocess", fn) != file_hash(fn)


def test_an_edited_helper_needs_overwrite_and_then_gives_the_new_records(
    project: Project, tmp_path: Path
) -> None:
    pipe = layout(project)
    out = str(tmp_path / "s")
    spec = f"{pipe}:preprocess"
    assert snap.create(spec, out, inputs=[1, 2], workers=0).num_records == 2
    other = project.root / f"{project.name('other')}.py"
    other.write_text(other.read_text().replace("OFFSET = 0", "OFFSET = 100"))
    project.load("other").OFFSET = 100  # (this process imported it already)
    with pytest.raises(snap.SnapshotExistsError, match=rf"code \({other.name} edited\)"):
        snap.create(spec, out, inputs=[1, 2], workers=0)
    snap.create(spec, out, inputs=[1, 2], workers=2, overwrite=True)  # fresh workers: new code
    got = sorted(int(x) for b in snap.open(out).loader(2) for x in b["x"])
    assert got == [102, 104]


def test_a_function_sent_by_value_counts_what_its_helpers_reach(project: Project) -> None:
    layout(project)
    helper = project.load("helper")

    def by_value(i: int) -> Any:  # a closure over nothing: defined here, shipped by value
        yield {"x": helper.scale(i)}

    before = shipping.identity(by_value)
    other = project.root / f"{project.name('other')}.py"
    other.write_text(other.read_text() + "\n# an edit\n")
    assert shipping.identity(by_value) != before


def test_installed_and_standard_modules_count_by_name() -> None:
    """numpy (installed) and os (the standard library) are never read."""
    assert sys.modules["numpy"].__file__ and sys.modules["os"].__file__  # (they have files)
    assert codedeps.user_module_file("numpy") is None
    assert codedeps.user_module_file("os") is None
    assert "numpy" not in codedeps.user_modules(np.mean)


def test_a_package_installed_elsewhere_on_sys_path_counts_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A venv's system site-packages, Debian's dist-packages, ``pip install --user``: not
    this environment's own package directory, but installed code all the same."""
    for where in ("site-packages", "dist-packages"):
        folder = tmp_path / where
        folder.mkdir()
        name = f"installed_{where.split('-')[0]}_{uuid.uuid4().hex[:8]}"
        (folder / f"{name}.py").write_text("def f():\n    return 1\n")
        monkeypatch.syspath_prepend(str(folder))
        importlib.invalidate_caches()
        importlib.import_module(name)
        assert codedeps.user_module_file(name) is None, where
    (tmp_path / "mine").mkdir()
    mine = Project(tmp_path / "mine", monkeypatch)  # the user's own directory: read
    own = mine.write("own", "def f():\n    return 1\n")
    mine.load("own")
    assert codedeps.user_module_file(mine.name("own")) == str(own.resolve())


def test_a_wrapper_chain_that_loops_is_walked_as_it_is(project: Project) -> None:
    """``inspect.unwrap`` raises ValueError on a ``__wrapped__`` cycle: it was "a bug in snap"."""
    layout(project)
    helper = project.load("helper")

    def looped(i: int) -> Any:
        return helper.scale(i)

    looped.__wrapped__ = looped  # type: ignore[attr-defined]
    assert project.name("helper") in codedeps.user_modules(looped)
