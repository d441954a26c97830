"""A notebook's frames in a pipeline's traceback named as IPython names them, ``Cell In[3],
line 7``, not by the name their code was compiled under (``File "/tmp/ipykernel_4711/
2873.py", line 7`` in Jupyter, ``File "<ipython-input-3-...>"`` in IPython), which names no
file the user has. Applied in the notebook's own process, where IPython keeps those names:
to a worker's error as it is raised again, and to an in-process task's."""

from __future__ import annotations

import re
import sys

_FRAME = re.compile(r'^(\s*)File "([^"]+)", line (\d+)', re.MULTILINE)


def _cells() -> dict[str, int]:
    """IPython's compiled cells in this process, name -> execution count (none: {})."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return dict(names) if isinstance(names, dict) else {}


def cells_named(text: str) -> str:
    """``text`` (a formatted traceback) with each frame of a cell of this process's IPython
    named as IPython names it."""
    cells = _cells()
    if not cells:
        return text

    def named(frame: re.Match[str]) -> str:
        indent, name, number = frame.groups()
        return f"{indent}Cell In[{cells[name]}], line {number}" if name in cells else frame[0]

    return _FRAME.sub(named, text)
