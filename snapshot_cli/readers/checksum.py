"""crc32c of shard bytes: a local file through a short-lived memory map, or a buffer."""

from __future__ import annotations

import mmap
import os
from typing import Any

import crc32c

_CRC_CHUNK = 8 << 20


def crc32c_file(path: str) -> str:
    """crc32c of a local file, straight from the page cache through a short-lived memory map
    (no copy; the mapping, and the pages it counted in this process's RSS, end on return)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return f"{crc32c.crc32c(b''):08x}"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                return crc32c_buffer(view)
            finally:
                view.release()


def crc32c_buffer(source: Any) -> str:
    """crc32c of a buffer, in chunks (the GIL is released for large chunks)."""
    crc = 0
    view = memoryview(source)
    for start in range(0, len(view), _CRC_CHUNK):
        crc = crc32c.crc32c(view[start : start + _CRC_CHUNK], crc)
    return f"{crc:08x}"
