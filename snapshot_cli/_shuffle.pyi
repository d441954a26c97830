# Types of the compiled shuffle (snapshot_cli/_shuffle.c).
from typing import Any

def shuffle(bit_generator: Any, array: Any) -> None: ...
