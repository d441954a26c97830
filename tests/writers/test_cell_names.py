"""A notebook's failing pipeline names its frames as IPython does ("Cell In[2], line 3"), in
workers and in process: the name its code was compiled under ("/tmp/ipykernel_4711/2873.py"
in Jupyter, "<ipython-input-2-...>" in IPython) names no file the user has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOK = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in [
    "import sys, snapshot_cli as snap",
    "def prep(x):\\n    y = x - 1\\n    return [{'v': 1 / y}]",
    "try:\\n    snap.create(prep, sys.argv[1], inputs=[1, 2], workers=int(sys.argv[2]))\\n"
    "except snap.PipelineError as err:\\n    print(err)",
]:
    shell.run_cell(cell, store_history=True)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_notebook_cell_s_frame_is_named_as_ipython_names_it(tmp_path: Path, workers: int) -> None:
    said = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, str(tmp_path / "s"), str(workers)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    assert "the pipeline raised ZeroDivisionError on input 1" in said, said
    assert "  Cell In[2], line 3, in prep\n    return [{'v': 1 / y}]" in said, said
    assert "ipython-input" not in said and 'File "' not in said, said
