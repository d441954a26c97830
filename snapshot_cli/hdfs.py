"""HDFS workarounds, for both of fsspec's clients (``hdfs`` through pyarrow's libhdfs,
``webhdfs`` over HTTP). HDFS shows a file while it is being written, renames do not replace,
and neither client offers what the rest of snap relies on as such; each function here says
which behaviour it works around (see ``tests/infra/hdfs.py`` for what was measured)."""

from __future__ import annotations

import contextlib
from typing import Any

from fsspec import AbstractFileSystem

from . import layout
from .errors import StorageError
from .protocols import protocol, to_url
from .retry import RETRY_ATTEMPTS, retrying

CLIENT_HINT = (
    "hdfs:// goes through pyarrow's libhdfs, which needs a Hadoop client on this machine: set "
    "JAVA_HOME, ARROW_LIBHDFS_DIR (the directory of libhdfs.so) and CLASSPATH (the output of "
    "hadoop classpath --glob), or use webhdfs://, which needs none of that"
)


def read(fs: AbstractFileSystem, path: str) -> bytes:
    """HDFS replaces a file by delete + rename (see :func:`replace`); a read racing
    that can end early or mix versions without an error, so the length read must equal the
    size the NameNode reports before and after it, else the read is repeated. Asking for
    the size first also keeps libhdfs from printing a Java stack trace for a missing file."""

    def stamp() -> tuple[Any, ...]:  # (its size first)
        info = retrying(lambda: fs.info(path), f"checking {path}")
        return int(info["size"]), info.get("mtime"), info.get("modificationTime")

    for _ in range(RETRY_ATTEMPTS):
        before = stamp()
        try:
            data = checked(fs, path, retrying(lambda: fs.cat_file(path), f"reading {path}"))
        except FileNotFoundError:
            raise
        except OSError:  # (a read racing a replace: the file deleted under it, its blocks
            if stamp() != before:  # gone, failed "check that its DataNodes are up"): the
                continue  # file there now is read (none there: FileNotFoundError)
            raise
        # fsspec's webhdfs reads as many bytes as the size it saw first: a file replaced in
        # between comes back as the new content cut to the old length. The size after the
        # read tells.
        if len(data) == before[0] == stamp()[0]:
            return data
    raise StorageError(f"{to_url(fs, path)} kept changing while it was read; try again")


def checked(fs: AbstractFileSystem, path: str, data: bytes) -> bytes:
    """fsspec's webhdfs returns a DataNode's error document as the file's bytes when the
    file vanishes between the NameNode's redirect and the read: raise it as the error."""
    if protocol(fs) in ("webhdfs", "webHDFS") and data.startswith(b'{"RemoteException"'):
        if b"FileNotFoundException" in data[:200]:
            raise FileNotFoundError(f"{to_url(fs, path)}: {data[:300].decode(errors='replace')}")
        raise OSError(f"{to_url(fs, path)}: {data[:300].decode(errors='replace')}")
    return data


def replace(fs: AbstractFileSystem, path: str, data: bytes, replace: bool = True) -> bool:
    """HDFS shows a file while it is being written, so write a temporary file and rename it.

    Neither client renames over an existing file atomically (webhdfs's RENAME refuses and
    fsspec ignores the refusal; pyarrow deletes the target first), so with ``replace`` an
    existing file is deleted first: a reader can find ``path`` missing for a moment, never
    half-written. Without ``replace``, returns False (and writes nothing) if ``path`` exists.
    """
    tmp = layout.temporary_path(path)
    retrying(lambda: fs.pipe_file(tmp, data), f"writing {tmp}")
    try:
        if retrying(lambda: fs.exists(path), f"checking {path}"):
            if not replace:
                return False
            retrying(lambda: fs.rm(path), f"deleting {path}")
        retrying(lambda: fs.mv(tmp, path), f"renaming {tmp}")
        if retrying(lambda: fs.exists(tmp), f"checking {tmp}"):
            raise StorageError(f"could not rename {to_url(fs, tmp)} to {to_url(fs, path)}")
        return True
    finally:
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.rm(tmp)


def webhdfs_create(fs: Any, path: str, data: bytes) -> bool:
    """WebHDFS CREATE with overwrite=false: the NameNode refuses a second creator (HTTP 403).

    fsspec's ``open(path, "xb")`` cannot do this (it writes nothing), so the two-step REST
    call is made here: the NameNode redirects, the DataNode creates and writes.
    """

    def put() -> bool:
        redirect = fs._call("CREATE", "PUT", path, redirect=False, overwrite="false")
        location = fs._apply_proxy(redirect.headers["Location"])
        headers = {"content-type": "application/octet-stream"}
        response = fs.session.put(location, data=data, headers=headers)
        if response.status_code == 403 and (
            "AlreadyExists" in response.text or "AlreadyBeingCreated" in response.text
        ):
            return False
        response.raise_for_status()
        return True

    return retrying(put, f"creating {path}")


def create(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Exclusive create through pyarrow's libhdfs binding, as far as it allows.

    libhdfs always creates with overwrite and pyarrow's rename replaces an existing file, so
    there is no atomic create-if-absent on ``hdfs://``: the file is written under a temporary
    name and renamed only if ``path`` does not exist. Two writers racing within the same few
    milliseconds can both succeed; use ``webhdfs://`` (atomic) for concurrent writers.
    """
    if retrying(lambda: fs.exists(path), f"checking {path}"):
        return False
    return replace(fs, path, data, replace=False)
