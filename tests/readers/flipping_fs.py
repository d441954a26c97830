"""An fsspec filesystem over memory:// whose reads flip one bit of a file's bytes: at rest
(every read) or in transit (the first read of that byte only).

Register it (:func:`register`), point snap at ``flipmem://...`` and set :data:`FLIPS`:
``{path: (offset, transient)}``, ``path`` as memory:// strips it (``/bkt/snap/...``).
"""

from __future__ import annotations

from typing import Any

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

FLIPS: dict[str, tuple[int, bool]] = {}
SERVED: dict[str, int] = {}  # reads that held the flipped byte, by path


class FlippingFileSystem(MemoryFileSystem):
    """memory:// whose ``cat_file`` flips bit 0x10 of the byte :data:`FLIPS` names."""

    protocol = "flipmem"

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(path.replace("flipmem://", "memory://", 1)))

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        data = bytes(super().cat_file(path, start=start, end=end, **kwargs))
        key = self._strip_protocol(path)
        if key not in FLIPS:
            return data
        at, transient = FLIPS[key]
        size = len(self.store[key].getvalue())
        first = 0 if start is None else start if start >= 0 else size + start
        if not first <= at < first + len(data):
            return data
        SERVED[key] = SERVED.get(key, 0) + 1
        if transient and SERVED[key] > 1:
            return data
        out = bytearray(data)
        out[at - first] ^= 0x10
        return bytes(out)


def register() -> None:
    fsspec.register_implementation("flipmem", FlippingFileSystem, clobber=True)
    FLIPS.clear()
    SERVED.clear()
