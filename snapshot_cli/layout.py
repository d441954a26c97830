"""The on-disk layout (docs/format.md) in one place: every path and name snap reads or
writes inside a snapshot comes from here (pure: strings only, nothing is touched).

    OUTPUT/
      manifest.json                       the commit: written last, atomically
      shards/<run>-<task>-<seq>-<writer>.arrow  Arrow IPC files, written once (<writer>:
                                          the lease epoch of the create that wrote it)
      _runs/lease-<epoch>.json            the writer lease (one file per epoch)
      _runs/<run>/run.json                a run's plan and options
      _runs/<run>/tasks/<task>.json       a finished task's result
      _versions/vNNNNNNNN.json            the manifest of each committed version (format 3)
      _versions/vNNNNNNNN.tasks.json      a version's task table (see history.py)
      .<name>.<uuid>.tmp                  a temporary file of an atomic write, anywhere
"""

from __future__ import annotations

import posixpath
import re
import uuid
from typing import Any

from .errors import ManifestError

# A number written zero-padded to N digits (``f"{n:0Nd}"``): N digits, or more without a
# leading zero once it outgrows them (a task's 10,000th shard: ``-10000``).
_WIDE4, _WIDE5, _WIDE8 = (rf"(?:\d{{{n}}}|[1-9]\d{{{n},}})" for n in (4, 5, 8))
MANIFEST_NAME = "manifest.json"
SHARDS_DIR = "shards"
RUNS_DIR = "_runs"
VERSIONS_DIR = "_versions"
_VERSION_RE = re.compile(rf"^v({_WIDE8})\.json$")
_TASKS_RE = re.compile(rf"^v({_WIDE8})\.tasks\.json$")
RUN_FILE = "run.json"
TASKS_DIR = "tasks"
LEASE_PREFIX = "lease-"
TEMPORARY_SUFFIX = ".tmp"
_LEASE_RE = re.compile(rf"^lease-({_WIDE8})\.json$")


def manifest_path(root: str) -> str:
    return posixpath.join(root, MANIFEST_NAME)


def shards_dir(root: str) -> str:
    return posixpath.join(root, SHARDS_DIR)


def runs_dir(root: str) -> str:
    return posixpath.join(root, RUNS_DIR)


def run_dir(root: str, run: str) -> str:
    return posixpath.join(root, RUNS_DIR, run)


def run_file(root: str, run: str) -> str:
    return posixpath.join(root, RUNS_DIR, run, RUN_FILE)


def tasks_dir(root: str, run: str) -> str:
    return posixpath.join(root, RUNS_DIR, run, TASKS_DIR)


def result_path(root: str, run: str, task: int) -> str:
    """Where task ``task`` of ``run`` writes its result once all its shards are written."""
    return posixpath.join(tasks_dir(root, run), f"{task:05d}.json")


def shard_path(run: str, task: int, seq: int, writer: int | None = None) -> str:
    """A shard's path relative to the snapshot, as the manifest records it. ``writer``: the
    lease epoch of the create writing it. A create that resumes a run a writer it took over
    left unfinished gives the tasks it computes again names of its own: that writer, if
    only paused (a stopped job, a suspended VM), may still write its own names before it
    sees it lost the lease, never the files the resuming one commits. (Without it: names of
    snap before 2026-11-30.)"""
    tail = "" if writer is None else f"-{writer:08d}"
    return f"{SHARDS_DIR}/{run}-{task:05d}-{seq:04d}{tail}.arrow"


def is_shard_of(name: str, run: str) -> bool:
    """Whether the shard file ``name`` (in ``shards/``) was written by ``run``."""
    return name.startswith(f"{run}-")


def versions_dir(root: str) -> str:
    return posixpath.join(root, VERSIONS_DIR)


def version_path(root: str, version: int) -> str:
    """Where version ``version``'s manifest is kept once it is committed."""
    return posixpath.join(root, VERSIONS_DIR, f"v{version:08d}.json")


def tasks_table(version: int) -> str:
    """Version ``version``'s task table, relative to the snapshot (as its manifest says)."""
    return f"{VERSIONS_DIR}/v{version:08d}.tasks.json"


def version_of(name: str) -> tuple[int, str] | None:
    """``(version, "manifest" | "tasks")`` of a file in ``_versions/``, or None."""
    if m := _VERSION_RE.match(name):
        return int(m.group(1)), "manifest"
    if m := _TASKS_RE.match(name):
        return int(m.group(1)), "tasks"
    return None


def lease_path(root: str, epoch: int) -> str:
    return posixpath.join(root, RUNS_DIR, f"{LEASE_PREFIX}{epoch:08d}.json")


def lease_epoch(name: str) -> int | None:
    """The epoch of the lease file ``name`` (in ``_runs/``), or None if it is not one."""
    m = _LEASE_RE.match(name)
    return int(m.group(1)) if m else None


def is_run_name(name: str) -> bool:
    """Whether the entry ``name`` of ``_runs/`` is a run's directory (not a lease, not a
    temporary file)."""
    return not name.startswith((LEASE_PREFIX, "."))


_RUN_ID = re.compile(r"^[0-9a-f]{1,32}$")
_SHARD_NAME = re.compile(rf"^[0-9a-f]{{1,32}}-{_WIDE5}-{_WIDE4}(?:-(?P<writer>{_WIDE8}))?\.arrow$")


def shard_writer(name: str) -> int | None:
    """The lease epoch of the create that wrote the shard file ``name`` (:func:`shard_path`'s
    ``writer``), or None for a name without one (snap before 2026-11-30), or no shard's."""
    found = _SHARD_NAME.match(name)
    return None if found is None or found["writer"] is None else int(found["writer"])


def is_own_run(name: str) -> bool:
    """Whether ``name`` in ``_runs/`` is a run id snap makes (hex), not another file."""
    return _RUN_ID.match(name) is not None


def is_own_shard(name: str) -> bool:
    """Whether ``name`` in ``shards/`` is a shard's name snap gives, or the temporary file of
    one (``.<run>-<task>-<seq>-<writer>.arrow.<uuid>.tmp``): what gc may remove there."""
    if is_temporary(name):
        name = name[1:].rsplit(".", 2)[0]
    return _SHARD_NAME.match(name) is not None


def is_own_temporary(name: str) -> bool:
    """Whether ``name`` at a snapshot's top is the temporary file of its manifest."""
    return temporary_of(name) == MANIFEST_NAME


_TEMPORARY_RE = re.compile(r"^\.(.+)\.[0-9a-f]{32}" + re.escape(TEMPORARY_SUFFIX) + "$")


def temporary_of(name: str) -> str | None:
    """The name whose atomic write left the temporary file ``name``
    (``.<name>.<uuid>.tmp``, :func:`temporary_path`), or None if it is no such file."""
    m = _TEMPORARY_RE.match(name)
    return m.group(1) if m else None


def temporary_path(path: str) -> str:
    """A fresh name, next to ``path``, for writing it before it is renamed into place."""
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name}.{uuid.uuid4().hex}{TEMPORARY_SUFFIX}")


def is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(TEMPORARY_SUFFIX)


# A file of a snapshot's layout, by its path: (root, part) for what follows the root.
_PARTS = (SHARDS_DIR, RUNS_DIR, VERSIONS_DIR)
_OWN_FILE = re.compile(
    r"^(?P<root>.*?)/(?:"
    rf"(?P<shards>{SHARDS_DIR})/[0-9a-f]+-{_WIDE5}-{_WIDE4}(?:-{_WIDE8})?\.arrow"
    rf"|(?P<runs>{RUNS_DIR})/(?:lease-{_WIDE8}\.json|[0-9a-f]+/(?:{RUN_FILE}|{TASKS_DIR}/{_WIDE5}\.json))"
    rf"|(?P<versions>{VERSIONS_DIR})/v{_WIDE8}(?:\.tasks)?\.json"
    r")$"
)


def own_file(path: str) -> tuple[str, str] | None:
    """``(root, part)`` when ``path`` is, by its name, one of a snapshot's own files under
    ``root`` (a shard, a run's or lease's file, a kept version's manifest or task table;
    ``part`` its directory: ``shards``, ``_runs`` or ``_versions``), else None. Pure."""
    if not any(f"/{part}/" in path for part in _PARTS):  # (most inputs: no regex)
        return None
    path = path.rstrip("/")
    parent, name = posixpath.split(path)
    if is_temporary(name):  # (a file being written is named after the one it becomes)
        path = posixpath.join(parent, name[1:].rsplit(".", 2)[0])
    m = _OWN_FILE.match(path)
    if m is None:
        return None
    return m["root"], m["shards"] or m["runs"] or m["versions"]


MAX_PATH = 1024  # characters in a shard path


def check_relative_path(path: Any, where: str) -> str:
    """``path`` (a file's in the snapshot) without its "." segments: ``./shards/a.arrow`` is
    ``shards/a.arrow``, the one spelling readers, caches and gc compare. A ManifestError for
    an absolute path, a URL, a ``..``, an empty segment (``a//b``: another object on GCS or
    S3) or a backslash."""
    parts = path.split("/") if isinstance(path, str) else [""]
    kept = [p for p in parts if p != "."]
    if (
        not isinstance(path, str)
        or len(path) > MAX_PATH
        or "\x00" in path
        or any(0xD800 <= ord(c) <= 0xDFFF for c in path)
        or "\\" in path
        or ":" in path
        or not kept
        or parts[-1] == "."
        or any(p in ("", "..") for p in kept)
    ):
        raise ManifestError(
            f"{where}: shard path {path!r} must be relative and stay inside the snapshot: "
            "names joined by '/', none empty or '..' (no leading '/'), no '\\' or ':'"
        )
    return "/".join(kept)
