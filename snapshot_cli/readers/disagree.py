"""Which one is damaged when a shard's file and the manifest disagree on the schema.

snap writes every shard with the manifest's schema, so when the two differ one was changed
since. The manifest's schema is, when the shard's bytes are as written (its whole crc32c is
the one its entry lists) and another shard differs from the manifest alike (or there is no
other): a byte of the schema's base64 text changed can decode to another valid schema that
the description beside it does not tell apart (``large_string`` for ``string``). Otherwise
the shard is (a file and its entry both replaced: another snapshot's shard). Only worked out
on the way to an error: the crc32c reads the shard whole, the other shard's footer is read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from .. import ipc_blocks, layout, storage
from .. import schema as schema_mod
from ..errors import DAMAGED, CorruptShardError, ManifestError, SnapError
from ..manifest import ShardEntry, repair_advice
from .checksum import crc32c_buffer, crc32c_file


def layout_error(
    got: pa.Schema | None,
    want: pa.Schema,
    counts: tuple[int, int],
    urls: tuple[str, str],
    manifest_wrong: Callable[[], bool],
    fix: str = DAMAGED,
) -> SnapError | None:
    """What to raise for a shard whose footer has the schema ``got`` (None: not looked at)
    and ``counts`` (record batches in the file, in the manifest), read by the manifest's
    schema ``want``; None if nothing is wrong. ``urls``: the shard's and the manifest's;
    ``manifest_wrong`` (:func:`manifest_wrong`) tells which of the two differing schemas is
    damaged; ``fix`` is what to do about a damaged shard."""
    url, manifest = urls
    problem = schema_mod.layout_problem(got, want, *counts)
    if problem is None:
        return None
    diff = None if got is None else schema_mod.difference(got, want)
    if diff is not None and manifest_wrong():
        return ManifestError(
            f"{manifest}: the shard {url} is as written (its crc32c is the manifest's), yet "
            f"its schema differs from the manifest's ({diff}), as the next shard's does, if "
            "any (snap writes every shard with the manifest's): the manifest's schema "
            f"(schema.arrow_ipc_base64) is damaged, not the shards; {repair_advice(manifest)}"
        )
    return CorruptShardError(f"shard {url}: {problem}; {fix}")


def manifest_wrong(
    fs: Any, root: str, shards: Sequence[ShardEntry], i: int, want: pa.Schema
) -> bool:
    """Whether shard ``i`` (of ``shards`` under ``root``), whose schema differs from the
    manifest's ``want``, is as written and the next shard differs from ``want`` too (or
    there is none, or it cannot be read: the shard's own crc32c is then what is known)."""
    try:
        if not _as_written(fs, root, shards[i]):
            return False
    except (OSError, pa.ArrowException):  # (unreadable now: the shard's error says so later)
        return False
    if len(shards) < 2:
        return True
    other = shards[(i + 1) % len(shards)]
    path = storage.join(root, other.path)
    try:  # (its first message, read as bytes: no Arrow reader of a Python file)
        got = ipc_blocks.file_schema(lambda n, at: fs.cat_file(path, at, at + n), other.bytes)
    except (OSError, ipc_blocks.FooterError):
        return True
    return schema_mod.difference(got, want) is not None


Judged = tuple[tuple[str, str], Callable[[], bool]]  # what layout_error needs of a shard


def judged(readers: Any, i: int) -> Judged:
    """Shard ``i`` of ``readers`` (a :class:`.shard.ShardReaders`): its URL and its
    manifest's, and its :func:`manifest_wrong`, for :func:`layout_error`."""
    fs, root = readers.fs, readers.root
    urls = readers.url(i), storage.to_url(fs, layout.manifest_path(root))
    return urls, functools.partial(manifest_wrong, fs, root, readers.shards, i, readers.schema)


def _as_written(fs: Any, root: str, entry: ShardEntry) -> bool:
    path = storage.join(root, entry.path)
    if storage.is_local(fs):
        return crc32c_file(path) == entry.crc32c
    return crc32c_buffer(storage.read_bytes(fs, path)) == entry.crc32c
