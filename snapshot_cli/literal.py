"""A path snap is given is a name, taken literally on every filesystem (used by
:mod:`snapshot_cli.storage`).

fsspec reads some characters of a path as more than a name: ``*``, ``?`` and ``[..]`` as a
glob in ``rm`` (gcsfs, s3fs and the in-memory store expand it: gc of ``gs://b/a?c`` deleted
``gs://b/abc``'s files), ``::`` as URL chaining in ``url_to_fs`` (``snaps/exp::v2`` wrote
``snaps/exp``), and a URL's ``#<digits>`` as an object generation (gcsfs: ``gs://b/h#1`` was
the object ``h``). Here a local path (no ``proto://``) is a path, ``::`` included; a URL's
path is its name; a deletion names exact files. fsspec's chaining is kept where a ``::`` is
followed by a protocol (``simplecache::gs://bucket/snap``).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

from .errors import OptionError
from .protocols import HDFS_PROTOCOLS, LOCAL_PROTOCOLS, OBJECT_STORES, protocol

# An fsspec chain: it starts with "protocol::" ("simplecache::gs://..."), or a "::" is
# followed by "protocol://" ("zip://inner::s3://bucket/a.zip"); the last such link's path is
# the chain's target.
_FIRST_LINK = re.compile(r"^[a-z][a-z0-9+.-]*::")
_LINK = re.compile(r"::[a-z][a-z0-9+.-]*://")
_LINK_NAMES = re.compile(r"(?:^|::)([a-z][a-z0-9+.-]*)(?=::|://)")  # each link's protocol
# fsspec's caches whose index is one file every open rewrites (fsspec 2026.9: a thread's
# entry lost to another's, "cannot unpack non-iterable bool object", a KeyError)
_UNSAFE_CACHES = frozenset({"filecache", "blockcache", "cached"})
_GLOB_CHARS = frozenset("*?[")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def lower_scheme(url: str) -> str:
    """``url`` with its scheme in lower case (``FILE:///data/s``: RFC 3986 takes any case,
    fsspec knows "file" only and said "Protocol not known: FILE"); anything else as it is."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme != scheme.lower() and _SCHEME.fullmatch(scheme):
        return f"{scheme.lower()}://{rest}"
    return url


# Their ``rm`` deletes the path it is given, as it is (no glob): local disk, pyarrow's
# HDFS and WebHDFS's single DELETE.
_LITERAL_RM = LOCAL_PROTOCOLS | HDFS_PROTOCOLS


def is_chained(url: str) -> bool:
    """Whether ``url`` is an fsspec chain (``simplecache::gs://bucket/snap``). A local path
    never is, and a ``::`` inside a URL's path is a name's unless a protocol follows it."""
    return "://" in url and bool(_FIRST_LINK.match(url) or _LINK.search(url))


def local_url(url: str, scheme: str, rest: str) -> str:
    """``file://HOST/PATH`` (RFC 8089), which fsspec reads as ``./HOST/PATH``: a silent
    misreading of ``file://tmp/x`` for ``/tmp/x``. A host is refused, saying how to write the
    path; ``localhost`` is this machine; ``file://v2``, ``~/s``, ``../s`` stay paths."""
    host, _, path = rest.partition("/")
    if not host or host.startswith(("~", ".")):  # (a home, ./ or ../: a path, as documented)
        return url
    if host.lower() != "localhost":
        raise OptionError(
            f"{url!r} names the host {host!r} (file://HOST/PATH): a local path takes three "
            f"slashes, file:///{rest}, or give the path itself, /{rest}"
        )
    return f"{scheme}:///{path}"


def chain_problem(url: str) -> str | None:
    """Why the chained ``url`` cannot name what it seems to (a ``::`` in its last link's
    path, which fsspec would read as one more link), or cannot be read by snap's threads
    (fsspec's ``filecache`` and ``blockcache``), or None. Pure."""
    links = list(_LINK.finditer(url))
    for name in _LINK_NAMES.findall(url):
        if name in _UNSAFE_CACHES:
            target = url[links[-1].start() + 2 :] if links else url
            return (
                f"{url!r}: fsspec's {name}:: keeps its cache's index in a file that parallel "
                "reads overwrite (reads fail at random shards: it is not safe for threads, "
                f"which snap reads with); read through simplecache::{target}, or give "
                f"{target!r} with snap's own cache (cache_dir=, snap bench --cache-dir), which "
                "many readers share safely"
            )
    if not links or "::" not in url[links[-1].end() :]:
        return None
    last = links[-1]
    target = url[last.start() + 2 :]
    return (
        f"{url!r}: fsspec reads every '::' of a chained URL as one more link of the chain, "
        f"so the path of its last link cannot hold '::'; give {target!r} without the chain "
        "(there '::' is part of the name), or a name without '::'"
    )


def open_url(url: str, options: dict[str, Any]) -> tuple[AbstractFileSystem, str]:
    """The filesystem and protocol-less path of a local path or an unchained URL, the path
    taken as it is. Options the URL itself gives (an HDFS NameNode's host and port) are
    kept, except a version-aware mode turned on by a ``#<digits>`` or ``?versionId=`` in the
    name: that is part of the name here (``storage_options`` or fsspec's configuration may
    still ask for it)."""
    scheme, sep, _ = url.partition("://")
    cls = fsspec.get_filesystem_class(scheme if sep else "file")
    from_url = {k: v for k, v in cls._get_kwargs_from_urls(url).items() if k != "version_aware"}
    fs = cls(**{**from_url, **options})
    return fs, str(cls._strip_protocol(url))


def remove(fs: AbstractFileSystem, path: str, recursive: bool) -> None:
    """Delete the file ``path`` (``recursive``: the directory and all in it) by its exact
    name; FileNotFoundError if nothing was there to delete.

    fsspec's ``rm`` expands a glob on object stores and in memory; a path without glob
    characters is not one, and goes to ``rm`` whole (one batched request for a directory's
    files). Else each file a listing finds (``find``: a listing, never a pattern) is deleted
    by ``rm_file``, then the directories, where the filesystem has them."""
    if protocol(fs) in _LITERAL_RM or not _GLOB_CHARS & set(path):
        fs.rm(path, recursive=recursive)
        return
    if not recursive:
        fs.rm_file(path)
        return
    found: dict[str, dict[str, Any]] = fs.find(path, withdirs=True, detail=True)
    if not found and not fs.exists(path):
        raise FileNotFoundError(path)
    for name, info in found.items():
        if info.get("type") != "directory":
            fs.rm_file(name)
    if protocol(fs) in OBJECT_STORES:
        return  # (no directories there: rmdir would delete the bucket)
    dirs = [name for name, info in found.items() if info.get("type") == "directory"]
    for name in sorted({*dirs, path}, key=len, reverse=True):  # the deepest first
        with contextlib.suppress(FileNotFoundError):  # (in memory: gone with its last file)
            fs.rmdir(name)


# Schemes whose "gs:/b/x" (one slash, or none) is a typo of a URL, not a local directory
# named "gs:": it was created on local disk, with exit 0 (a probe)
_REMOTE_SCHEMES = frozenset(s.lower() for s in (*OBJECT_STORES, *HDFS_PROTOCOLS, "memory"))


def meant_url(path: str) -> str | None:
    """The URL a local ``path`` was likely meant as: a part of it is a known remote scheme
    and a colon (``gs:/bucket/x``, ``./s3:bucket/x``), ``gs://bucket/x`` then; else None."""
    parts = path.split("/")
    for k, part in enumerate(parts):
        scheme, colon, after = part.partition(":")
        if colon and scheme.lower() in _REMOTE_SCHEMES:
            rest = "/".join(p for p in [after, *parts[k + 1 :]] if p)
            return f"{scheme.lower()}://{rest}" if rest else None
    return None
