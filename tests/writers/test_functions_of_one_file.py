"""Two functions of one pipeline file are two pipelines.

The code part of the fingerprint was the file's hash alone: ``snap create q.py:triple OUT``
over the snapshot of ``q.py:double`` said "up to date" and kept double's records, and a
grow computed only the new input's task with ``triple``: one snapshot of both functions'
records, its manifest naming ``triple``. The function's name counts now; a snapshot made
before it did keeps its hash while the same function makes it (it stays up to date).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.writers import pipeline

SOURCE = """
from pathlib import Path

def double(path):
    yield {"x": int(Path(path).read_text()) * 2}

def triple(path):
    yield {"x": int(Path(path).read_text()) * 3}
"""


def values(out: Path) -> list[int]:
    return sorted(int(v) for b in snap.open(str(out)).loader(batch_size=8) for v in b["x"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "q.py").write_text(SOURCE)
    for i in (1, 2, 3):
        (tmp_path / f"in{i}.num").write_text(f"{i}\n")
    return tmp_path


def snap_create(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", *args, "--input", "*.num"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_another_function_of_the_file_is_other_code(project: Path) -> None:
    assert snap_create(project, "q.py:double", "out").returncode == 0
    res = snap_create(project, "q.py:triple", "out")
    assert res.returncode == 1, res.stderr
    assert "another function: double then, triple now" in res.stderr, res.stderr
    assert "--overwrite" in res.stderr and "Traceback" not in res.stderr
    assert values(project / "out") == [2, 4, 6]  # untouched
    assert snap_create(project, "q.py:triple", "out", "--overwrite").returncode == 0
    (project / "in4.num").write_text("4\n")
    res = snap_create(project, "q.py:triple", "out")  # a grow: every record triple's
    assert res.returncode == 0, res.stderr
    assert values(project / "out") == [3, 6, 9, 12]


def test_in_python_too(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``snap.create(q.triple, ...)`` after ``snap.create(q.double, ...)`` was reused."""
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    q = __import__("q")
    inputs = sorted(str(p) for p in project.glob("*.num"))
    first = snap.create(q.double, str(project / "py"), inputs=inputs, workers=0)
    with pytest.raises(snap.SnapshotExistsError, match="another function: double then"):
        snap.create(q.triple, str(project / "py"), inputs=inputs, workers=0)
    again = snap.create(q.double, str(project / "py"), inputs=inputs, workers=0)
    assert again.reused and again.fingerprint == first.fingerprint
    other = snap.create(q.triple, str(project / "py2"), inputs=inputs, workers=0)
    assert other.fingerprint != first.fingerprint


def test_a_snapshot_made_before_names_counted_stays_up_to_date(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made as the snap before made it (the file's hash alone), it is up to date for the
    function that made it, grows under that hash, and is other code for another function."""
    monkeypatch.syspath_prepend(str(project))
    q = __import__("q")
    inputs = [str(project / f"in{i}.num") for i in (1, 2, 3)]
    out = str(project / "old")
    with monkeypatch.context() as before:
        before.setattr(pipeline, "_named", lambda digest, spec: digest)
        made = snap.create(q.double, out, inputs=inputs, workers=0)
    legacy = snap.open(out).manifest.fingerprint_parts["code"]
    assert legacy == pipeline.file_hash(q.double) != pipeline.code_hash("q:double", q.double)
    same = snap.create(q.double, out, inputs=inputs, workers=0)
    assert same.reused and same.fingerprint == made.fingerprint
    with pytest.raises(snap.SnapshotExistsError, match="another function"):
        snap.create(q.triple, out, inputs=inputs, workers=0)
    (project / "in4.num").write_text("4\n")
    grown = snap.create(q.double, out, inputs=[*inputs, str(project / "in4.num")], workers=0)
    assert grown.version == 2 and grown.tasks_reused >= 1
    assert snap.open(out).manifest.fingerprint_parts["code"] == legacy
    assert values(Path(out)) == [2, 4, 6, 8]


SHARED_QUALNAMES = """
def scaled(k):
    def fn(path):
        yield {"x": k}
    return fn

double = scaled(2)
triple = scaled(3)

def logged(f):
    def wrapper(*a, **kw):
        return f(*a, **kw)
    return wrapper

@logged
def halve(path):
    yield {"x": 1}

@logged
def negate(path):
    yield {"x": -1}

class Pre:
    def __init__(self, k):
        self.k = k

    def run(self, path):
        yield {"x": self.k}

small, large = Pre(2), Pre(3)
"""


@pytest.mark.parametrize(
    ("first", "second"),
    [("double", "triple"), ("halve", "negate"), ("small.run", "large.run")],
)
def test_functions_of_one_qualname_are_told_apart_by_the_spec(
    tmp_path: Path, first: str, second: str
) -> None:
    """A factory's functions (``scaled.<locals>.fn``), one decorator's wrappers
    (``logged.<locals>.wrapper``) and two objects' methods (``Pre.run``) share a
    ``__qualname__``: the name counted is the spec's."""
    (tmp_path / "q.py").write_text(SHARED_QUALNAMES)
    (tmp_path / "in1.num").write_text("1\n")
    assert snap_create(tmp_path, f"q.py:{first}", "out").returncode == 0
    res = snap_create(tmp_path, f"q.py:{second}", "out")
    assert res.returncode == 1, res.stderr
    assert f"another function: {first} then, {second} now" in res.stderr, res.stderr


FAILING = """
import os
from pathlib import Path

def work(path):
    if os.environ.get("FAIL") and Path(path).read_text().strip() == "5":
        raise ValueError("a crash on input 5")
    with open("calls.log", "a") as log:
        log.write(Path(path).read_text())
    yield {"x": int(Path(path).read_text())}
"""


def test_an_unfinished_run_begun_before_names_counted_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first create the snap before this change began and did not finish (its run keyed
    by the file's hash alone) was computed again whole, without a word."""
    (tmp_path / "w.py").write_text(FAILING)
    inputs = []
    for i in range(8):
        (tmp_path / f"{i}.num").write_text(f"{i}\n")
        inputs.append(str(tmp_path / f"{i}.num"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAIL", "1")
    spec = f"{tmp_path / 'w.py'}:work"
    with monkeypatch.context() as before:
        before.setattr(pipeline, "_named", lambda digest, spec: digest)
        with pytest.raises(snap.PipelineError):
            snap.create(spec, str(tmp_path / "out"), inputs=inputs, workers=0, inputs_per_task=1)
    done = (tmp_path / "calls.log").read_text().split()
    assert done == ["0", "1", "2", "3", "4"]
    (tmp_path / "calls.log").unlink()
    monkeypatch.delenv("FAIL")
    info = snap.create(spec, str(tmp_path / "out"), inputs=inputs, workers=0, inputs_per_task=1)
    assert info.tasks_resumed == 5 and info.num_records == 8
    assert (tmp_path / "calls.log").read_text().split() == ["5", "6", "7"]
    legacy = snap.open(str(tmp_path / "out")).manifest.fingerprint_parts["code"]
    assert legacy == pipeline.file_hash(pipeline.resolve(spec).function)


SCRIPT = (
    SOURCE
    + """
if __name__ == "__main__":
    import sys
    import snapshot_cli as snap
    snap.create(double, sys.argv[1], inputs=sorted(map(str, Path().glob("*.num"))), workers=0)
"""
)


@pytest.mark.parametrize("first", ["script", "cli"])
def test_a_function_identified_the_other_way_is_said_so(project: Path, first: str) -> None:
    """The same unchanged function, made by `python q.py` (by value) then by `snap create
    q.py:double` (by its file), or the other way, said "its file, or a file of your own
    modules its code uses" had changed (a probe): nothing had."""
    (project / "q.py").write_text(SCRIPT)

    def by_script() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "q.py", "out"], cwd=project,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    runs = [by_script, lambda: snap_create(project, "q.py:double", "out")]
    made, other = runs if first == "script" else runs[::-1]
    assert made().returncode == 0
    res = other()
    assert res.returncode == 1  # (the script's own create raises: a traceback there)
    assert "Traceback" not in res.stderr or first == "cli"
    said = ("sent by value, as a function of a script run with python or of a notebook is",
            "named by its file")  # fmt: skip
    then, now = said if first == "script" else said[::-1]
    assert f"it was made from a function {then}" in res.stderr, res.stderr
    assert f"this one is {now}" in res.stderr and "the two ways never match" in res.stderr
    assert "its file, or a file of your own modules" not in res.stderr
    assert made().returncode == 0  # the way it was made: up to date
