# Types of the compiled record batch decode (snapshot_cli/_decode.c).
from typing import Any

HW_CRC: bool
CRC_FOLD: bool
LZ4: bool
ZSTD: bool
MAX_COLUMNS: int

class DecompressError(ValueError): ...

def decode(
    message: Any,
    codec: int,
    columns: Any,
    slots: Any,
    start: int,
    stop: int,
    rows: int,
    expected: int,
) -> int: ...
def decode_many(jobs: Any) -> list[int | str]: ...
def crc32c(data: Any, crc: int = ..., fold: bool = ...) -> int: ...
