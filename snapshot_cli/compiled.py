"""The compiled parts (README, Development): ``_gather``, ``_shuffle``, ``_ragged`` and
``_decode``, each loaded once with the names its Python side calls.

A part that is not built (no C compiler at install) is None and its callers take their
pure-Python paths. So is a part built from older sources than the Python code beside it (an
editable install, then a pull that changed the C code): it lacks a name the code now calls.
Before, one caller's ``ImportError`` turned its part off while ``snap bench`` said it was
on, and another would have failed mid-epoch on the name missing. Now every caller and
``snap bench`` agree, and a stale part warns once, saying how to build it again.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

# the names each part's callers use (gather.py, plan.py, convert.py, direct.py, crc.py)
NEEDS: dict[str, tuple[str, ...]] = {
    "gather": ("Sources", "discard", "drop", "place", "populate", "scatter"),
    "shuffle": ("shuffle",),
    "ragged": ("Parts", "bounds", "take_text", "take_values"),
    "decode": ("DecompressError", "HW_CRC", "LZ4", "ZSTD", "crc32c", "decode", "decode_many"),
}
_loaded: dict[str, ModuleType | None] = {}
WHY_NOT: dict[str, str] = {}  # a part that did not load: why (not built, older, broken)


def load(name: str) -> ModuleType | None:
    """``snapshot_cli._<name>``, or None where it is not built or does not fit this code."""
    if name in _loaded:
        return _loaded[name]
    full = f"snapshot_cli._{name}"
    module: ModuleType | None = None
    try:
        module = importlib.import_module(full)
    except ModuleNotFoundError as err:
        WHY_NOT[name] = "not built" if err.name == full else f"cannot be loaded: {err}"
    except ImportError as err:  # (built for another Python, or against other libraries)
        WHY_NOT[name] = f"cannot be loaded: {err}"
    if module is not None and (lacks := [n for n in NEEDS[name] if not hasattr(module, n)]):
        WHY_NOT[name] = (
            f"built from older sources than snap's Python code (it lacks {', '.join(lacks)})"
        )
        warnings.warn(
            f"{module.__file__} was {WHY_NOT[name]}: snap runs without it, slower; build it "
            "again (pip install -e . in the checkout, or make)",
            RuntimeWarning,
            stacklevel=2,
        )
        module = None
    _loaded[name] = module
    return module
