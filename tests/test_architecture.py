"""The layout README's "Development" section describes is the code's: readers and writers never
import each other, the shared and storage modules import neither (nor the CLI), every module
is named there, and none is over 400 lines (nor is a C source or header of the compiled parts,
each of which setup.py builds with every header it includes)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "snapshot_cli"
SHARED = ["manifest", "layout", "schema", "units", "errors", "progress", "storage", "protocols",
          "faults", "hdfs", "retry", "fingerprint", "history", "versions", "arrays",
          "keywords", "interrupted", "shortages", "crc"]  # fmt: skip


def imported(path: Path) -> set[str]:
    """The snapshot_cli modules ``path`` imports, as dotted names below the package."""
    package = path.relative_to(PACKAGE).parent.parts
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - node.level + 1])
            target = [*base, *(node.module.split(".") if node.module else [])]
            names = [".".join(target)] + [".".join([*target, a.name]) for a in node.names]
            out.update(n for n in names if n)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("snapshot_cli"):
            out.add(node.module.removeprefix("snapshot_cli.") if node.module else "")
    return out


def modules(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).glob("*.py"))


@pytest.mark.parametrize(("side", "other"), [("readers", "writers"), ("writers", "readers")])
def test_readers_and_writers_are_siblings(side: str, other: str) -> None:
    for path in modules(side):
        wrong = sorted(m for m in imported(path) if m.split(".")[0] == other)
        assert not wrong, f"{path.relative_to(REPO)} imports {wrong}"


def test_shared_modules_import_no_side_and_not_the_cli() -> None:
    for name in SHARED:
        path = PACKAGE / f"{name}.py"
        wrong = sorted(m for m in imported(path)
                       if m.split(".")[0] in ("readers", "writers", "cli", "cli_io", "render",
                                               "report", "facade"))  # fmt: skip
        assert not wrong, f"{path.relative_to(REPO)} imports {wrong}"


MAX_LINES = 400


def test_every_module_is_in_the_readme_and_none_is_long() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Development") :]
    for path in [*modules(), *modules("readers"), *modules("writers")]:
        if path.name in ("__init__.py", "__main__.py"):
            continue
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines"
        assert f"`{path.name}`" in section, f"README's Development section lacks {path.name}"


def c_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")])


def test_no_c_source_or_header_is_long() -> None:
    """The compiled parts too: a module file includes its parts, one concept each, as headers
    of static functions (one translation unit, so what a loop calls is inlined as before)."""
    assert c_files()
    long = {
        str(path.relative_to(REPO)): lines
        for path in c_files()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def extensions() -> dict[str, tuple[list[str], list[str]]]:
    """setup.py's extensions: name -> (sources, depends), as written there (literal lists)."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for node in ast.walk(ast.parse((REPO / "setup.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            given = {k.arg: k.value for k in node.keywords}
            sources = ast.literal_eval(given["sources"])
            depends = ast.literal_eval(given["depends"]) if "depends" in given else []
            found[ast.literal_eval(node.args[0])] = (sources, depends)
    return found


def included(path: Path) -> set[str]:
    """The package's headers path includes (``#include "x.h"``), and theirs, repo-relative."""
    out: set[str] = set()
    todo = [path]
    while todo:
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', todo.pop().read_text(), re.M):
            header = path.parent / name
            rel = header.relative_to(REPO).as_posix()
            if rel not in out:
                out.add(rel)
                todo.append(header)
    return out


def test_every_c_file_is_built_and_every_header_shipped() -> None:
    """Each extension's depends is what its sources include (an edited header rebuilds it;
    the sdist ships depends), and every C file of the package is in an extension."""
    exts = extensions()
    assert exts
    for name, (sources, depends) in exts.items():
        wanted = set().union(*(included(REPO / source) for source in sources))
        assert set(depends) == wanted, f"{name}: depends {sorted(depends)}, includes {wanted}"
    named = {f for sources, depends in exts.values() for f in [*sources, *depends]}
    orphans = {p.relative_to(REPO).as_posix() for p in c_files()} - named
    assert not orphans, f"in no extension of setup.py: {sorted(orphans)}"


# A command imports the side it runs and not the other: the CLI's start-up is most of a short
# command's time (`snap --help` took 0.57 s with everything imported, 0.32 s without).
COMMAND_IMPORTS = """
import json, sys
from click.testing import CliRunner
from snapshot_cli.cli import cli
res = CliRunner().invoke(cli, sys.argv[1:])
print(json.dumps([res.exit_code, sorted(m for m in sys.modules if m.startswith("snapshot_cli."))]))
"""


@pytest.mark.parametrize(
    ("args", "not_imported"),
    [
        (["--help"], ["readers.snapshot", "writers.create", "writers.runs"]),
        (["inspect", "SNAP"], ["readers.loader", "writers.create", "writers.runs"]),
        (["verify", "SNAP"], ["readers.loader", "writers.create"]),
        (["gc", "SNAP", "--dry-run"], ["readers.snapshot", "writers.create"]),
        (["create", "PIPE:f", "SNAP", "--workers", "0"], ["readers.loader", "readers.snapshot"]),
    ],
)
def test_a_command_imports_only_what_it_runs(
    tmp_path: Path, args: list[str], not_imported: list[str]
) -> None:
    (tmp_path / "p.py").write_text("def f():\n    yield {'x': 1}\n")
    snap = tmp_path / "snap"
    made = subprocess.run([sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path}/p.py:f",
                           str(snap), "--workers", "0", "--quiet"], check=True)  # fmt: skip
    assert made.returncode == 0
    argv = [a.replace("SNAP", str(snap)).replace("PIPE", str(tmp_path / "p.py")) for a in args]
    res = subprocess.run([sys.executable, "-c", COMMAND_IMPORTS, *argv], capture_output=True,
                         text=True, check=False, cwd=REPO)  # fmt: skip
    code, loaded = json.loads(res.stdout.splitlines()[-1])
    assert code == 0, res.stdout
    assert "snapshot_cli.cli" in loaded
    wrong = [m for m in not_imported if f"snapshot_cli.{m}" in loaded]
    assert not wrong, f"snap {' '.join(args)} imported {wrong}"


# pyarrow calls that import pandas in a pyarrow snap supports (``pyarrow>=17``): where pandas
# is not installed they fail (``to_pandas_dtype`` did, before pyarrow 26: every create on
# Python 3.10, whose newest pyarrow is 25). arrays.py does their work without them.
PANDAS_CALLS = {"to_pandas_dtype", "to_pandas"}


def test_no_module_calls_what_imports_pandas() -> None:
    found = [
        f"{path.relative_to(REPO)}:{node.lineno} {node.attr}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in PANDAS_CALLS
    ]
    assert found == []


def test_every_install_hint_names_an_extra_pyproject_has() -> None:
    """What an error or README tells a new user to install is what pyproject's extras
    install: ``pip install torch`` in an error names a package of an extra, and README's
    ``pip install '/path/to/checkout[torch,gcs]'`` extras pyproject defines (the
    distribution is on no index: ``pip install 'arrowsnap[torch]'`` found nothing)."""
    import re

    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([a-z0-9-]+)\s*=", section, re.MULTILINE))
    assert {"torch", "jax", "tf", "gcs", "s3", "ray"} <= extras
    packages = {
        name.lower()
        for extra in ("torch", "jax", "tf", "gcs", "s3", "ray")
        for name in re.findall(rf'^{extra}\s*=\s*\["([A-Za-z0-9_-]+)', section, re.MULTILINE)
    }
    hints = {
        (path.name, name)
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"pip install '?([A-Za-z][A-Za-z0-9_-]*)", path.read_text())
    }
    assert hints and {name for _, name in hints} <= packages, (hints, packages)
    readme = (REPO / "README.md").read_text()
    assert "arrowsnap[" not in readme
    named = {e for g in re.findall(r"checkout\[([a-z0-9,-]+)\]", readme) for e in g.split(",")}
    assert named and named <= extras, named
