"""The one module that talks to fsspec: URL → filesystem, atomic and exclusive writes, listing.

Everything else is handed a filesystem and a path from here. Filesystems are created per
process (fsspec caches instances; worker processes make their own), never shared across fork.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import logging
import os
import posixpath
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import fsspec
from fsspec import AbstractFileSystem

from .errors import OptionError, StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")
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
    return protocol(fs) in ("file", "local")


def to_url(fs: AbstractFileSystem, path: str) -> str:
    """The string a user would type for ``path``: plain path locally, ``proto://...`` elsewhere."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def join(*parts: str) -> str:
    return posixpath.join(*parts)


# --- retries ------------------------------------------------------------------------------

RETRY_ATTEMPTS = 6  # first try + 5 retries
RETRY_BASE_S = 0.25  # backoff: base * 2**attempt, full jitter, capped
RETRY_CAP_S = 8.0
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_ERRNO = frozenset(
    {errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE, errno.EAGAIN}
)
_TRANSIENT_NAMES = ("ClientConnectorError", "ServerDisconnectedError", "ClientPayloadError")
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
              NotADirectoryError)  # fmt: skip


def status_of(err: BaseException) -> int | None:
    """The HTTP status an fsspec backend attached to an error (gcsfs ``code``, botocore)."""
    for attr in ("code", "status", "status_code"):
        value = getattr(err, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(err, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code if isinstance(code, int) else None
    return None


def is_transient(err: BaseException) -> bool:
    """Worth retrying: throttling, server errors, dropped connections, timeouts."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:  # look through wrapped causes
        seen.add(id(current))
        if isinstance(current, _PERMANENT):
            return False
        status = status_of(current)
        if status is not None:
            return status in TRANSIENT_STATUS
        if isinstance(current, ConnectionError | TimeoutError | asyncio.TimeoutError):
            return True
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNO:
            return True
        if type(current).__name__ in _TRANSIENT_NAMES:
            return True
        current = current.__cause__ or current.__context__
    return False


def retrying(fn: Callable[[], T], what: str = "", attempts: int | None = None) -> T:
    """Call ``fn``; retry transient failures with exponential backoff and full jitter.

    Bounded: after ``RETRY_ATTEMPTS`` tries (about 15 s of waiting in all) the last error
    propagates. Permanent failures (missing, forbidden, exists) propagate at once.
    """
    tries = attempts or RETRY_ATTEMPTS
    for attempt in range(tries):
        try:
            return fn()
        except Exception as err:
            if attempt + 1 >= tries or not is_transient(err):
                raise
            delay = random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt))
            log.info("transient storage error%s (%r); retry %d in %.2f s",
                     f" while {what}" if what else "", err, attempt + 1, delay)  # fmt: skip
            time.sleep(delay)
    raise AssertionError("unreachable")


def _permanent_hint(fs: AbstractFileSystem, status: int | None) -> str:
    if status in (401, 403) or status is None:
        creds = {
            "gs": "GOOGLE_APPLICATION_CREDENTIALS or gcloud auth application-default login",
            "gcs": "GOOGLE_APPLICATION_CREDENTIALS or gcloud auth application-default login",
            "s3": "AWS_PROFILE / AWS_ACCESS_KEY_ID, or the instance role",
            "s3a": "AWS_PROFILE / AWS_ACCESS_KEY_ID, or the instance role",
        }.get(protocol(fs))
        return f"; check the credentials ({creds})" if creds else ""
    return ""


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
        raise StorageError(f"failed while {action} {to_url(fs, path)}: {err}") from err
    except (FileNotFoundError, FileExistsError):
        raise
    except Exception as err:
        status = status_of(err)
        if status in (401, 403):
            raise StorageError(
                f"access denied (HTTP {status}) while {action} {to_url(fs, path)}"
                f"{_permanent_hint(fs, status)} ({err})"
            ) from err
        if status == 404:
            raise FileNotFoundError(f"{to_url(fs, path)} not found (HTTP 404): {err}") from err
        if is_transient(err):
            raise StorageError(
                f"storage kept failing while {action} {to_url(fs, path)} after "
                f"{RETRY_ATTEMPTS} tries: {err!r}; try again later"
            ) from err
        raise


def makedirs(fs: AbstractFileSystem, path: str) -> None:
    with errors_named(fs, path, "creating directory"):
        retrying(lambda: fs.makedirs(path, exist_ok=True), f"creating {path}")


def read_bytes(fs: AbstractFileSystem, path: str) -> bytes:
    """Read a whole (small) file. FileNotFoundError propagates unchanged."""
    with errors_named(fs, path, "reading"):
        return retrying(lambda: fs.cat_file(path), f"reading {path}")


def stored_checksum(fs: AbstractFileSystem, path: str) -> tuple[int, str | None]:
    """A file's size and the crc32c its storage reports (GCS does, as base64 big-endian), as
    8 hex digits, or None where the storage keeps no crc32c. Reads metadata only."""
    with errors_named(fs, path, "reading"):
        info = retrying(lambda: fs.info(path), f"reading {path}")
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
            retrying(lambda: fs.pipe_file(path, data), f"writing {path}")


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if it does not exist. Returns False if it existed.

    Locally a complete temporary file is hard-linked into place (atomic, fails if the path
    exists). On GCS and S3 one PUT with the store's precondition (``ifGenerationMatch=0``,
    ``If-None-Match: *``): the store itself refuses a second creator. Elsewhere the
    filesystem's exclusive-create mode ("xb").
    """
    with errors_named(fs, path, "creating"):
        if protocol(fs) in _PRECONDITION_PROTOCOLS:
            return _create_with_precondition(fs, path, data)
        retrying(lambda: fs.makedirs(posixpath.dirname(path), exist_ok=True), "creating")
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


_PRECONDITION_PROTOCOLS = frozenset({"gs", "gcs", "s3", "s3a"})


def _create_with_precondition(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    def put() -> bool:
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        except Exception as err:
            if status_of(err) == 412 or "precondition" in str(err).lower():
                return False
            raise
        return True

    # A retried PUT whose first attempt did land fails its own precondition: callers that
    # must know re-read the object to see whose it is (see writers/commit.py).
    return retrying(put, f"creating {path}")


def protocol(fs: AbstractFileSystem) -> str:
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def open_write(fs: AbstractFileSystem, path: str) -> BinaryIO:
    """Open ``path`` for a streamed write (shards); the parent directory is created."""
    with errors_named(fs, path, "writing"):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        return fs.open(path, "wb")


def list_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Base names of the entries directly under ``path``; empty if it does not exist."""
    with errors_named(fs, path, "listing"):
        try:
            entries = retrying(lambda: fs.ls(path, detail=False), f"listing {path}")
        except FileNotFoundError:
            return []
    return sorted(posixpath.basename(e.rstrip("/")) for e in entries)


def exists(fs: AbstractFileSystem, path: str) -> bool:
    with errors_named(fs, path, "checking"):
        return retrying(lambda: fs.exists(path), f"checking {path}")


def isdir(fs: AbstractFileSystem, path: str) -> bool:
    with errors_named(fs, path, "checking"):
        return retrying(lambda: fs.isdir(path), f"checking {path}")


def remove(fs: AbstractFileSystem, path: str, recursive: bool = False) -> None:
    """Delete ``path``; a missing path is not an error."""
    with errors_named(fs, path, "deleting"), contextlib.suppress(FileNotFoundError):
        retrying(lambda: fs.rm(path, recursive=recursive), f"deleting {path}")


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
                infos = retrying(functools.partial(fs.glob, path, detail=True), "listing")
            else:
                try:
                    infos = {path: retrying(functools.partial(fs.info, path), "reading")}
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
