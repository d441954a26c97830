"""The one module that talks to fsspec: URL → filesystem, atomic and exclusive writes, listing.

Everything else is handed a filesystem and a path from here. Filesystems are created per
process (fsspec caches instances; worker processes make their own), never shared across fork.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import hashlib
import logging
import os
import posixpath
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import fsspec
from fsspec import AbstractFileSystem

from .errors import OptionError, SnapError, StorageError
from .retry import RETRY_ATTEMPTS, is_transient, retrying, status_of

log = logging.getLogger(__name__)
T = TypeVar("T")
_GLOB_CHARS = frozenset("*?[")
# Keys that identify a file's version, most specific first (GCS, S3, local).
_VERSION_KEYS = ("crc32c", "md5Hash", "generation", "ETag", "etag", "mtime", "created")
# Keys that are a checksum of a file's contents, as the storage reports it (GCS, S3).
_CONTENT_KEYS = ("crc32c", "md5Hash", "ETag", "etag")
_HASH_CHUNK = 8 << 20


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
    except OSError as err:  # the client itself cannot start (libhdfs, a JVM, a socket)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = _HDFS_CLIENT_HINT if url.split("://", 1)[0] in _HDFS_PROTOCOLS else "check the URL"
        raise StorageError(f"cannot open {url}: {first}; {hint}") from err
    return fs, path.rstrip("/") or path


_HDFS_CLIENT_HINT = (
    "hdfs:// goes through pyarrow's libhdfs, which needs a Hadoop client on this machine: set "
    "JAVA_HOME, ARROW_LIBHDFS_DIR (the directory of libhdfs.so) and CLASSPATH (the output of "
    "hadoop classpath --glob), or use webhdfs://, which needs none of that"
)


def fresh_instance(fs: AbstractFileSystem) -> AbstractFileSystem:
    """A filesystem like ``fs`` made in this process (fsspec drops its instance cache when
    the process id changes, so this is a new client after fork)."""
    return fsspec.spec.make_instance(type(fs), fs.storage_args, fs.storage_options)


def is_local(fs: AbstractFileSystem) -> bool:
    """True for the local-disk filesystem (where rename is atomic and processes share a disk)."""
    return protocol(fs) in ("file", "local")


def to_url(fs: AbstractFileSystem, path: str) -> str:
    """The string a user would type for ``path``: plain path locally, ``proto://...`` elsewhere.

    It resolves back to the same filesystem (worker processes rebuild theirs from it): HDFS
    paths keep the NameNode's host and port, which fsspec keeps outside the path.
    """
    if is_local(fs):
        return path
    host = fs.storage_options.get("host")
    if protocol(fs) in _HDFS_PROTOCOLS and host and host != "default":
        port = fs.storage_options.get("port")
        netloc = f"{host}:{port}" if port else str(host)
        return f"{protocol(fs)}://{netloc}/{path.lstrip('/')}"
    return fs.unstrip_protocol(path)


def join(*parts: str) -> str:
    return posixpath.join(*parts)


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


def _missing_container(fs: AbstractFileSystem, path: str) -> str:
    if protocol(fs) in _OBJECT_STORES:
        bucket = path.lstrip("/").split("/", 1)[0]
        return f"the bucket {bucket!r} does not exist (create it, or check the URL)"
    return "its parent directory does not exist"


def missing_bucket_hint(fs: AbstractFileSystem, path: str) -> str:
    """``"; the bucket 'b' does not exist"`` if ``path``'s bucket is missing, else ``""``."""
    if protocol(fs) not in _OBJECT_STORES:
        return ""
    bucket = path.lstrip("/").split("/", 1)[0]
    try:
        found = retrying(lambda: fs.exists(bucket), f"checking {bucket}")
    except Exception:  # only a hint: never hide the error it decorates
        return ""
    return "" if found else f"; the bucket {bucket!r} does not exist"


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
    except FileNotFoundError as err:
        if action.startswith(("reading", "listing", "checking", "deleting")):
            raise  # callers decide what a missing file means
        raise StorageError(
            f"cannot write {to_url(fs, path)}: {_missing_container(fs, path)} ({err})"
        ) from err
    except FileExistsError:
        raise
    except OSError as err:
        if is_fault(err) and not isinstance(err, SnapError):
            raise fault(err, to_url(fs, path)) from err  # ENOSPC, EIO, EROFS, ...
        _answer_other(fs, path, action, err)
        raise
    except Exception as err:
        _answer_other(fs, path, action, err)
        raise


def _answer_other(fs: AbstractFileSystem, path: str, action: str, err: Exception) -> None:
    """Raise the StorageError an HTTP status or a transient failure calls for, if any."""
    status = status_of(err)
    if status in (401, 403):
        raise StorageError(
            f"access denied (HTTP {status}) while {action} {to_url(fs, path)}"
            f"{_permanent_hint(fs, status)} ({err})"
        ) from err
    if status == 404:
        if not action.startswith(("reading", "listing", "checking", "deleting")):
            raise StorageError(
                f"cannot write {to_url(fs, path)}: {_missing_container(fs, path)} ({err})"
            ) from err
        raise FileNotFoundError(f"{to_url(fs, path)} not found (HTTP 404): {err}") from err
    if is_transient(err):
        tries = getattr(err, "snap_tries", 1)
        raise StorageError(
            f"storage kept failing while {action} {to_url(fs, path)} (tried {tries} "
            f"time{'s' if tries > 1 else ''}): {err!r}; try again later"
        ) from err


_FAULT_HINTS = {
    errno.ENOSPC: "the disk is full: free space (or inodes) there, then run the same command "
    "again: it resumes",
    errno.EDQUOT: "the disk quota is used up: free some, then run the same command again: it "
    "resumes",
    errno.EROFS: "the filesystem is read-only: choose another OUTPUT, or remount it writable",
    errno.EACCES: "permission denied: check that you may write there, or choose another OUTPUT",
    errno.EPERM: "not permitted: check that you may write there, or choose another OUTPUT",
    errno.EIO: "the storage reported an I/O error: check the disk, then run the same command again",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.ELOOP: "the path has a loop of symbolic links",
    errno.ENAMETOOLONG: "the path is too long",
}


def is_fault(err: OSError) -> bool:
    """An OS error that is the storage's condition (full, read-only, forbidden, I/O error),
    not a statement about the file's contents."""
    return err.errno in _FAULT_HINTS


def fault(err: OSError, where: str) -> StorageError:
    """An OS error while working on ``where`` as one line: the path, the cause, what to do."""
    path = err.filename if isinstance(err.filename, str) else where
    code = errno.errorcode.get(err.errno or 0, "")
    hint = _FAULT_HINTS.get(err.errno or 0, "fix that, then run the same command again")
    cause = err.strerror or str(err) or type(err).__name__
    return StorageError(f"{path}: {cause}{f' ({code})' if code else ''}; {hint}")


_OBJECT_STORES = frozenset({"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss"})


def makedirs(fs: AbstractFileSystem, path: str) -> None:
    """Create a directory; nothing on object stores (s3fs would create a missing *bucket*:
    a mistyped bucket name must fail, not appear)."""
    if protocol(fs) in _OBJECT_STORES:
        return
    with errors_named(fs, path, "creating directory"):
        retrying(lambda: fs.makedirs(path, exist_ok=True), f"creating {path}")


def read_bytes(fs: AbstractFileSystem, path: str) -> bytes:
    """Read a whole (small) file. FileNotFoundError propagates unchanged."""
    with errors_named(fs, path, "reading"):
        if protocol(fs) in _HDFS_PROTOCOLS:
            return _read_hdfs(fs, path)
        return retrying(lambda: fs.cat_file(path), f"reading {path}")


def _read_hdfs(fs: AbstractFileSystem, path: str) -> bytes:
    """HDFS replaces a file by delete + rename (see :func:`_hdfs_replace`); a read racing
    that can end early or mix versions without an error, so the length read must equal the
    size the NameNode reports before and after it, else the read is repeated. Asking for
    the size first also keeps libhdfs from printing a Java stack trace for a missing file."""

    def size_now() -> int:
        return int(retrying(lambda: fs.info(path), f"checking {path}")["size"])

    for _ in range(RETRY_ATTEMPTS):
        size = size_now()
        data = _checked(fs, path, retrying(lambda: fs.cat_file(path), f"reading {path}"))
        # fsspec's webhdfs reads as many bytes as the size it saw first: a file replaced in
        # between comes back as the new content cut to the old length. The size after the
        # read tells.
        if len(data) == size == size_now():
            return data
    raise StorageError(f"{to_url(fs, path)} kept changing while it was read; try again")


def _checked(fs: AbstractFileSystem, path: str, data: bytes) -> bytes:
    """fsspec's webhdfs returns a DataNode's error document as the file's bytes when the
    file vanishes between the NameNode's redirect and the read: raise it as the error."""
    if protocol(fs) in ("webhdfs", "webHDFS") and data.startswith(b'{"RemoteException"'):
        if b"FileNotFoundException" in data[:200]:
            raise FileNotFoundError(f"{to_url(fs, path)}: {data[:300].decode(errors='replace')}")
        raise OSError(f"{to_url(fs, path)}: {data[:300].decode(errors='replace')}")
    return data


def read_range(fs: AbstractFileSystem, path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file, retried. (fsspec's pyarrow-backed ``hdfs`` cannot
    ``cat_file`` a range: it opens a stream that cannot seek; a seekable file can.)"""

    def read() -> bytes:
        if protocol(fs) in ("hdfs", "arrow_hdfs"):
            with fs.open(path, "rb", seekable=True) as f:
                f.seek(start)
                return bytes(f.read(end - start))
        return _checked(fs, path, bytes(fs.cat_file(path, start=start, end=end)))

    return retrying(read, f"reading {path}")


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
        elif protocol(fs) in _HDFS_PROTOCOLS:
            _hdfs_replace(fs, path, data)
        else:  # other filesystems (sftp, smb, ...) need the directory made first
            makedirs(fs, posixpath.dirname(path))
            retrying(lambda: fs.pipe_file(path, data), f"writing {path}")


_HDFS_PROTOCOLS = frozenset({"hdfs", "arrow_hdfs", "webhdfs", "webHDFS"})


def _hdfs_replace(fs: AbstractFileSystem, path: str, data: bytes, replace: bool = True) -> bool:
    """HDFS shows a file while it is being written, so write a temporary file and rename it.

    Neither client renames over an existing file atomically (webhdfs's RENAME refuses and
    fsspec ignores the refusal; pyarrow deletes the target first), so with ``replace`` an
    existing file is deleted first: a reader can find ``path`` missing for a moment, never
    half-written. Without ``replace``, returns False (and writes nothing) if ``path`` exists.
    """
    name = f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp"
    tmp = posixpath.join(posixpath.dirname(path), name)
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


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if it does not exist. Returns False if it existed.

    Locally a complete temporary file is hard-linked into place (atomic, fails if the path
    exists). On GCS and S3 one PUT with the store's precondition (``ifGenerationMatch=0``,
    ``If-None-Match: *``): the store itself refuses a second creator. Elsewhere the
    filesystem's exclusive-create mode ("xb"); a write that fails removes the partial file,
    but a process killed while writing these few bytes leaves it (readers then get a
    ManifestError, never wrong data).
    """
    with errors_named(fs, path, "creating"):
        if protocol(fs) in _PRECONDITION_PROTOCOLS:
            return _create_with_precondition(fs, path, data)
        makedirs(fs, posixpath.dirname(path))
        if is_local(fs):
            # Link a finished temporary file: a reader never sees the file half-written.
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):  # not left behind on a full disk
                    os.unlink(tmp)
            return True
        if protocol(fs) in ("webhdfs", "webHDFS"):
            return _webhdfs_create(fs, path, data)
        if protocol(fs) in _HDFS_PROTOCOLS:
            return _hdfs_create(fs, path, data)

        def put() -> bool:
            try:
                f = fs.open(path, "xb")
            except FileExistsError:  # also our own write, if a retry follows a lost answer:
                return False  # callers compare what is there with what they wrote
            try:
                with f:
                    f.write(data)
            except BaseException:  # a full disk: leave no half-written file under the name
                with contextlib.suppress(Exception):
                    fs.rm(path)
                raise
            return True

        return retrying(put, f"creating {path}")


def _webhdfs_create(fs: Any, path: str, data: bytes) -> bool:
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


def _hdfs_create(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Exclusive create through pyarrow's libhdfs binding, as far as it allows.

    libhdfs always creates with overwrite and pyarrow's rename replaces an existing file, so
    there is no atomic create-if-absent on ``hdfs://``: the file is written under a temporary
    name and renamed only if ``path`` does not exist. Two writers racing within the same few
    milliseconds can both succeed; use ``webhdfs://`` (atomic) for concurrent writers.
    """
    if retrying(lambda: fs.exists(path), f"checking {path}"):
        return False
    return _hdfs_replace(fs, path, data, replace=False)


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
    makedirs(fs, posixpath.dirname(path))
    with errors_named(fs, path, "writing"):
        return fs.open(path, "wb")


def list_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Base names of the entries directly under ``path``; empty if it does not exist."""
    with errors_named(fs, path, "listing"):
        try:
            entries = retrying(lambda: fs.ls(path, detail=False), f"listing {path}")
        except FileNotFoundError:
            return []
    return sorted(posixpath.basename(e.rstrip("/")) for e in entries)


def entry_sizes(fs: AbstractFileSystem, path: str) -> dict[str, int]:
    """Name → size of the entries directly under ``path`` (directories: their total size);
    empty if ``path`` does not exist."""
    with errors_named(fs, path, "listing"):
        try:
            entries = retrying(lambda: fs.ls(path, detail=True), f"listing {path}")
        except FileNotFoundError:
            return {}
        out = {}
        for e in entries:
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            size = int(e.get("size") or 0)
            if e.get("type") == "directory":
                try:
                    size = int(retrying(functools.partial(fs.du, e["name"]), f"sizing {e['name']}"))
                except (FileNotFoundError, OSError):
                    size = 0
            out[name] = size
    return out


def _info(fs: AbstractFileSystem, path: str) -> dict[str, Any] | None:
    """``fs.info(path)``, or None if nothing is there. Not ``fs.exists``/``fs.isdir``: they
    answer False to any error, so a failing or forbidden storage would look empty."""
    try:
        with errors_named(fs, path, "checking"):
            return retrying(lambda: fs.info(path), f"checking {path}")
    except FileNotFoundError:
        return None


def exists(fs: AbstractFileSystem, path: str) -> bool:
    return _info(fs, path) is not None


def isdir(fs: AbstractFileSystem, path: str) -> bool:
    info = _info(fs, path)
    return info is not None and info.get("type") == "directory"


def remove(fs: AbstractFileSystem, path: str, recursive: bool = False) -> None:
    """Delete ``path``; a missing path is not an error."""
    with errors_named(fs, path, "deleting"), contextlib.suppress(FileNotFoundError):
        try:
            retrying(lambda: fs.rm(path, recursive=recursive), f"deleting {path}")
        except OSError:
            if _info(fs, path) is not None:  # pyarrow's hdfs raises EIO if it is missing
                raise


def local_file_problem(root: str, path: str) -> str | None:
    """Why the local file ``path`` may not be read as part of the snapshot at ``root``, or
    None: it must be a regular file (not a directory, FIFO or device: a FIFO would block the
    reader forever) whose real path stays inside the snapshot (no symlink out of it).
    Nothing is read. FileNotFoundError propagates."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        return f"is a link to {real}, outside the snapshot"
    mode = os.stat(path).st_mode  # not opened: opening a FIFO or a device can block or act
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        return f"is {kind} (mode {stat.filemode(mode)})"
    return None


@dataclass(frozen=True)
class InputFile:
    """One input file: what the pipeline receives (``url``) and what identifies it.

    ``version`` is cheap to get (a listing: mtime, generation or checksum); ``content`` is a
    checksum of the bytes the storage reports (GCS crc32c, S3 ETag), or "" when only
    :func:`hash_file` can tell (local disk, HDFS).
    """

    url: str
    size: int
    version: str
    content: str

    def stat_identity(self) -> list[Any]:
        return [self.url, self.size, self.version]


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


def hash_file(url: str, storage_options: dict[str, Any] | None = None) -> str:
    """sha256 of a file's bytes, read in 8 MiB pieces."""
    fs, path = resolve(url, storage_options)
    digest = hashlib.sha256()
    with errors_named(fs, path, "reading"), fs.open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return f"sha256={digest.hexdigest()}"


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
            size = int(info.get("size") or 0)
            found[url] = InputFile(
                url, size, _first(info, _VERSION_KEYS), _first(info, _CONTENT_KEYS)
            )
    return [found[u] for u in sorted(found)]
