"""The one module that talks to fsspec: URL → filesystem, atomic and exclusive writes, listing.

Everything else is handed a filesystem and a path from here. Filesystems are created per
process (fsspec caches instances; worker processes make their own), never shared across fork.
"""

from __future__ import annotations

import base64
import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import fsspec
from fsspec import AbstractFileSystem

from .errors import OptionError, StorageError

_GLOB_CHARS = frozenset("*?[")
# Keys that identify a file's version, most specific first (GCS, S3, local).
_VERSION_KEYS = ("crc32c", "md5Hash", "generation", "ETag", "etag", "mtime", "created")


def resolve(
    url: str, storage_options: dict[str, Any] | None = None
) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem and the protocol-less path of ``url`` (a local path or any URL)."""
    if not url:
        raise OptionError("empty path or URL")
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as err:
        raise OptionError(f"cannot open {url!r}: {err}") from err
    return fs, path.rstrip("/") or path


def is_local(fs: AbstractFileSystem) -> bool:
    """True for the local-disk filesystem (where rename is atomic and processes share a disk)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def to_url(fs: AbstractFileSystem, path: str) -> str:
    """The string a user would type for ``path``: plain path locally, ``proto://...`` elsewhere."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def join(*parts: str) -> str:
    return posixpath.join(*parts)


@contextlib.contextmanager
def errors_named(fs: AbstractFileSystem, path: str, action: str) -> Iterator[None]:
    """Turn storage refusals into a StorageError naming the path and what was being done."""
    try:
        yield
    except PermissionError as err:
        hint = (
            "check that you may read it (file permissions or storage credentials)"
            if action.startswith(("reading", "listing"))
            else "check that you may write there, or choose another OUTPUT"
        )
        raise StorageError(
            f"permission denied while {action} {to_url(fs, path)}: {hint} ({err})"
        ) from err
    except (NotADirectoryError, IsADirectoryError) as err:
        raise StorageError(f"cannot {action.split()[0]} {to_url(fs, path)}: {err}") from err


def makedirs(fs: AbstractFileSystem, path: str) -> None:
    with errors_named(fs, path, "creating directory"):
        fs.makedirs(path, exist_ok=True)


def read_bytes(fs: AbstractFileSystem, path: str) -> bytes:
    """Read a whole (small) file. FileNotFoundError propagates unchanged."""
    with errors_named(fs, path, "reading"):
        return fs.cat_file(path)


def stored_checksum(fs: AbstractFileSystem, path: str) -> tuple[int, str | None]:
    """A file's size and the crc32c its storage reports (GCS does, as base64 big-endian), as
    8 hex digits, or None where the storage keeps no crc32c. Reads metadata only."""
    with errors_named(fs, path, "reading"):
        info = fs.info(path)
    crc = info.get("crc32c")
    digest = None
    if isinstance(crc, str):
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(crc, validate=True)
            digest = raw.hex() if len(raw) == 4 else None
    return int(info.get("size") or 0), digest


def write_atomic(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``data`` so that readers see either the old file or the new one, never a part.

    Locally: a temporary file in the same directory, fsync, then ``os.replace``. On object
    stores a single PUT is atomic already.
    """
    with errors_named(fs, path, "writing"):
        if is_local(fs):
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        else:
            fs.pipe_file(path, data)


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if it does not exist. Returns False if it existed.

    Locally a complete temporary file is hard-linked into place (atomic, fails if the path
    exists); elsewhere the filesystem's exclusive-create mode ("xb") is used.
    """
    with errors_named(fs, path, "creating"):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        if is_local(fs):
            # Link a finished temporary file: a reader never sees the file half-written.
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        try:
            with fs.open(path, "xb") as f:
                f.write(data)
        except FileExistsError:
            return False
    return True


def open_write(fs: AbstractFileSystem, path: str) -> BinaryIO:
    """Open ``path`` for a streamed write (shards); the parent directory is created."""
    with errors_named(fs, path, "writing"):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        return fs.open(path, "wb")


def list_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Base names of the entries directly under ``path``; empty if it does not exist."""
    with errors_named(fs, path, "listing"):
        try:
            entries = fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
    return sorted(posixpath.basename(e.rstrip("/")) for e in entries)


def exists(fs: AbstractFileSystem, path: str) -> bool:
    with errors_named(fs, path, "checking"):
        return fs.exists(path)


def isdir(fs: AbstractFileSystem, path: str) -> bool:
    with errors_named(fs, path, "checking"):
        return fs.isdir(path)


def remove(fs: AbstractFileSystem, path: str, recursive: bool = False) -> None:
    """Delete ``path``; a missing path is not an error."""
    with errors_named(fs, path, "deleting"), contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=recursive)


@dataclass(frozen=True)
class InputFile:
    """One input file: what the pipeline receives (``url``) and what identifies its contents."""

    url: str
    size: int
    version: str

    def identity(self) -> list[Any]:
        return [self.url, self.size, self.version]


def _version(info: dict[str, Any]) -> str:
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


def expand_inputs(
    patterns: list[str], storage_options: dict[str, Any] | None = None
) -> list[InputFile]:
    """Expand ``--input`` globs and URLs into a sorted, de-duplicated list of files.

    Raises:
        OptionError: a pattern matched nothing, or names a directory.
    """
    found: dict[str, InputFile] = {}
    for pattern in patterns:
        fs, path = resolve(pattern, storage_options)
        with errors_named(fs, path, "listing"):
            if _GLOB_CHARS & set(path):
                infos = fs.glob(path, detail=True)
            else:
                try:
                    infos = {path: fs.info(path)}
                except FileNotFoundError:
                    infos = {}
        files = {p: i for p, i in infos.items() if i.get("type") != "directory"}
        if not files:
            if infos:
                raise OptionError(
                    f"--input {pattern!r} is a directory; pass a glob such as "
                    f"'{pattern.rstrip('/')}/*' to use the files in it"
                )
            raise OptionError(f"--input {pattern!r} matched no files")
        for p, info in files.items():
            url = os.path.abspath(p) if is_local(fs) else fs.unstrip_protocol(p)
            found[url] = InputFile(url, int(info.get("size") or 0), _version(info))
    return [found[u] for u in sorted(found)]
