"""What identifies an input file, from what a listing says of it: its *version* (the mtime,
generation or checksum, cheap: compared first) and its *content* (a checksum of its bytes the
storage keeps, or "" where only reading the bytes can tell). See :mod:`.inputs`.

A local file's version is its mtime, inode and ctime, as git compares them: by size and mtime
alone, as make compares, two files of one size written in the same tick of the kernel's clock
(a burst of writes: the same mtime to the nanosecond) and then swapped with ``mv``, or a link
turned to the other, were the same inputs, and their records stayed as they were. A rename,
a ``chmod`` or a copy (``cp -p``, ``rsync -a``: a new inode) changes them: the bytes are read
then, and the same bytes keep the snapshot up to date."""

from __future__ import annotations

import re
from typing import Any

from ..units import stored_seconds

# Keys that identify a file's version, most specific first (GCS, S3, local and HDFS, WebHDFS,
# memory). A file with none of them has no version: its bytes are read on every create.
_VERSION_KEYS = ("crc32c", "md5Hash", "generation", "ETag", "etag", "mtime",
                 "modificationTime", "created")  # fmt: skip
# Keys that are a checksum of a file's contents, as the storage reports it (GCS, S3).
_CONTENT_KEYS = ("crc32c", "md5Hash", "ETag", "etag")
# Versions that are a time, and how recent one may be and still vouch for the bytes: a file
# written again within the same tick of its mtime keeps its mtime (FAT ticks every 2 s, exFAT
# and HFS+ every second), so one listed within RACY_S of its last change is identified by its
# bytes, now and at the next create, until it is older (git's "racily clean" files). An
# exFAT drive replayed the old bytes of such a rewrite before (5 of 5 tries).
_TIME_KEYS = ("mtime", "modificationTime", "created")
RACY_S = 2.0


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


# An S3 multipart upload's ETag: the MD5 of its parts' MD5s, then "-" and their count. It
# follows from how the bytes were cut in parts (aws s3 cp: 8 MiB each), not from the bytes:
# the same bytes uploaded again otherwise were a changed input. Their sha256 identifies them.
_MULTIPART_ETAG = re.compile(r'"?[0-9a-fA-F]{32}-[0-9]+"?')


def _content(info: dict[str, Any]) -> tuple[str, str]:
    """The checksum of the bytes the storage reports (see ``_CONTENT_KEYS``), or "" where
    there is none; and for a multipart upload's ETag, which is none, its key: the bytes are
    then read and their MD5 said as a one-part upload's ETag is (``ETag="<md5>"``), so that
    the same bytes uploaded in one part or in any number are the same input."""
    said = _first(info, _CONTENT_KEYS)
    key, _, value = said.partition("=")
    return ("", key) if key.lower() == "etag" and _MULTIPART_ETAG.fullmatch(value) else (said, "")


def _racy(info: dict[str, Any], version: str, listed: float) -> bool:
    """Whether ``version`` is a time less than RACY_S before ``listed`` (or after it: another
    clock). Times in milliseconds (WebHDFS) and datetimes are read as such; a time in a form
    not known here is trusted, as before."""
    key = version.split("=", 1)[0]
    if key not in _TIME_KEYS:
        return False
    seconds = stored_seconds(info.get(key))
    return seconds is not None and listed - seconds < RACY_S


def identity(info: dict[str, Any], listed: float) -> tuple[str, str, str]:
    """``(version, content, etag_key)`` of a file whose listing (at ``listed``,
    ``time.time()``) said ``info``: a version "" where it is a time too recent to vouch for
    the bytes; ``etag_key`` where its ETag is a multipart upload's (see :func:`_content`)."""
    version = _first(info, _VERSION_KEYS)
    if _racy(info, version, listed):
        version = ""  # (no version: identified by its bytes)
    elif version.startswith("mtime=") and info.get("ino") is not None:  # (local disk)
        version += f"{_INODE}{info['ino']} ctime={info.get('created')}"  # (as git compares)
    return (version, *_content(info))


_INODE = " ino="


def recorded_before_inodes(version: str) -> str:
    """``version`` as snap recorded a local file's before it held the inode and ctime (its
    mtime alone), so that a snapshot of then is trusted as it was until its next version."""
    return version.split(_INODE, 1)[0]
