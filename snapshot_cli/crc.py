"""crc32c (Castagnoli): the checksum of every shard file, record batch and task table.

The compiled one where it was built and the CPU has the crc32 instruction
(``snapshot_cli/_decode_crc32c.h``: where AVX-512 has VPCLMULQDQ, 256-byte blocks are folded
with carry-less multiplication, 25-27 GB/s over data in memory on this project's machine
against 11-15 for the crc32c package and the instruction alone), else the crc32c package's.
Both give the same values (tests/test_crc.py); each lets go of the GIL for 32 KiB or more.
"""

from __future__ import annotations

from typing import Any, Protocol

import crc32c as _package

from . import compiled


class _Crc(Protocol):
    def __call__(self, data: Any, crc: int = 0, /) -> int: ...


_decode: Any = compiled.load("decode")  # (None: not compiled here, no C compiler at install)

COMPILED = _decode is not None and bool(_decode.HW_CRC)
FOLDED = COMPILED and bool(getattr(_decode, "CRC_FOLD", False))

crc32c: _Crc = _decode.crc32c if COMPILED else _package.crc32c
"""``crc32c(data, crc=0)``: the crc32c of a bytes-like object, continuing ``crc``."""
