"""A local path as the OS names it: a ``..`` after a symbolic link taken as the kernel takes
it (used by :mod:`snapshot_cli.storage` and the pipeline's import).

``os.path.normpath`` and ``abspath`` drop ``x/..`` as text, which names the directory that
holds ``x``; the kernel goes to where ``x`` leads first, then up. With ``proj/lnk`` a link to
``../data/deep``, ``proj/lnk/..`` is ``data`` to ``ls`` and ``open()``, and snap read
``proj/raw/*.bin`` for ``--input 'proj/lnk/../raw/*.bin'`` and wrote OUTPUT
``proj/lnk/../snap`` to ``proj/snap``. A path with no ``..`` after a link is normalized as
before, to the same text: what snap prints and records for it (an input's name, a part of a
snapshot's identity) stays.
"""

from __future__ import annotations

import os


def resolved(path: str) -> str:
    """``os.path.normpath(path)``, but where a ``..`` follows a component that is a symbolic
    link, the path up to that link is the link's target (``os.path.realpath``, absolute):
    ``..`` goes up from where the link leads. A ``..`` after anything else (a directory, a
    name that does not exist, a glob) is dropped with its component, as ``normpath`` does."""
    parts = path.split("/")
    if ".." not in parts:
        return os.path.normpath(path)
    head = parts[0]
    for part in parts[1:]:
        here = os.path.normpath(head) if head else "/"
        if part == ".." and _is_link(here):
            head = os.path.dirname(os.path.realpath(here))
        else:
            head = f"{head}/{part}"
    return os.path.normpath(head)


def absolute(path: str) -> str:
    """``os.path.abspath(path)`` as :func:`resolved` normalizes it."""
    return resolved(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def _is_link(path: str) -> bool:
    if path in (".", "..", "/") or path.endswith("/.."):
        return False
    return os.path.islink(path)
