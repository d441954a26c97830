"""A pipeline file that changes the working directory when it is imported (the common
``os.chdir(os.path.dirname(os.path.abspath(__file__)))``): OUTPUT, ``--input`` patterns and
an ``--inputs-from`` file given relative are still the user's, from the directory the command
(or ``snap.create``) started in. They went where the pipeline moved to (``pipelines/out``,
``pipelines/data/*.bin``, or a false "matched no files"), and worker processes could not
find the pipeline at all."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli

PIPELINE = """import os
os.chdir(os.path.dirname(os.path.abspath(__file__)))  # (so that its own files load)

def f(path, k: int = 1):
    yield {"file": path, "cwd": os.getcwd(), "k": k}

def items():
    return [1, 2]

def g(x):
    return [{"x": x, "cwd": os.getcwd()}]
"""
ITEMS = "def listed():\n    return [3, 4]\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``project/`` (the working directory) with ``data/a.bin``, and ``pipelines/prep.py``
    beside an unrelated ``pipelines/data/z.bin``."""
    root = tmp_path / "project"
    (root / "pipelines" / "data").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "pipelines" / "prep.py").write_text(PIPELINE)
    (root / "items.py").write_text(ITEMS)
    (root / "data" / "a.bin").write_bytes(b"RIGHT")
    (root / "pipelines" / "data" / "z.bin").write_bytes(b"WRONG")
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in ("prep", "items"):
        sys.modules.pop(name, None)


def records(path: Path) -> list[dict[str, object]]:
    return [dict(r) for b in snap.open(str(path)).loader(8) for r in _rows(b)]


def _rows(batch: dict[str, object]) -> Iterator[dict[str, object]]:
    keys = list(batch)
    for values in zip(*(batch[k] for k in keys), strict=True):  # type: ignore[call-overload]
        yield dict(zip(keys, values, strict=True))


def run(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["create", *args, "--quiet"])
    return done.exit_code, done.output


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("param", [[], ["--param", "k=2"]], ids=["", "param"])
def test_output_and_inputs_are_from_where_the_command_started(
    project: Path, workers: str, param: list[str]
) -> None:
    """--workers 0 and N; --param imports the pipeline before the create begins."""
    code, out = run("pipelines/prep.py:f", "out", "--input", "data/*.bin", "--workers", workers,
                    *param)  # fmt: skip
    assert code == 0, out
    assert (project / "out" / "manifest.json").is_file()
    assert not (project / "pipelines" / "out").exists()
    got = records(project / "out")
    assert [r["file"] for r in got] == [str(project / "data" / "a.bin")]
    assert {r["cwd"] for r in got} == {str(project / "pipelines")}  # (its chdir is kept)
    manifest = json.loads((project / "out" / "manifest.json").read_text())
    assert manifest["pipeline"]["spec"] == "pipelines/prep.py:f"  # (recorded as given)
    assert manifest["pipeline"]["inputs"]["patterns"] == ["data/*.bin"]
    os.chdir(project)  # (the same command again, from the same directory: up to date)
    code, out = run("pipelines/prep.py:f", "out", "--input", "data/*.bin", "--workers", workers,
                    *param, "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["reused"] is True, out


@pytest.mark.parametrize(
    "spelling", ["file://pipelines/prep.py:f", "file://{root}/pipelines/prep.py:f"]
)
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_file_url_spec_is_from_where_the_command_started(
    project: Path, spelling: str, workers: str
) -> None:
    """``file://`` specs were joined to the start directory as text ("pipeline file
    '/start/file:///abs/prep.py' not found"; a review's finding)."""
    spec = spelling.format(root=project)
    code, out = run(spec, "out", "--input", "data/*.bin", "--workers", workers)
    assert code == 0, out
    assert [r["file"] for r in records(project / "out")] == [str(project / "data" / "a.bin")]


def test_an_input_named_exactly_is_found(project: Path) -> None:
    """It is not beside the pipeline: "matched no files" was said of it."""
    code, out = run("pipelines/prep.py:f", "out", "--input", "data/a.bin", "--workers", "0")
    assert code == 0, out
    assert [r["file"] for r in records(project / "out")] == [str(project / "data" / "a.bin")]


@pytest.mark.parametrize("inputs_from", ["items.py:listed", "pipelines/prep.py:items"])
def test_inputs_from_a_file_is_from_where_the_command_started(
    project: Path, inputs_from: str
) -> None:
    code, out = run("pipelines/prep.py:g", "out", "--inputs-from", inputs_from, "--workers", "0")
    assert code == 0, out
    assert sorted(r["x"] for r in records(project / "out")) in ([1, 2], [3, 4])
    manifest = json.loads((project / "out" / "manifest.json").read_text())
    assert manifest["pipeline"]["inputs"]["inputs_from"] == inputs_from


@pytest.mark.parametrize("workers", [0, 2])
def test_snap_create_from_python_is_from_the_directory_of_the_call(
    project: Path, workers: int
) -> None:
    info = snap.create("pipelines/prep.py:f", "out", inputs=["data/a.bin"], workers=workers)
    assert info.path == str(project / "out")
    assert [r["file"] for r in records(project / "out")] == [str(project / "data" / "a.bin")]
    assert os.getcwd() == str(project / "pipelines")  # (what the pipeline chose, kept)
    again = snap.create("prep.py:f", "out2", inputs=str(project / "data" / "*.bin"), workers=0)
    assert again.path == str(project / "pipelines" / "out2")  # (relative to the call's)


def test_the_same_relative_spec_in_another_directory_is_that_directorys_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook that moves to another project and runs ``snap.create("prep.py:f", ...)``
    there got the first project's function (kept under the spec's text), which ran and was
    fingerprinted as its own file: the second snapshot held the first project's records
    (where the second's file had been loaded before under another spelling)."""
    outs = []
    for name in ("one", "two"):
        project = tmp_path / name
        project.mkdir()
        (project / "prep.py").write_text(f"def f(x):\n    return [{{'who': {name!r}}}]\n")
        monkeypatch.chdir(project)
        if name == "two":  # (its file loaded once by its absolute path)
            snap.create(f"{project}/prep.py:f", "first", inputs=[1], workers=0, progress=False)
        info = snap.create("prep.py:f", "out", inputs=[1, 2], workers=0, progress=False)
        outs.append((info.path, info.fingerprint))
    for (path, _), name in zip(outs, ("one", "two"), strict=True):
        assert {w for b in snap.open(path).loader(8) for w in b["who"]} == {name}
    assert outs[0][1] != outs[1][1]
    sys.modules.pop("prep", None)
