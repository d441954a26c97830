"""A wheel built again from a checkout holds the modules the checkout has now: setuptools'
``build/lib`` in the checkout kept a module removed since an earlier build (a pull that
renamed one), and ``pip wheel`` shipped it (an install probe). setup.py's build_py removes
such files before it copies the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_a_module_removed_from_the_checkout_leaves_the_build_too(tmp_path: Path) -> None:
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    shutil.copytree(REPO / "snapshot_cli", tree / "snapshot_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))  # fmt: skip
    (tree / "snapshot_cli" / "renamed_since.py").write_text("X = 1\n")

    def build() -> set[str]:
        subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", "out"],
                       cwd=tree, check=True, capture_output=True, timeout=300)  # fmt: skip
        return {p.name for p in (tree / "out" / "snapshot_cli").iterdir()}

    assert {"renamed_since.py", "cli.py"} <= build()
    (tree / "snapshot_cli" / "renamed_since.py").unlink()
    after = build()
    assert "renamed_since.py" not in after and "cli.py" in after
    assert (tree / "out" / "snapshot_cli" / "readers" / "loader.py").exists()
