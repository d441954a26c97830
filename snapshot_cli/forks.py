"""How many forks this process descends from since snap was imported (``count``): it changes
in the child of an ``os.fork()`` (a pipeline's own fork, a DataLoader worker), where code that
holds its parent's threads, files or place must not go on as the parent's. Read, not called:
a module attribute costs ~30 ns, ``os.getpid()`` a system call."""

from __future__ import annotations

import os

count = 0


def _forked() -> None:
    global count
    count += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
