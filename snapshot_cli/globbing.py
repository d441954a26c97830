"""A glob that lists every directory it walks, or fails naming the one it could not (used by
:mod:`snapshot_cli.storage`).

fsspec's ``glob`` walks directories with ``walk(on_error="omit")``: a directory below the
pattern's first wildcard that cannot be listed (EACCES, EIO, ESTALE, an S3 prefix a bucket
policy forbids) was left out without a word, and its files with it: ``--input 'data/**'``
made a snapshot of half the records, and a teammate's run of the same create committed it as
a new version. fsspec's ``on_error`` cannot say otherwise: ``walk`` passes it to no directory
below the first. Here the walk is fsspec's own with every listing's failure raised, but a
directory gone (ENOENT, ENOTDIR: deleted between its parent's listing and its own, as if
listed a moment later). It calls only ``ls``, ``info``, ``isdir``, ``isfile`` and ``exists``,
which every filesystem has, with no options of fsspec's. It walks local disk and HDFS
(:data:`.protocols.WALKED_GLOB`); other filesystems are asked as they are: gcsfs and s3fs
list a prefix in one request the server filters (a walk of ``train-*`` in a prefix of a
million objects would take a thousand), and their listing fails whole. A local
``lost+found`` (mkfs's, at a volume's root, root's alone) is no dataset's and is left out
as before: ``--input '/mnt/vol/**'`` would fail on every ext4 volume otherwise.
"""

from __future__ import annotations

import functools
import glob as python_glob
import itertools
import os
from collections.abc import Callable
from typing import Any

from fsspec import AbstractFileSystem

from .errors import OptionError, StorageError
from .faults import errors_named, fault
from .protocols import WALKED_GLOB, is_local, protocol, to_url

Retrying = Callable[[Callable[[], Any], str], Any]


_GLOB_CHARS = frozenset("*?[")


def matching(fs: AbstractFileSystem, path: str, retrying: Retrying) -> dict[str, dict[str, Any]]:
    """``fs.info`` of each file or directory ``path`` names now (every kept listing dropped
    first): a glob's matches, or the one at ``path``: where a file is named so exactly
    (``f[1].txt`` beside ``f1.txt``: its glob matched only ``f1.txt``, and a list of the
    files of a directory lost one), or where the glob matches nothing (as a shell passes an
    unmatched pattern on as it is).

    Raises:
        OptionError: "is not a glob: ..." (for its caller to say of what): ``a/**.txt``.
    """
    infos: dict[str, dict[str, Any]] = {}
    fs.invalidate_cache()
    with errors_named(fs, path, "listing"):
        if _GLOB_CHARS & set(path) and not _named(fs, path, retrying):
            pattern = path.replace("[^", "[!")  # (negation, as bash, zsh and regexes say it)
            try:
                infos = glob(fs, pattern, retrying)  # (none left out unsaid)
            except FileNotFoundError:  # (gcsfs, for a bucket that does not exist)
                infos = {}
            except ValueError as err:  # (fsspec's "'**' can only be an entire path component")
                raise OptionError(
                    f"is not a glob: {err} (a/**/*.txt for every .txt below a)"
                ) from err
            infos = {p: i for p, i in infos.items()
                     if not _hidden_unasked(pattern, p) and not _marker(p)}  # fmt: skip
        if not infos:
            try:
                infos = {path: retrying(functools.partial(fs.info, path), "reading")}
            except NotADirectoryError:  # (a glob through a file, a.txt/*, matches none)
                if not _GLOB_CHARS & set(path):
                    raise
            except FileNotFoundError:
                if is_local(fs) and os.path.islink(path):  # a broken link: said as such
                    infos = {path: {"type": "other", "islink": True,
                                    "destination": os.readlink(path)}}  # fmt: skip
    return infos


def _marker(path: str) -> bool:
    """Whether ``path`` is an object store's folder marker: an empty object named ``dir/``
    (S3's console's "Create folder", many tools), which s3fs lists as a file beside ``dir``:
    ``--input 's3://b/d/**'`` gave each to the pipeline as an input. No file's name ends in
    ``/`` anywhere else."""
    return path.endswith("/")


def _hidden_unasked(pattern: str, path: str) -> bool:
    """Whether ``path`` (a match of ``pattern``) is a hidden file, or below a hidden
    directory, that the pattern does not name with its leading dot: the shell's and Python's
    globs leave such out (``*`` and ``**`` do not match a leading ``.``), fsspec's took macOS's
    ``._a.jpg``, ``.ipynb_checkpoints/`` and ``.git/`` in. Pure."""
    parts, names = pattern.strip("/").split("/"), path.strip("/").split("/")
    first = next((i for i, p in enumerate(parts) if _GLOB_CHARS & set(p)), len(parts))
    parts, names = parts[first:], names[first:]
    if parts.count("**") > 1:  # (where each went is not known here: the dots named decide)
        return any(n.startswith(".") for n in names) and not any(p[:1] == "." for p in parts)
    if "**" in parts:
        k, tail = parts.index("**"), len(parts) - parts.index("**") - 1
        if any(n.startswith(".") for n in names[k : len(names) - tail]):
            return True  # (** went through a hidden name)
        parts, names = parts[:k] + parts[k + 1 :], names[:k] + names[len(names) - tail :]
    return any(
        n.startswith(".") and not p.startswith(".") for p, n in zip(parts, names, strict=False)
    )


def _named(fs: AbstractFileSystem, path: str, retrying: Retrying) -> bool:
    """Whether a file (not a directory) is named ``path`` exactly."""
    if is_local(fs):
        return os.path.isfile(path) or (os.path.islink(path) and not os.path.exists(path))
    try:
        return bool(retrying(lambda: fs.isfile(path), f"checking {path}"))
    except FileNotFoundError:
        return False


def glob(fs: AbstractFileSystem, path: str, retrying: Retrying) -> dict[str, dict[str, Any]]:
    """``fs.glob(path, detail=True)``, each listing made by ``retrying`` (storage's retries:
    each directory's on its own, so a failure names the one that failed).

    Raises:
        StorageError: a directory the pattern reaches could not be listed: named, with why.
    """
    if protocol(fs) not in WALKED_GLOB:
        return dict(retrying(lambda: fs.glob(path, detail=True), "listing"))
    strict = _Strict(fs, retrying, path)
    return dict(AbstractFileSystem.glob(strict, path, detail=True))


class _Strict:
    """``fs`` as fsspec's glob sees it: its own methods, but ``find`` and ``walk`` fsspec's
    generic ones (a listing per directory), whose failures are raised (:meth:`failed`)."""

    def __init__(self, fs: AbstractFileSystem, retrying: Retrying, pattern: str) -> None:
        self._fs, self._retrying, self._pattern = fs, retrying, pattern

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def ls(self, path: str, detail: bool = False, **kwargs: Any) -> Any:
        listing = self._retrying(
            lambda: self._fs.ls(path, detail=detail, **kwargs), f"listing {path}"
        )
        if detail and is_local(self._fs):
            listing = [_followed(info) for info in listing]
        return listing

    def info(self, path: str, **kwargs: Any) -> Any:
        return self._retrying(lambda: self._fs.info(path, **kwargs), f"checking {path}")

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
             detail: bool = False, **kwargs: Any) -> Any:  # fmt: skip
        generic = AbstractFileSystem.find
        return generic(self, path, maxdepth, withdirs, detail, **kwargs)

    def walk(self, path: str, maxdepth: int | None = None, topdown: bool = True,
             on_error: Any = "omit", **kwargs: Any) -> Any:  # fmt: skip
        """fsspec's walk, with :meth:`failed` for every directory (fsspec's recursion calls
        this again for each directory below, where its own ``on_error`` would be lost)."""
        return AbstractFileSystem.walk(
            self,
            path,
            maxdepth,
            topdown,
            on_error=lambda err: self.failed(path, err),
            **kwargs,
        )

    def failed(self, path: str, err: OSError) -> None:
        """A listing of ``path`` failed: nothing if it is gone (or not a directory), else a
        StorageError naming it and why."""
        if isinstance(err, (FileNotFoundError, NotADirectoryError)):
            return
        if isinstance(err, PermissionError) and path.rstrip("/").endswith("/lost+found"):
            return  # (mkfs's: no dataset's files)
        try:
            with errors_named(self._fs, path, "listing"):
                raise err
        except StorageError as named:
            said = str(named)
        except OSError:  # (what errors_named leaves to its callers: EEXIST...)
            said = str(fault(err, to_url(self._fs, path), reading=True))
        raise StorageError(
            f"{said}; the glob {to_url(self._fs, self._pattern)} reaches it, and its files "
            "would be left out: let this user list it, or narrow the pattern"
        ) from err


def _followed(info: dict[str, Any]) -> dict[str, Any]:
    """A local listing's entry with a link to a directory made that directory, as the
    shell's and Python's globs follow it: fsspec lists it as ``other``, which the walk
    takes for a file, so ``data/*/*.jpg`` left out every file of ``data/cats -> /mnt/cats``
    without a word. A link to a directory above it (a loop) stays a link: followed, ``**``
    would never end, nor through two links to each other's directories (``a/b -> b``,
    ``b/a -> a``): a link is followed only where its target holds none of the directories
    on its own path, as they are on disk."""
    if not info.get("islink") or info.get("type") == "directory":
        return info
    name = str(info["name"]).rstrip("/")
    target = os.path.realpath(name)
    if not os.path.isdir(target):
        return info  # (a file, or broken: the inputs' own checks name it)
    above = os.path.dirname(name)
    while True:
        if os.path.commonpath([os.path.realpath(above), target]) == target:
            return info  # (a loop: its target holds the link)
        if os.path.dirname(above) == above:
            return {**info, "type": "directory"}
        above = os.path.dirname(above)


def loop_hint(fs: AbstractFileSystem, pattern: str) -> str:
    """For a local ``pattern`` (no ``**``) that matched no file: the files it matches only
    through a loop of links, which the walk does not follow (:func:`_followed`), said; else
    "". ``loop/*/*/*/*.txt`` said "matched no files", though the shell listed one (a probe)."""
    if not is_local(fs) or "**" in pattern:  # (** through a loop: Python's glob never ends)
        return ""
    found = [p for p in itertools.islice(python_glob.iglob(pattern), 100) if os.path.isfile(p)]
    if not found:
        return ""
    return (
        f" (the shell's glob matches {found[0]}{' and more' * (len(found) > 1)}, through a "
        "link to a directory that holds the link, a loop, which snap does not follow: name "
        "the files by a path without it)"
    )
