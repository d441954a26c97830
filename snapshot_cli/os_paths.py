"""A local path as the OS names it: a ``..`` after a symbolic link taken as the kernel takes
it (used by :mod:`snapshot_cli.storage` and the pipeline's import); a local OUTPUT's
spellings (``file:v2``, ``~user/s``: :func:`local_path`); whether the working directory
is gone (:func:`cwd_gone`).

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

from .errors import OptionError


def resolved(path: str) -> str:
    """``os.path.normpath(path)``, but where a ``..`` follows a component that is a symbolic
    link, the path up to that link is the link's target (``os.path.realpath``, absolute):
    ``..`` goes up from where the link leads. A ``..`` after anything else (a directory, a
    name that does not exist, a glob) is dropped with its component, as ``normpath`` does."""
    parts = path.split("/")
    if ".." not in parts:
        return _one_root(os.path.normpath(path))
    head = parts[0]
    for part in parts[1:]:
        here = os.path.normpath(head) if head else "/"
        if part == ".." and _is_link(here):
            head = os.path.dirname(os.path.realpath(here))
        else:
            head = f"{head}/{part}"
    return _one_root(os.path.normpath(head))


def _one_root(path: str) -> str:
    """``path`` with a leading ``//`` as ``/``, which it is on Linux and macOS: fsspec makes
    ``tmp/x`` ``//tmp/x`` where the working directory is ``/`` (a container's default), and
    ``normpath`` keeps two leading slashes (POSIX leaves their meaning to the system), so a
    create run from ``/`` named every input anew and computed every task again."""
    return path[1:] if path.startswith("//") else path


def absolute(path: str) -> str:
    """``os.path.abspath(path)`` as :func:`resolved` normalizes it."""
    return resolved(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def _is_link(path: str) -> bool:
    if path in (".", "..", "/") or path.endswith("/.."):
        return False
    return os.path.islink(path)


_LOCAL_SCHEMES = ("file://", "file:", "local://", "local:")  # (fsspec strips the first found)


def without_scheme(text: str) -> str:
    """``text`` without the local scheme fsspec takes off it (``file://``, ``file:``,
    ``local://``, ``local:``): ``file:v2`` and ``file://v2`` are ``v2``, relative to the
    working directory, as fsspec reads them; ``file:///data/v2`` is ``/data/v2``. Pure."""
    for scheme in _LOCAL_SCHEMES:
        if text.startswith(scheme):
            return text.removeprefix(scheme)
    return text


def local_path(path: str, given: str) -> str:
    """The local path ``path`` that fsspec made of the path or URL ``given``, as
    :func:`resolved` normalizes it, or an error where ``given`` names no path.

    How a local OUTPUT (or input) is spelled, the same for every command and ``snap.open``,
    since they all take it from here (:func:`.storage.resolve`):

    - ``file:v2``, ``file://v2`` (and ``local:``): ``./v2``, as fsspec reads them (a local
      scheme, then a path relative to the working directory); ``file:///data/v2`` is
      ``/data/v2``. A directory really named ``file:v2`` is ``./file:v2``.
    - ``~/s`` and ``~user/s`` (also after ``file:``): in that home directory. A ``~user``
      naming no user of this machine (or a ``~`` where this user has no home) is an error
      naming it: a shell leaves it as it is, and it made a directory ``./~nouser/s``, which
      a user almost never means; ``./~nouser/s`` names such a directory.

    Raises:
        OptionError: ``given`` starts with a ``~`` that names no home directory.
    """
    if path.startswith("~"):  # (fsspec's expanduser found no home: left as it was)
        user = path.split("/", 1)[0]
        whose = (
            "this user has no home directory (HOME is not set, and the user is not in the "
            "password database)"
            if user == "~"
            else f"there is no user {user[1:]!r} on this machine"
        )
        raise OptionError(
            f"{given!r} starts with {user!r}, but {whose}, so {user!r} names no home "
            f"directory: give the path meant (an absolute one, or ~/... for your own home), "
            f"or ./{path} for a directory really named {user!r}"
        )
    return resolved(path)


def cwd_gone(path: str) -> str | None:
    """Why the relative local ``path`` cannot be found if it is that the current directory
    was deleted (``os.getcwd()`` fails: every relative path then does, said as "No such file
    or directory" with no name), else None."""
    if "://" in path or os.path.isabs(path) or not cwd_deleted():
        return None
    return (
        "the current directory was deleted, and this path is relative to it: cd to a "
        "directory that exists, or give absolute paths"
    )


def cwd_deleted() -> bool:
    """Whether this process's working directory was deleted (``os.getcwd()`` fails)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def broken_link_said(path: str) -> str:
    """ "; X is a link to Y, which does not exist" where ``path`` or a directory above it
    is a link to nothing ("does not exist: check the path" left the link to be found)."""
    from .local_files import broken_link_above

    try:
        link = broken_link_above(path)
    except OSError:
        return ""
    return (
        "" if link is None else f"; {link} is a link to {os.readlink(link)}, which does not exist"
    )
