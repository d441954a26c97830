"""Errors raised by snap.

Every error snap raises on purpose is a :class:`SnapError`, and also the builtin that fits it,
so callers can catch either::

    SnapError (Exception)
    ├── OptionError (ValueError)              a bad option or --param value
    ├── PipelineLoadError (ImportError)       PIPELINE file, module or function not found
    ├── PipelineError (RuntimeError)          the user's function raised; carries its traceback
    ├── RecordError (TypeError)               a yielded value is not a record / batch / column
    │   └── SchemaMismatchError               a column's type or shape class changed
    ├── SnapshotExistsError (FileExistsError) OUTPUT holds another snapshot, or no snapshot
    ├── ManifestError (ValueError)            manifest.json missing, unreadable or invalid
    ├── CorruptShardError (OSError)           a shard's size, checksum or contents are wrong
    ├── StorageError (OSError)                the storage refused (permission, missing bucket)
    ├── OutOfMemoryError (MemoryError)        no memory for the loader's window or batch
    └── LeaseError (RuntimeError)             another writer holds or took over the snapshot

The CLI maps SnapError to exit code 1 and prints only the message; anything else is a bug.
"""

from __future__ import annotations

from typing import Any

# What to do about a shard found damaged while reading (``snap verify``'s advice, in short).
DAMAGED = (
    "the snapshot is damaged: snap verify lists every damaged shard; delete those and run "
    "the same snap create again (it computes only their tasks again, a new version), or "
    "remake the snapshot with snap create --overwrite"
)


class SnapError(Exception):
    """Base class of all errors snap raises on purpose."""

    exit_code = 1


class OptionError(SnapError, ValueError):
    """An option or parameter has a value snap cannot use."""


class PipelineLoadError(SnapError, ImportError):
    """The PIPELINE (file, module or function) or an --inputs-from function cannot be loaded."""


class PipelineError(SnapError, RuntimeError):
    """The user's pipeline function raised; the message names the input and has its traceback."""


class RecordError(SnapError, TypeError):
    """The pipeline yielded something that is not a record, a batch, or a supported value."""


class SchemaMismatchError(RecordError):
    """A column's type or shape class differs between records, batches or tasks."""


class SnapshotExistsError(SnapError, FileExistsError):
    """OUTPUT already holds something that this run may not replace."""


class ManifestError(SnapError, ValueError):
    """A manifest is missing, unreadable, or does not describe a valid snapshot."""


class CorruptShardError(SnapError, OSError):
    """A shard does not match its manifest entry (size, checksum, records) or cannot be decoded."""


class StorageError(SnapError, OSError):
    """The storage refused an operation (permission denied, not a directory, no such bucket)."""


class OutOfMemoryError(SnapError, MemoryError):
    """The loader could not allocate a window or a batch (the message says how large)."""


class LeaseError(SnapError, RuntimeError):
    """Another writer holds the snapshot's lease, or took it over from this one."""


def outside_snap() -> int:
    """The ``stacklevel`` that points a warning raised now at the first caller outside snap
    (a user's line, not snap's wrappers: a fixed count went stale when one was added)."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: Any = sys._getframe(1)  # (the caller of this function: warnings.warn's)
    level = 1
    while frame is not None and absolute_path(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def absolute_path(path: str) -> str:
    """``os.path.abspath(path)``, or ``path`` itself if it is relative and the working
    directory was deleted (a ``<string>`` frame of ``python -c`` there: no file of snap's)."""
    import os

    try:
        return os.path.abspath(path)
    except OSError:
        return path
