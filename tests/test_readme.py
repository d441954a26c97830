"""Every code block of README.md runs as shown, taken from README.md itself.

- The shell blocks run through bash, in README order, in a directory laid out as the
  repository is after ``make demo`` (its examples, and the inputs ``make demo`` writes).
- The Python blocks run twice: concatenated into one script run as ``python script.py``,
  with no ``if __name__ == "__main__":`` guard (as a reader saves them); and cell by cell in
  an IPython shell, as a notebook runs them, in two sessions one after the other (the second
  finds the snapshots of the first up to date: a notebook's function keeps its identity).
- ``make demo`` runs twice in a row (the second run is "up to date").
- Two blocks run elsewhere: the one holding ``make test`` is this suite, and the remote one
  runs against a real S3 server in tests/backends/test_readme_remote.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.backends.test_readme_remote import MARKER as REMOTE_MARKER
from tests.conftest import REPO
from tests.readme import Block, block_with, blocks

VENV = Path(sys.executable).parent.parent
ELSEWHERE = {
    "make test": "the suite itself; make demo runs in test_make_demo_twice_in_a_row",
    REMOTE_MARKER: "tests/backends/test_readme_remote.py, against a real S3 server",
}
NOTEBOOK = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
for i, cell in enumerate(json.load(open(sys.argv[1]))):
    result = shell.run_cell(cell, store_history=True)
    if not result.success:
        sys.exit(f"cell {i} failed: {result.error_before_exec or result.error_in_exec!r}")
"""


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}


def runnable() -> tuple[list[Block], list[Block]]:
    """(shell blocks, Python blocks) this module runs."""
    mine = [b for b in blocks() if b.runnable and not any(m in b.code for m in ELSEWHERE)]
    return [b for b in mine if b.lang != "python"], [b for b in mine if b.lang == "python"]


def workdir(path: Path) -> Path:
    """A directory as the repository is after ``make demo`` wrote its inputs."""
    path.mkdir()
    shutil.copytree(REPO / "examples", path / "examples")
    (path / ".venv").symlink_to(VENV)
    subprocess.run(
        [sys.executable, "examples/quickstart/make_inputs.py", "demo-output/raw", "500"],
        cwd=path, check=True,
    )  # fmt: skip
    return path


def test_every_runnable_block_is_run_somewhere() -> None:
    shell, python = runnable()
    elsewhere = [block_with(marker) for marker in ELSEWHERE]
    every = [b for b in blocks() if b.runnable]
    assert sorted(b.line for b in shell + python + elsewhere) == [b.line for b in every]
    assert len(python) >= 4 and len(shell) >= 3


@pytest.mark.slow
def test_shell_blocks_then_python_blocks_as_a_script(tmp_path: Path) -> None:
    work = workdir(tmp_path / "work")
    shell, python = runnable()
    for block in shell:
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code], cwd=work, env=env(),
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert res.returncode == 0, f"README.md line {block.line}:\n{block.code}\n{res.stderr}"
    assert (work / "demo-output" / "train" / "manifest.json").exists()
    assert (work / "trace.json").exists()

    script = work / "readme_example.py"
    script.write_text("\n\n".join(b.code for b in python))
    res = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=env(), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    # (Keras warned its shuffle=True was ignored, as README's example left it: a probe)
    assert "Warning: " not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert "500 False" in lines and "100" in lines, res.stdout
    shards = len(snap.open(str(work / "demo-output" / "train-py"), version=1).shards)
    assert f"500 ['image', 'label', 'tokens', 'caption'] {shards}" in lines[1], res.stdout
    epochs = [line for line in lines if line.startswith(("0 [", "1 ["))]
    assert len(epochs) == 2 and epochs[0][2:] != epochs[1][2:]  # a fresh shuffle each epoch


@pytest.mark.slow
def test_python_blocks_as_notebook_cells_in_two_sessions(tmp_path: Path) -> None:
    work = workdir(tmp_path / "work")
    _, python = runnable()
    # The second session, which finds the snapshots made, leaves out the cells that train
    # with a framework (they import torch, JAX and Keras: ~20 s of the suite's time; the
    # first session and the script above run them)
    trains = ("import torch", "import jax", "import keras")
    sessions = [python, [b for b in python if not any(t in b.code for t in trains)]]
    assert 0 < len(sessions[1]) < len(python)
    (work / "notebook.py").write_text(NOTEBOOK)
    outputs = []
    for session, cells in enumerate(sessions):
        (work / f"cells{session}.json").write_text(json.dumps([b.code for b in cells]))
        res = subprocess.run(
            [sys.executable, "notebook.py", f"cells{session}.json"], cwd=work, env=env(),
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        outputs.append(res.stdout.splitlines())
    assert "500 False" in outputs[0] and "500 True" in outputs[1]
    assert "100" in outputs[0] and "100" in outputs[1]
    manifest = json.loads((work / "demo-output" / "train-py" / "manifest.json").read_text())
    assert manifest["pipeline"]["shipped"] == "by value"  # a notebook's function, in workers


@pytest.mark.slow
def test_make_demo_twice_in_a_row(tmp_path: Path) -> None:
    demo = tmp_path / "demo-output"
    for run in range(2):
        res = subprocess.run(
            ["make", "-C", str(REPO), "demo", f"DEMO_DIR={demo}", f"VENV={VENV}"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert "replayed 500 records" in res.stdout
        assert ("up to date" in res.stdout + res.stderr) == (run == 1)


def test_every_option_the_readme_names_exists() -> None:
    """An option named in prose (`--shuffle-buffer`, `--retention`) is one of snap's commands'
    or of a benchmark script's: a renamed option cannot linger in the text."""
    import re

    from snapshot_cli.cli import cli
    from tests.test_benchmarks import SCRIPTS, options_of

    snaps = {o for p in cli.params for o in p.opts}
    for command in cli.commands.values():
        snaps |= {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    benches = {o for s in SCRIPTS for o in options_of(s)}
    named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", (REPO / "README.md").read_text()))
    assert {"--shuffle-buffer", "--dry-run", "--retention", "--repeats"} <= named
    assert sorted(named - snaps - benches - {"--"}) == []


def test_the_readmes_loader_signature_is_the_real_one() -> None:
    """README's `s.loader(batch_size=None, *, ...)` line: the same parameters, in the same
    order, the same keyword-only ones and the same defaults (it showed batch_size=256 with
    the rest positional, and no trace=)."""
    import ast
    import inspect
    import re

    text = (REPO / "README.md").read_text()
    shown = re.search(r"^`s\.loader\((batch_size=.*?)\)`", text, re.S | re.M)
    assert shown is not None
    tree = ast.parse(f"def f({' '.join(shown.group(1).split())}): pass")
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    positional = [a.arg for a in fn.args.args]
    keyword_only = [a.arg for a in fn.args.kwonlyargs]
    defaults = [ast.literal_eval(d) for d in fn.args.defaults + fn.args.kw_defaults if d]
    params = list(inspect.signature(snap.Snapshot.loader).parameters.values())[1:]  # (self)
    assert positional == [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert keyword_only == [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    assert defaults == [p.default for p in params]
