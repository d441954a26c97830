"""Storage failures as answers: a StorageError naming the path, the cause and what to do.

:func:`errors_named` wraps every storage call in :mod:`snapshot_cli.storage`; :func:`fault`
turns an OS error (a full disk, a read-only filesystem, an I/O error) into one line, worded
for the call that failed: a read's (no OUTPUT, nothing to free) or a write's. A process
short of memory or threads: :mod:`snapshot_cli.shortages`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
from collections.abc import Iterator
from errno import ENOENT
from urllib.parse import unquote

from fsspec import AbstractFileSystem

from . import layout, literal, retry
from .credentials import forgotten_if_refused, named_as_credentials
from .endpoints import endpoint_source
from .errors import DAMAGED, CorruptShardError, SnapError, StorageError
from .local_files import read_denied, read_hint, write_denied
from .os_paths import broken_link_said  # (a link to nothing: said where a path is missing)
from .protocols import OBJECT_STORES, is_local, protocol, to_url
from .retry import TRANSIENT_STATUS, causes, is_transient, retrying, said, transfer_checksum
from .shortages import READ_FEWER as READ_FEWER
from .shortages import WRITE_LESS, memory_limit, too_many_open_files
from .shortages import file_size_limit as file_size_limit
from .shortages import no_thread as no_thread
from .shortages import out_of_memory as out_of_memory
from .shortages import raise_no_thread as raise_no_thread
from .shortages import short_of_memory as short_of_memory
from .shortages import size_limit_said as size_limit_said
from .shortages import thread_limit as thread_limit
from .shortages import threads_said as threads_said
from .statuses import http_status, lost_upload, named, object_named, refusal, server_said

_GCS = "GOOGLE_APPLICATION_CREDENTIALS or gcloud auth application-default login"
_AWS = "AWS_PROFILE / AWS_ACCESS_KEY_ID, or the instance role"
_CREDENTIALS = {"gs": _GCS, "gcs": _GCS, "s3": _AWS, "s3a": _AWS}


def _permanent_hint(fs: AbstractFileSystem, status: int | None) -> str:
    creds = _CREDENTIALS.get(protocol(fs)) if status in (401, 403, None) else None
    return f"; check the credentials ({creds})" if creds else ""


def _missing_container(fs: AbstractFileSystem, path: str, err: BaseException) -> str:
    """Why a write found nothing there: the bucket, only if it is really missing (a 404 to
    an upload is also GCS's upload session expired or ended, its answer lost)."""
    if protocol(fs) not in OBJECT_STORES:
        return "its parent directory does not exist"
    if missing := missing_bucket_hint(fs, path):
        return f"{missing.removeprefix('; ')} (create it, or check the URL)"
    return lost_upload(http_status(err) or 404, err)


def missing_bucket_hint(fs: AbstractFileSystem, path: str) -> str:
    """``"; the bucket 'b' does not exist"`` if ``path``'s bucket is missing, else ``""``."""
    if protocol(fs) not in OBJECT_STORES:
        return ""
    bucket = path.lstrip("/").split("/", 1)[0]
    try:
        found = retrying(lambda: fs.exists(bucket), f"checking {bucket}")
    except Exception:  # only a hint: never hide the error it decorates
        return ""
    return "" if found else f"; the bucket {bucket!r} does not exist"


def inside_snapshot(fs: AbstractFileSystem, root: str) -> str:
    """ "; it is the shards/ directory of the snapshot X: give X" for a snapshot's own
    directory given as one (any filesystem; looked for only for those names)."""
    parent, name = posixpath.split(root.rstrip("/"))
    if name not in (layout.SHARDS_DIR, layout.RUNS_DIR, layout.VERSIONS_DIR) or not parent:
        return ""
    try:
        if not fs.isfile(posixpath.join(parent, layout.MANIFEST_NAME)):
            return ""
    except OSError:
        return ""
    return f"; it is the {name}/ directory of the snapshot {to_url(fs, parent)}: give that"


def absent_hint(fs: AbstractFileSystem, path: str) -> str:
    """What "``path`` does not exist" lacks: a link to nothing, a bucket, memory:// (own)."""
    if protocol(fs) == "memory":
        return "; memory:// is each process's own: one sees only what it wrote itself"
    if is_local(fs) and (url := literal.meant_url(path)) is not None:
        return f"; did you mean {url}? ({path} is a local path)"
    if is_local(fs) and (plain := unquote(path)) != path and os.path.exists(plain):
        return f"; did you mean {plain}? (a URL's %XX escapes are not decoded: give the path)"
    return broken_link_said(path) if is_local(fs) else missing_bucket_hint(fs, path)


@contextlib.contextmanager
def errors_named(fs: AbstractFileSystem, path: str, action: str) -> Iterator[None]:
    """Turn storage refusals into a StorageError naming the path and what was being done."""
    reading = action.startswith(("reading", "listing", "checking"))
    try:
        with forgotten_if_refused(fs):
            yield
    except PermissionError as err:
        if not is_local(fs):
            _answer_status(fs, path, action, err)  # (s3fs's, from a 401 or 403)
        hint = (_local_hint(path, reading) if is_local(fs) else None) or (
            "check that you may read it (file permissions or storage credentials)"
            if reading
            else "check that you may write there, or choose another OUTPUT"
        )
        raise StorageError(
            f"permission denied while {action} {to_url(fs, path)}: {hint} ({err})"
        ) from err
    except (NotADirectoryError, IsADirectoryError) as err:
        what = (
            "a part of the path is a file, not a directory"
            if isinstance(err, NotADirectoryError)
            else "it is a directory, not a file"
        )
        raise StorageError(f"{to_url(fs, path)}: {what} (while {action}: {err})") from err
    except FileNotFoundError as err:
        if action.startswith(("reading", "listing", "checking", "deleting")):
            if object_named(str(err)):  # (gcsfs's: its request URL, not the path)
                raise FileNotFoundError(ENOENT, "not found (HTTP 404)", to_url(fs, path)) from err
            raise  # callers decide what a missing file means
        raise StorageError(
            f"cannot write {to_url(fs, path)}: {_missing_container(fs, path, err)}"
            f"{'' if http_status(err) else f' ({err})'}"
        ) from err
    except FileExistsError as err:
        _answer_status(fs, path, action, err)  # (gcsfs's 412: no file that exists)
        raise
    except SnapError:
        raise  # said already (a StorageError from below, a CorruptShardError...)
    except OSError as err:
        _answer_status(fs, path, action, err)  # (s3fs's EIO over a 401, EBUSY over a 503...)
        if is_fault(err):  # ENOSPC, EIO, EROFS, ...
            raise fault(err, to_url(fs, path), reading) from err
        _answer_other(fs, path, action, err)
        raise _unexpected(fs, path, action, err) from err
    except Exception as err:  # a storage library's own: botocore's, google-auth's, ...
        if no_thread(err):  # (a storage library's thread, at a memory or pids limit)
            fewer = READ_FEWER if reading else ""
            raise thread_limit(f"{action} {to_url(fs, path)}", err, fewer=fewer) from err
        if isinstance(err, MemoryError):  # (Arrow's, compressing a shard's buffers)
            less = {"less": WRITE_LESS} if not reading else {}
            raise memory_limit(f"{action} {to_url(fs, path)}", err, **less) from err
        _answer_other(fs, path, action, err)
        raise _unexpected(fs, path, action, err) from err


def _local_hint(path: str, reading: bool) -> str | None:
    """What keeps this user from reading (or writing) the local ``path``, named with the
    owner of the part it may not reach, and what to do; None if its permissions do not."""
    try:
        return read_hint(path) if reading else write_denied(path)
    except OSError:
        return None


def _answer_status(fs: AbstractFileSystem, path: str, action: str, err: Exception) -> None:
    """Raise what the HTTP status behind ``err`` calls for, if it carries one."""
    if http_status(err) is not None:
        _answer_other(fs, path, action, err)


def _answer_other(fs: AbstractFileSystem, path: str, action: str, err: Exception) -> None:
    """Raise the StorageError an HTTP status or a transient failure calls for, if any: the
    snap path and the cause in words, never the client's request URL."""
    status, url = http_status(err), to_url(fs, path)
    reading = action.startswith(("reading", "listing", "checking", "deleting"))
    if status == 404:
        if not reading:
            raise StorageError(f"cannot write {url}: {_missing_container(fs, path, err)}") from err
        raise FileNotFoundError(ENOENT, "not found (HTTP 404)", url) from err
    if is_transient(err):
        tries = getattr(err, "snap_tries", 1)
        kinds = [c.__name__ for e in causes(err) for c in type(e).__mro__]
        hint, what = "try again later", said(err)
        if status is not None:
            what = f"{named(status)}{f' ({server_said(err)})' if server_said(err) else ''}"
        if transfer_checksum(err):
            what = f"{CHECKSUM_SAID} ({server_said(err)})"
            hint = f"the stored file is not necessarily damaged: {CHECKSUM_HINT}"
        elif any(_NETWORK_WORDS.search(k) for k in kinds) and status is None:
            hint = f"check that the storage is reachable at that address{_at(fs)}, then try again"
        failed = f"failed while {action} {url}"  # (a stream sent once: not "tried 1 time")
        if tries > 1:
            failed = f"kept failing while {action} {url} (tried {tries} times)"
        raise StorageError(f"storage {failed}: {what}; {hint}") from err
    if status is not None and status >= 400:
        words = refusal(status, reading, err, _CREDENTIALS.get(protocol(fs)))
        raise StorageError(f"failed while {action} {url}: {words}") from err


def _at(fs: AbstractFileSystem) -> str:
    return endpoint_source(protocol(fs), getattr(fs, "storage_options", None))


CHECKSUM_SAID = "the response's bytes arrived damaged (their checksum is not the storage's)"
CHECKSUM_HINT = "check the network (a proxy that alters answers?), then run the same command again"


def _unexpected(fs: AbstractFileSystem, path: str, action: str, err: Exception) -> StorageError:
    """Any other failure of a storage call, as one line naming the path and the error's own
    class and text (the library's: botocore's ParamValidationError, aiohttp's DNS error...),
    with what to check where the kind is known: credentials, or the network."""
    kinds = [c.__name__ for e in causes(err) for c in type(e).__mro__]
    what = said(err)  # one line, whatever the library put in it
    if named_as_credentials(err):
        hint = _permanent_hint(fs, None).removeprefix("; ") or "check the credentials"
        return StorageError(
            f"cannot authenticate to the storage while {action} {to_url(fs, path)}: {what}; {hint}"
        )
    if any(_NETWORK_WORDS.search(k) for k in kinds):
        hint = f"check the network, and the storage's address (endpoint, bucket name){_at(fs)}"
    elif option := _UNKNOWN_OPTION.search(what):
        hint = _unknown_option_hint(fs, option.group(1))
    elif "Invalid endpoint" in what:  # (botocore's, for one without http:// or https://)
        hint = f"an endpoint is a URL with its scheme, http://host:port{_at(fs)}"
    else:
        hint = "check the URL and the storage, then run the same command again"
    return StorageError(f"failed while {action} {to_url(fs, path)}: {what}; {hint}")


# a client given an option it does not take (FSSPEC_S3_REGON=..., a misspelt storage_options
# key): s3fs passes it on, and its session refuses it at the first request
_UNKNOWN_OPTION = re.compile(r"TypeError: .*unexpected keyword argument '(\w+)'")


def _unknown_option_hint(fs: AbstractFileSystem, name: str) -> str:
    """Where an option the storage's client refused came from, and what to do."""
    proto = protocol(fs)
    variables = [
        k for k in os.environ if k.upper() == f"FSSPEC_{proto}_{name}".upper()
    ]  # (fsspec reads FSSPEC_<PROTOCOL>_<OPTION>, any case of the option)
    where = f"the environment's {variables[0]}" if variables else "storage_options="
    return (
        f"the {proto} client takes no option {name!r}, given in {where} (fsspec's "
        "configuration): correct or remove it, then run the same command again"
    )


# Class names that say the network failed, whichever library raised it: aiohttp's
# ClientConnectorDNSError, botocore's EndpointConnectionError, socket.gaierror.
_NETWORK_WORDS = re.compile(r"Connect|DNS|gaierror|herror|Resolver|Proxy|SSL|Timeout")

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
    errno.EFBIG: "a file grew past what the filesystem allows (FAT32 keeps files under 4 GiB): "
    "write to another filesystem",
    # (the process's, whatever it was doing: a write's as a read's)
    errno.ENOMEM: "out of memory: give this process more memory (ulimit -v, a container's or a "
    "job's limit), then run the same command again",
    errno.EMFILE: "too many open files: raise this process's open-files limit (ulimit -n, or "
    "LimitNOFILE for a service), then run the same command again",
    errno.ENFILE: "the system has too many open files (fs.file-max): close some, or raise it, "
    "then run the same command again",
    errno.EINTR: "interrupted by a signal: run the same command again",
}
# A read's: the advice above for these is a writer's (OUTPUT, free space, remount writable)
_WRITERS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM)
READ_FAILED = (
    "the storage failed on a read, not necessarily the data: check the disk or the storage, "
    "then run the same command again"
)


def is_fault(err: OSError) -> bool:
    """An OS error that is the storage's condition (full, read-only, forbidden, I/O error),
    not a statement about the file's contents."""
    return err.errno in _FAULT_HINTS


def fault(err: OSError, where: str, reading: bool = False) -> StorageError:
    """An OS error while working on ``where`` as one line: the path, the cause, what to do.
    ``reading``: the call read (a reader has no OUTPUT to change, and nothing to free or
    remount for a read). A local file this user may not read (or a directory above it it may
    not enter) is said as such, with its owner."""
    # (else gcsfs's request URL, if any, names the object a caller that knew none could not)
    path = err.filename if isinstance(err.filename, str) else object_named(str(err)) or where
    if (status := http_status(err)) is not None:
        return StorageError(f"{path}: {_status_said(status, path, reading, err)}")
    cause, hint = _explained(err, path, reading)
    return StorageError(f"{path}: {cause}; {hint}")


def _status_said(status: int, path: str, reading: bool, err: BaseException) -> str:
    """An HTTP refusal of a call on ``path`` whose filesystem is not at hand."""
    if status in TRANSIENT_STATUS:
        return f"the storage kept failing ({named(status)}); try again later"
    creds = _CREDENTIALS.get(path.partition("://")[0]) if "://" in path else None
    return refusal(status, reading, err, creds)


def _explained(err: OSError, path: str, reading: bool = False) -> tuple[str, str]:
    """``err``'s cause (``"Input/output error (EIO)"``) and what to do about it on ``path``."""
    code = errno.errorcode.get(err.errno or 0, "")
    cause = f"{err.strerror or str(err) or type(err).__name__}{f' ({code})' if code else ''}"
    hint = _FAULT_HINTS.get(err.errno or 0, "fix that, then run the same command again")
    if reading and (err.errno in _WRITERS or err.errno not in _FAULT_HINTS):
        hint = READ_FAILED
    if err.errno in (errno.EACCES, errno.EPERM):
        denied = read_hint(path) if os.path.isabs(path) else None
        hint = denied or (READ_DENIED if reading else hint)
    if err.errno == errno.EFBIG and not reading:
        hint = too_big_hint(path)
    if isinstance(err, TimeoutError) and not err.errno:  # (a client's: fsspec's, asyncio's)
        cause, hint = said(err), NO_ANSWER
    return cause, hint


NO_ANSWER = "the storage stopped answering: check that it is reachable, then run again"


def no_answer(err: BaseException, where: str) -> StorageError | None:
    """A client's timeout that is no OSError (asyncio's and so fsspec's on Python 3.10) as
    the storage's silence, not as a bug in snap; None for any other error."""
    if isinstance(err, retry.TIMEOUTS) and not isinstance(err, OSError):
        return StorageError(f"{where}: {said(err)}; {NO_ANSWER}")
    return None


READ_DENIED = (
    "permission denied: check that this user may read it (the permissions of the file and of "
    "every directory above it, or the storage's credentials)"
)


_SMALLER_SHARDS = (
    "--shard-size (shard_size=) and --batch-bytes (batch_bytes=; a record is never split)"
)


def too_big_hint(path: str) -> str:
    """What to do about EFBIG on ``path``: the process's file-size limit if it has one (a
    lease or a task table is small: only that limit stops it), and a smaller shard size only
    for a shard, the one file whose size an option sets."""
    shard = f"/{layout.SHARDS_DIR}/" in path.replace(os.sep, "/")
    limit = file_size_limit()
    if limit is None:
        todo = "write to another filesystem"
        if shard:
            todo = f"pass a smaller --shard-size (shard_size=), or {todo}"
        return _FAULT_HINTS[errno.EFBIG].replace("write to another filesystem", todo)
    # (a shard holds one record batch at least, 1 MiB by default, which holds one record)
    smaller = f" or pass a smaller {_SMALLER_SHARDS}" if shard else ""
    return (
        f"the file reached {size_limit_said(limit)}: raise it (ulimit -f unlimited){smaller}, "
        "then run the same command again"
    )


def read_failure(
    where: str, err: Exception, doing: str = "decoded", shuffled: bool = False,
    path: str | None = None,
) -> SnapError:  # fmt: skip
    """What a failed read of ``where`` (a shard, or one of its record batches) means: an OS
    error (one with an errno: EIO from a failing disk, ESTALE from NFS, EACCES...) is the
    storage's, a StorageError that says so, since the snapshot may be intact; anything else
    is that the bytes cannot be ``doing`` (opened, decoded: a damaged shard). ``shuffled``:
    read by a loader that shuffles (then an unshuffled pass is advice on open files).
    ``path``: the local file, whose denied read is said as verify says it (owner, chmod)."""
    if (short := out_of_memory(where, err)) is not None:
        return short
    if isinstance(err, PermissionError) and path is not None:
        return StorageError(read_denied(path, err))
    if (status := http_status(err)) is not None:  # (gcsfs's 404 or 412: its URL, no errno)
        return StorageError(f"{where} could not be read: {_status_said(status, where, True, err)}")
    if transfer_checksum(err):
        return StorageError(f"{where} could not be read: {CHECKSUM_SAID}; the shard is not "
                            f"necessarily damaged: {CHECKSUM_HINT}")  # fmt: skip
    if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
        return too_many_open_files(where, err.errno, shuffled)
    if isinstance(err, OSError) and err.errno is not None:
        code = errno.errorcode.get(err.errno, str(err.errno))
        hint = (
            _FAULT_HINTS[errno.EINTR]
            if err.errno == errno.EINTR
            else "the storage failed, not necessarily the snapshot: check the disk or file "
            "system (and that this process may read the file), then run again"
        )
        return StorageError(f"{where} could not be read: {err.strerror or err} ({code}); {hint}")
    where = re.sub(r" record batch \d+$", "'s footer", where) if "Footer" in str(err) else where
    return CorruptShardError(f"{where} cannot be {doing}: {str(err).rstrip('.')}; {DAMAGED}")
