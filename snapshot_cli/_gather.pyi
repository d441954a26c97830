# Types of the compiled record gather (snapshot_cli/_gather.c).
from typing import Any

class Sources:
    held: int
    def __init__(self, sources: Any) -> None: ...
    def gather(
        self,
        out: Any,
        width: int,
        seg_source: Any,
        seg_base: Any,
        seg: Any,
        row: Any,
        batch_rows: int = ...,
        batch_stride: int = ...,
    ) -> None: ...
    def gather_columns(self, columns: Any, seg: Any, row: Any, batch_rows: int) -> None: ...
    def release(self) -> None: ...

def populate(buffer: Any, start: int, length: int) -> bool: ...
def scatter(dest: Any, width: int, slots: Any, src: Any) -> None: ...
