"""The ``snap`` program's entry point (``snap``, ``python -m snapshot_cli``): a Ctrl-C while
snap's modules load (~40 ms: click, the command group) ends it as one in a command does, one
line and exit 130; it printed Python's traceback of the import it cut. This module imports
nothing of snap's until then, so the window left is the package's own ``__init__`` (~10 ms,
most of it ``typing``) and Python's start-up."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("snap: interrupted\n")
        sys.exit(130)
    run()
