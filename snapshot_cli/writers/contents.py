"""Reading input files' bytes to identify them (sha256), in threads sized to the storage.

A file whose listing gives no checksum (local disk, HDFS) is identified by its bytes the
first time a create sees it; later creates trust its version (size and mtime) unless it
changed. See :mod:`.inputs`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec

from .. import interrupted, os_paths, storage
from ..errors import StorageError
from ..progress import counted, human_bytes

log = logging.getLogger("snapshot_cli")

HASH_THREADS = 8  # remote files hashed at once (reads and sha256 release the GIL)
LOCAL_THREADS = 4  # local ones (see threads_for)
GROUP_FILES, GROUP_BYTES = 64, 64 << 20  # a thread's task: this many files, or bytes


def hash_files(
    files: list[tuple[str, int]], storage_options: Any = None, etags: dict[str, str] | None = None
) -> dict[str, str]:
    """``{url: "sha256=..."}`` of ``(url, size)`` files (``{url: 'ETag="<md5>"'}`` for those
    ``etags`` maps to their ETag's key: S3 multipart uploads); says so first where that takes a
    while, and how long it took. A stop (Ctrl-C) ends every read within a piece: the pool's
    threads finished their files first (8 GiB: 10 s, then "storage that does not answer?")."""
    if not files:
        return {}
    started, total = time.monotonic(), sum(size for _, size in files)
    if total >= SAY_FIRST_BYTES:  # (silent for as long as the reads took: minutes, at scale)
        said = f"{counted(len(files), 'input file')} ({human_bytes(total)})"
        log.info("reading %s to identify their contents (later creates read only new or "
                 "changed ones)", said)  # fmt: skip
    stop = threading.Event()
    hash_one = functools.partial(_hash_file, storage_options=storage_options, stop=stop)
    etags = etags or {}
    pool = ThreadPoolExecutor(threads_for(files), thread_name_prefix="snap-hash")
    try:
        digests = pool.map(lambda urls: [hash_one(u, etags.get(u)) for u in urls], _groups(files))
        hashed = dict(zip((u for u, _ in files), (d for ds in digests for d in ds), strict=True))
    finally:
        stop.set()  # (a stop, or a file that failed: the others end at their next piece)
        pool.shutdown(wait=True, cancel_futures=True)
    log.info(
        "read %s (%s) in %.1f s to identify their contents",
        counted(len(files), "input file"),
        human_bytes(total),  # ("0.0 MiB" for 10 bytes)
        time.monotonic() - started,
    )
    return hashed


def _hash_file(
    url: str, etag: str | None = None, storage_options: Any = None,
    stop: threading.Event | None = None,
) -> str:  # fmt: skip
    """:func:`hash_file`, read again from the start where a signal interrupted its open,
    a read or its close (EINTR, as NFS mounted with ``intr`` or FUSE give; Python never
    tries a close again): up to ``interrupted.TRIES`` tries in all. A read: nothing to undo."""
    for _ in range(interrupted.TRIES - 1):
        try:
            return hash_file(url, storage_options=storage_options, stop=stop, etag=etag)
        except (InterruptedError, StorageError) as err:
            if not isinstance(err, InterruptedError) and not isinstance(
                err.__cause__, InterruptedError
            ):
                raise
    return hash_file(url, storage_options=storage_options, stop=stop, etag=etag)


def _groups(files: list[tuple[str, int]]) -> list[list[str]]:
    """Runs of files to hash in one task (a future per file cost ~80 us of GIL hand-offs)."""
    groups: list[list[str]] = [[]]
    size = 0
    for url, n in files:
        if len(groups[-1]) >= GROUP_FILES or size >= GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(url)
        size += n
    return groups


def threads_for(files: list[tuple[str, int]]) -> int:
    """Remote reads wait on the network: HASH_THREADS. Local ones: LOCAL_THREADS. Measured
    on 2 cores, us a file in 1/2/4/8 threads (tasks of 64 files): 110 KB files from the page
    cache 150/145/180/200, from disk 460/360/290/295; 4-byte files from the page cache
    46/83/102/146 (the threads fight over the GIL: Python costs more than the I/O), from
    disk 250/215/196/262. Reads from disk are where the time goes, so four."""
    return LOCAL_THREADS if all(storage.plain_local(url) for url, _ in files) else HASH_THREADS


HASH_CHUNK = 8 << 20
SAY_FIRST_BYTES = 1 << 30  # inputs to read this large: said before, not only after


class Stopped(Exception):
    """A read of :func:`hash_file` given up: its caller stops (raised in its pool only)."""


def hash_file(
    url: str, storage_options: dict[str, Any] | None = None, stop: threading.Event | None = None,
    etag: str | None = None,
) -> str:  # fmt: skip
    """sha256 of a file's bytes, read in 8 MiB pieces (``stop`` set: Stopped before the
    next); with ``etag`` (an ETag's key), their MD5 as a one-part upload's ETag is said. A
    local path is opened as Python opens files: fsspec's URL parsing and file object cost
    ~100 us a file, 12 s of 13 over 50,000 small inputs."""
    if storage.plain_local(url):
        fs, path = fsspec.filesystem("file"), os_paths.absolute(url)
    else:
        fs, path = storage.resolve(url, storage_options)
    digest = hashlib.md5(usedforsecurity=False) if etag else hashlib.sha256()
    opener = open if storage.is_local(fs) else fs.open
    with storage.errors_named(fs, path, "reading"), opener(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
            if stop is not None and stop.is_set():
                raise Stopped(url)
    return f'{etag}="{digest.hexdigest()}"' if etag else f"sha256={digest.hexdigest()}"
