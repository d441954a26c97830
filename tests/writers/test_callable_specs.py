"""A spec may name a ``functools.partial`` or an object of a class with ``__call__``.

``snap create pipe.py:run`` with ``run = functools.partial(lib.pre, size=5)`` (or ``run =
lib.Scale(7)``) said "cannot find the source file of functools.partial(...) to fingerprint
it", with no advice, though the Python API took the same object. The code part hashes the
file of the code it runs and, where the object is made in another file, that file too: a
change of the partial's arguments is new code, as an edit of the function is.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.writers import pipeline


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, str]:
    lib = f"lib_{uuid.uuid4().hex[:8]}"  # (a module name of its own: sys.modules keeps it)
    (tmp_path / f"{lib}.py").write_text(
        "from pathlib import Path\n\n"
        "class Scale:\n"
        "    def __init__(self, k):\n        self.k = k\n\n"
        "    def __call__(self, path):\n"
        "        yield {'x': int(Path(path).read_text()) * self.k}\n\n"
        "def pre(path, *, size=2):\n    yield {'x': int(Path(path).read_text()) * size}\n"
    )  # fmt: skip
    (tmp_path / "pipe.py").write_text(
        f"import functools\nimport {lib}\n\nrun = functools.partial({lib}.pre, size=5)\n"
        f"scale = {lib}.Scale(7)\npre = {lib}.pre\n"
    )
    for i in (1, 2):
        (tmp_path / f"in{i}.num").write_text(f"{i}\n")
    return tmp_path, lib


def values(out: Path) -> list[int]:
    return sorted(int(v) for b in snap.open(str(out)).loader(batch_size=8) for v in b["x"])


@pytest.mark.parametrize(("name", "factor"), [("run", 5), ("scale", 7)])
def test_a_partial_or_callable_object_is_a_pipeline(
    project: tuple[Path, str], name: str, factor: int
) -> None:
    root, lib = project
    spec, out, inputs = f"{root}/pipe.py:{name}", root / "out", str(root / "*.num")
    snap.create(spec, str(out), inputs=inputs, workers=1)
    assert values(out) == [factor, 2 * factor]
    assert snap.create(spec, str(out), inputs=inputs, workers=0).reused
    # The object's settings live in pipe.py; its code in the library: each is the pipeline's.
    for path, old, new in ((root / "pipe.py", f"({factor})", f"({factor + 1})"),
                           (root / "pipe.py", f"size={factor}", f"size={factor + 1}"),
                           (root / f"{lib}.py", "* size", "* size "),
                           (root / f"{lib}.py", "* self.k", "* self.k ")):  # fmt: skip
        text = path.read_text()
        if old not in text:
            continue
        path.write_text(text.replace(old, new))
        with pytest.raises(snap.SnapshotExistsError, match="different pipeline code"):
            snap.create(spec, str(out), inputs=inputs, workers=0)
        path.write_text(text)
    assert snap.create(spec, str(out), inputs=inputs, workers=0).reused


def test_a_plain_function_keeps_the_code_hash_it_had(project: tuple[Path, str]) -> None:
    """A function imported into the spec's file hashes its own file only, as before: the
    snapshots made of it stay up to date."""
    root, lib = project
    ref = pipeline.resolve(f"{root}/pipe.py:pre")
    assert ref.earlier_hash == pipeline.file_hash(ref.function)
    assert ref.earlier_hash != pipeline.resolve(f"{root}/pipe.py:run").earlier_hash


def test_a_builtin_says_to_wrap_it(tmp_path: Path) -> None:
    with pytest.raises(snap.PipelineLoadError, match=r"wrap a built-in or compiled function"):
        snap.create("math:sqrt", str(tmp_path / "out"), inputs=[1.0], workers=0)


def test_a_callable_object_whose_call_yields_nothing_is_told_its_generator_did(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It was told every call "returned" an empty list or None: its __call__ is a generator."""
    (tmp_path / "gen.py").write_text(
        "class Gen:\n    def __call__(self, i):\n        if False:\n            yield {'x': i}\n"
        "gen = Gen()\n"
    )
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        snap.create(f"{tmp_path}/gen.py:gen", str(tmp_path / "out"), inputs=[1, 2], workers=0)
    assert "(no call of its generator yielded a record)" in caplog.text, caplog.text
