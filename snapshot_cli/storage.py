"""The one module that talks to fsspec: URL → filesystem, atomic and exclusive writes, listing.

Everything else is handed a filesystem and a path from here. Filesystems are created per
process (fsspec caches instances; worker processes make their own), never shared across fork.
Which protocol gets which treatment is declared in :mod:`snapshot_cli.protocols`; failures
become answers in :mod:`snapshot_cli.faults`; HDFS's quirks live in :mod:`snapshot_cli.hdfs`;
a local call a signal interrupted (EINTR) is made again (:mod:`snapshot_cli.interrupted`):
every call here goes through :func:`retrying`, which does both.
The names re-exported from those (``to_url``, ``fault``, ...) are part of this door.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import os
import posixpath
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

import fsspec
from fsspec import AbstractFileSystem

from . import (
    credentials,
    durable,
    globbing,
    hdfs,
    hdfs_client,
    interrupted,
    literal,
    os_paths,
    retry,
    timeouts,
)
from .errors import ManifestError, OptionError, StorageError
from .faults import errors_named as errors_named
from .faults import fault as fault
from .faults import is_fault as is_fault
from .faults import missing_bucket_hint as missing_bucket_hint
from .faults import out_of_memory as out_of_memory
from .layout import MANIFEST_NAME
from .local_files import LINKED_OUT, broken_link_above
from .local_files import local_file_problem as local_file_problem
from .manifest import repair_advice
from .os_paths import cwd_gone
from .protocols import HDFS_PROTOCOLS, OBJECT_STORES, PRECONDITION_PROTOCOLS, WEBHDFS_PROTOCOLS
from .protocols import is_local as is_local
from .protocols import join as join
from .protocols import plain_local as plain_local
from .protocols import protocol as protocol
from .protocols import to_url as to_url
from .retry import status_of

log = logging.getLogger(__name__)
T = TypeVar("T")


def retrying(fn: Callable[[], T], what: str = "") -> T:
    """:func:`.retry.retrying` (transient failures, with backoff) of ``fn``, made again at
    once where a signal interrupted it (EINTR: only calls that may be repeated are given)."""
    return retry.retrying(lambda: interrupted.again(fn), what)


def resolve(
    url: str, storage_options: dict[str, Any] | None = None
) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem and the protocol-less path of ``url`` (a local path or any URL),
    its name taken literally (:mod:`snapshot_cli.literal`): ``::`` in a path is part of the
    name, as is a ``#``; fsspec's chaining (``simplecache::gs://...``) is kept."""
    if not url:
        raise OptionError("empty path or URL: give a local path or a URL such as gs://bucket/dir")
    scheme, sep, rest = (url := literal.lower_scheme(url)).partition("://")
    if sep and scheme in OBJECT_STORES and not rest.strip("/"):  # before a client is made
        # (no "://": a local directory named "s3" or "gs" is a path)
        raise OptionError(f"{url!r} names no bucket: give one, as in {scheme}://bucket/path")
    bucket, _, key = rest.partition("/")
    if sep and scheme in OBJECT_STORES and key.startswith("/"):
        raise OptionError(  # (a create there failed as if its lease were deleted, then waited
            # on it for good: listings drop the empty name that reads and writes keep)
            f"{url!r} has an empty name after its bucket ({bucket}//): the storage's clients "
            "list such objects without it and read them with it, so snap would not find them "
            f"whole; give {scheme}://{bucket}/{key.lstrip('/')}"
        )
    if sep and scheme in ("file", "local") and "/" in rest.lstrip("/") and "::" not in url:
        url = literal.local_url(url, scheme, rest)
    chained = literal.is_chained(url)
    if chained and (problem := literal.chain_problem(url)):
        raise OptionError(problem)
    hdfs_client.refuse_after_fork(url)  # (a libhdfs client made after fork hangs)
    try:
        options = {**timeouts.client_options(scheme, storage_options or {}),
                   **hdfs_client.client_options(url, storage_options or {}),
                   **(storage_options or {})}  # fmt: skip
        with credentials.said(url, scheme, storage_options or {}):  # (a key file it can't load)
            if chained:
                fs, path = fsspec.core.url_to_fs(url, **options)
            else:
                fs, path = literal.open_url(url, options)
        hdfs_client.prepared(timeouts.bound(fs))
    except OptionError:
        raise  # (said already: credentials)
    except (ImportError, ValueError) as err:
        if isinstance(err, ImportError) and str(err) in ("", "None") and err.__cause__:
            # fsspec's ImportError(None) over an installed module that failed to import (out
            # of memory, of open files): the cause is the answer, not the URL
            raise StorageError(f"cannot open {url}: a module it needs failed to import "
                               f"({retry.said(err.__cause__)})") from err  # fmt: skip
        raise OptionError(f"cannot open {url!r}: {err}") from err
    except OSError as err:  # the client itself cannot start (libhdfs, a JVM, a socket)
        if (gone := cwd_gone(url)) is not None:
            raise StorageError(f"cannot open {url}: {gone}") from err
        first = retry.redacted((str(err).strip().splitlines() or [type(err).__name__])[0])
        hint = hdfs.CLIENT_HINT if url.split("://", 1)[0] in HDFS_PROTOCOLS else "check the URL"
        raise StorageError(f"cannot open {url}: {first}; {hint}") from err
    if is_local(fs):  # "link/../snap" as the OS has it; "file:v2", "~nouser/s": os_paths
        return fs, os_paths.local_path(path, url)
    return fs, path.rstrip("/") or path


def in_this_process(fs: AbstractFileSystem, pid: int) -> tuple[AbstractFileSystem, int]:
    """``(fs, pid)`` as given if ``pid`` is this process's; else, in a forked child, a client
    made here and this pid: an async client's event loop and connections are the parent's
    (gcsfs: "This class is not fork-safe"; others hang)."""
    if pid == os.getpid():
        return fs, pid
    return fresh_instance(fs), os.getpid()


def fresh_instance(fs: AbstractFileSystem) -> AbstractFileSystem:
    """A filesystem like ``fs`` made in this process (fsspec drops its instance cache when
    the process id changes, so this is a new client after fork); never libhdfs's after a
    fork from a process that had started its JVM (:func:`.hdfs_client.refuse_after_fork`)."""
    if protocol(fs) in hdfs_client.LIBHDFS_PROTOCOLS:
        hdfs_client.refuse_after_fork(to_url(fs, "/"))
    made = fsspec.spec.make_instance(type(fs), fs.storage_args, fs.storage_options)
    return hdfs_client.prepared(timeouts.bound(made))


def makedirs(fs: AbstractFileSystem, path: str) -> None:
    """Create a directory; nothing on object stores (s3fs would create a missing *bucket*:
    a mistyped bucket name must fail, not appear)."""
    if protocol(fs) in OBJECT_STORES:
        return
    with errors_named(fs, path, "creating directory"):
        try:  # (locally: the cause, where mkdir's EEXIST is followed by a failing look)
            make = functools.partial(interrupted.makedirs, path) if is_local(fs) else None
            retrying(make or (lambda: fs.makedirs(path, exist_ok=True)), f"creating {path}")
        except (FileExistsError, FileNotFoundError):  # a link to nothing: said as such
            link = broken_link_above(path) if is_local(fs) else None
            if link is None:
                raise
            raise StorageError(
                f"cannot create {path}: {link} is a broken link (to {os.readlink(link)}, which "
                "does not exist); create what it points to, or remove the link"
            ) from None


def uncached(fs: AbstractFileSystem, path: str) -> None:
    """Forget the listings this process's client keeps of ``path`` and above it: gcsfs and
    s3fs answer ``info`` from them until told (files another process changed looked old)."""
    if getattr(fs, "dircache", None):  # (none kept: no call, to race no other thread's look)
        fs.invalidate_cache(path)


def read_bytes(fs: AbstractFileSystem, path: str) -> bytes:
    """A whole (small) file, locally by plain reads (:func:`.interrupted.read_file`); its
    FileNotFoundError said only after a look past a listing kept of its directory."""
    with errors_named(fs, path, "reading"):
        if protocol(fs) in HDFS_PROTOCOLS:
            return hdfs.read(fs, path)
        if is_local(fs):
            return retrying(functools.partial(interrupted.read_file, path), f"reading {path}")
        try:
            return retrying(lambda: fs.cat_file(path), f"reading {path}")
        except FileNotFoundError:  # (s3fs sizes a read by a kept listing; gcsfs never does)
            if posixpath.dirname(path) not in getattr(fs, "dircache", ()):
                raise
            uncached(fs, path)
        return retrying(lambda: fs.cat_file(path), f"reading {path}")


def read_own(fs: AbstractFileSystem, root: str, path: str) -> bytes:
    """Read one of the snapshot at ``root``'s own small files (a manifest, a version's, a
    run's or lease's JSON): on local disk only a regular file inside the snapshot (a FIFO
    there hung ``inspect`` and ``gc`` for good; a link out of it was read). Nothing else is
    opened. FileNotFoundError propagates; the rest is a ManifestError naming the file."""
    if is_local(fs) and (problem := interrupted.again(lambda: local_file_problem(root, path))):
        manifest = posixpath.basename(path) == MANIFEST_NAME or "/_versions/" in path
        advice = f": {repair_advice(path)}" if manifest else ""
        if problem.startswith(LINKED_OUT):  # (it says what to do: copy what it points to)
            advice = ""
        raise ManifestError(f"{to_url(fs, path)} {problem}; it is not read{advice}")
    return read_bytes(fs, path)


def read_range(fs: AbstractFileSystem, path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file, retried. (fsspec's pyarrow-backed ``hdfs`` cannot
    ``cat_file`` a range: it opens a stream that cannot seek; a seekable file can.)"""

    def read() -> bytes:
        if protocol(fs) in ("hdfs", "arrow_hdfs"):
            with fs.open(path, "rb", seekable=True) as f:
                f.seek(start)
                return bytes(f.read(end - start))
        return hdfs.checked(fs, path, bytes(fs.cat_file(path, start=start, end=end)))

    return retrying(read, f"reading {path}")


def stored_checksum(fs: AbstractFileSystem, path: str) -> tuple[int, str | None]:
    """A file's size and the crc32c its storage reports (GCS does, as base64 big-endian), as
    8 hex digits, or None where the storage keeps no crc32c. Reads metadata only, as the
    storage holds it now (:func:`uncached`)."""
    uncached(fs, path)
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

    Locally: a temporary file in the same directory, fsync, then a rename over the file
    (:func:`.durable.replace_file`). On object stores a single PUT is atomic already.
    """
    with errors_named(fs, path, "writing"):
        if is_local(fs):
            durable.replace_file(path, data)
        elif protocol(fs) in HDFS_PROTOCOLS:
            hdfs.replace(fs, path, data)
        else:  # other filesystems (sftp, smb, ...) need the directory made first
            makedirs(fs, posixpath.dirname(path))
            retrying(lambda: fs.pipe_file(path, data), f"writing {path}")


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if it does not exist. Returns False if it existed.

    Locally a complete temporary file is hard-linked into place (atomic, fails if the path
    exists); where the filesystem has no hard links (FAT, exFAT, SMB, many FUSE mounts) it
    is renamed into place unless the name exists, or else created exclusively and written in
    place (:func:`.durable.create_without_link`). On GCS and S3 one PUT with the store's
    precondition (``ifGenerationMatch=0``, ``If-None-Match: *``): the store itself refuses
    a second creator. Elsewhere the filesystem's exclusive-create mode ("xb"). Written in
    place, a write that fails removes the partial file, but a process killed while writing
    these few bytes leaves it (readers then get a ManifestError, never wrong data).
    """
    with errors_named(fs, path, "creating"):
        if protocol(fs) in PRECONDITION_PROTOCOLS:
            return _create_with_precondition(fs, path, data)
        makedirs(fs, posixpath.dirname(path))
        if is_local(fs):  # (a finished temporary file linked: never seen half-written)
            return durable.create_file(path, data)
        if protocol(fs) in WEBHDFS_PROTOCOLS:
            return hdfs.webhdfs_create(fs, path, data)
        if protocol(fs) in HDFS_PROTOCOLS:
            return hdfs.create(fs, path, data)

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
                    fs.rm_file(path)
                raise
            return True

        return retrying(put, f"creating {path}")


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


def open_write(fs: AbstractFileSystem, path: str) -> BinaryIO:
    """Open ``path`` for a streamed write (shards); the parent directory is created."""
    makedirs(fs, posixpath.dirname(path))
    with errors_named(fs, path, "writing"):
        return fs.open(path, "wb")


def list_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Base names of the entries directly under ``path`` now (:func:`uncached`); [] if none."""
    uncached(fs, path)
    with errors_named(fs, path, "listing"):
        try:
            entries = retrying(lambda: fs.ls(path, detail=False), f"listing {path}")
        except FileNotFoundError:
            return []
    own = path.rstrip("/")  # (an object store's folder marker, "dir/", lists as in itself)
    return sorted({posixpath.basename(e.rstrip("/")) for e in entries if e.rstrip("/") != own})


def entry_sizes(fs: AbstractFileSystem, path: str) -> dict[str, int]:
    """Name → size of the entries directly under ``path`` now (a directory's: its total)."""
    uncached(fs, path)
    with errors_named(fs, path, "listing"):
        try:
            entries = retrying(lambda: fs.ls(path, detail=True), f"listing {path}")
        except FileNotFoundError:
            return {}
        out = {}
        for e in entries:
            if e["name"].rstrip("/") == path.rstrip("/"):  # (a folder marker, "dir/")
                continue
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            size = int(e.get("size") or 0)
            if e.get("type") == "directory":
                try:
                    size = int(retrying(functools.partial(fs.du, e["name"]), f"sizing {e['name']}"))
                except (FileNotFoundError, OSError):
                    size = 0
            out[name] = size
    return out


def matching(fs: AbstractFileSystem, path: str) -> dict[str, dict[str, Any]]:
    """:func:`.globbing.matching`, each listing with storage's retries."""
    return globbing.matching(fs, path, retrying)


def file_info(fs: AbstractFileSystem, path: str) -> dict[str, Any]:
    """``fs.info(path)`` (a link followed) as the storage answers now (:func:`uncached`);
    FileNotFoundError if nothing is there, also where a part of the path is a file."""
    uncached(fs, path)
    with errors_named(fs, path, "checking"):
        try:
            return retrying(lambda: fs.info(path), f"checking {path}")
        except NotADirectoryError as err:
            raise FileNotFoundError(err.errno, err.strerror, path) from err


def _info(fs: AbstractFileSystem, path: str) -> dict[str, Any] | None:
    """``fs.info(path)``, or None if nothing is there. Not ``fs.exists``/``fs.isdir``: they
    answer False to any error, so a failing or forbidden storage would look empty."""
    try:
        return file_info(fs, path)
    except FileNotFoundError:
        return None


def exists(fs: AbstractFileSystem, path: str) -> bool:
    return _info(fs, path) is not None


def isfile(fs: AbstractFileSystem, path: str) -> bool:
    info = _info(fs, path)
    return info is not None and info.get("type") == "file"


def isdir(fs: AbstractFileSystem, path: str) -> bool:
    info = _info(fs, path)
    return info is not None and info.get("type") == "directory"


def remove(fs: AbstractFileSystem, path: str, recursive: bool = False) -> None:
    """Delete ``path`` (with ``recursive``, a directory and all in it), by its exact name:
    never as a glob (:func:`.literal.remove`); a missing path is not an error."""
    with errors_named(fs, path, "deleting"), contextlib.suppress(FileNotFoundError):
        try:
            retrying(  # (locally: no rmtree, see interrupted.remove)
                functools.partial(interrupted.remove, path, recursive)
                if is_local(fs)
                else lambda: literal.remove(fs, path, recursive),
                f"deleting {path}",
            )
        except OSError:
            if _info(fs, path) is not None:  # pyarrow's hdfs raises EIO if it is missing
                raise
