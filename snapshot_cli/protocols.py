"""The storage protocols snap tells apart, and how it names a path on each (pure).

Families, each handled differently by :mod:`snapshot_cli.storage`:

- local disk (``file``): rename and hard links are atomic, processes share the disk;
- object stores: no directories, a PUT is atomic; GCS and S3 also refuse a second creator
  through a precondition (exclusive create without a lock);
- HDFS (``hdfs`` through pyarrow's libhdfs, ``webhdfs`` over HTTP): files are visible while
  they are written and rename does not replace (:mod:`snapshot_cli.hdfs`);
- any other fsspec filesystem: its own exclusive-create mode and ``pipe``.
"""

from __future__ import annotations

import posixpath

from fsspec import AbstractFileSystem

LOCAL_PROTOCOLS = frozenset({"file", "local"})
OBJECT_STORES = frozenset({"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss"})
PRECONDITION_PROTOCOLS = frozenset({"gs", "gcs", "s3", "s3a"})
HDFS_PROTOCOLS = frozenset({"hdfs", "arrow_hdfs", "webhdfs", "webHDFS"})
WEBHDFS_PROTOCOLS = frozenset({"webhdfs", "webHDFS"})
# Their glob walks a directory at a time and drops a listing that fails: snap walks them
# itself, saying such a failure (:mod:`snapshot_cli.globbing`). Others are asked as they are
# (gcsfs, s3fs: one listing of a prefix, the server filtering it; memory; HTTP's own rules).
WALKED_GLOB = frozenset({"file", "local"}) | HDFS_PROTOCOLS


def protocol(fs: AbstractFileSystem) -> str:
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def is_local(fs: AbstractFileSystem) -> bool:
    """True for the local-disk filesystem (where rename is atomic and processes share a disk)."""
    return protocol(fs) in LOCAL_PROTOCOLS


def to_url(fs: AbstractFileSystem, path: str) -> str:
    """The string a user would type for ``path``: plain path locally, ``proto://...`` elsewhere.

    It resolves back to the same filesystem (worker processes rebuild theirs from it): HDFS
    paths keep the NameNode's host and port, which fsspec keeps outside the path.
    """
    if is_local(fs):
        return path
    host = fs.storage_options.get("host")
    if protocol(fs) in HDFS_PROTOCOLS and host and host != "default":
        port = fs.storage_options.get("port")
        netloc = f"{host}:{port}" if port else str(host)
        return f"{protocol(fs)}://{netloc}/{path.lstrip('/')}"
    return fs.unstrip_protocol(path)


def join(*parts: str) -> str:
    return posixpath.join(*parts)


def plain_local(url: str) -> bool:
    """Whether ``url`` is a local path as snap records one (no protocol; a ``::`` in it is a
    name's, as :func:`.storage.resolve` takes it)."""
    return "://" not in url
