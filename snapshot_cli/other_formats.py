"""What another tool's file or folder is, where one is given as a snapshot: a Parquet file,
an Arrow file, a Hugging Face ``save_to_disk`` folder... ("is a file, not a snapshot" said
neither what it was nor what to do; a probe of users coming from those tools). Read-only:
the first bytes of a file, the names in a folder. Pure but for those reads."""

from __future__ import annotations

import os
import posixpath
import stat
from typing import Any

from . import storage

# A file's first bytes, and what they make it
_MAGIC = (
    (b"PAR1", "a Parquet file"),
    (b"ARROW1", "an Arrow IPC file (Feather v2)"),
    (b"\xff\xff\xff\xff", "an Arrow IPC stream"),
    (b"FEA1", "a Feather v1 file"),
    (b"\x93NUMPY", "a NumPy .npy file"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x1f\x8b", "a gzip file"),
)
# Names a folder of another tool's holds, and what they make it
_FOLDERS = (
    (("dataset_info.json", "state.json"), "a Hugging Face datasets folder (save_to_disk)"),
    (("dataset_dict.json",), "a Hugging Face DatasetDict folder (save_to_disk)"),
    (("snapshot.metadata",), "a tf.data snapshot"),
)
_SUFFIXES = (
    (".parquet", "a folder of Parquet files"),
    (".arrow", "a folder of Arrow files (a Hugging Face datasets cache?)"),
    (".tar", "a folder of tar shards (WebDataset?)"),
    (".npy", "a folder of NumPy .npy files"),
    (".tfrecord", "a folder of TFRecord files"),
)
ADVICE = (  # what to do with another tool's file or folder
    "snap reads the snapshots snap create makes; to make one from it, give its files to "
    "snap create as --input, with a function that reads one and yields its records or "
    "batches (README: what a function may yield)"
)


def file_kind(fs: Any, path: str) -> str | None:
    """What the file at ``path`` is, by its first bytes (a tar by ``ustar`` at 257), if
    another tool's format snap knows of; else None. Only a regular file is opened (a FIFO
    waited for a writer for good)."""
    try:
        if storage.is_local(fs) and not stat.S_ISREG(os.stat(path).st_mode):
            return None
        head = storage.read_range(fs, path, 0, 262)
    except (OSError, ValueError):
        return None
    if head[257:262] == b"ustar":
        return "a tar archive (a WebDataset shard?)"
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def folder_kind(fs: Any, path: str) -> str | None:
    """What the folder at ``path`` is, by the names in it, if another tool's; else None."""
    try:
        names = set(storage.list_names(fs, path))
    except (OSError, ValueError):
        return None
    for wanted, kind in _FOLDERS:
        if all(name in names for name in wanted):
            return kind
    if "index.json" in names and any(n.endswith((".mds", ".mds.zstd")) for n in names):
        return "a Mosaic Streaming dataset"
    if "index.json" in names and any(n.startswith("chunk-") for n in names):
        return "a LitData optimized dataset"
    files = [n for n in names if not n.startswith(".")]
    for suffix, kind in _SUFFIXES:
        if files and sum(posixpath.splitext(n)[1] == suffix for n in files) * 2 >= len(files):
            return kind
    return None
