"""Sizes, durations, counts, on/off flags and option dicts as people write them (pure; shared
by readers, writers and the CLI)."""

from __future__ import annotations

import datetime
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from .errors import OptionError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": KiB,
    "m": 1000**2, "mb": 1000**2, "mib": MiB,
    "g": 1000**3, "gb": 1000**3, "gib": GiB,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
    "p": 1000**5, "pb": 1000**5, "pib": 1 << 50,
    "e": 1000**6, "eb": 1000**6, "eib": 1 << 60,
}  # fmt: skip
UNITS_SAID = "units B, KB..EB or KiB..EiB"  # (what _UNITS takes, in any case)
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
MAX_SIZE = (1 << 63) - 1  # bytes: Arrow's and the manifest's sizes are 64-bit signed integers


def parse_size(text: str | int, what: str = "size") -> int:
    """``"256MiB"``, ``"1.5GB"``, ``"4096"`` or an int (numpy's too) → bytes, at most
    :data:`MAX_SIZE` (a size of 400 digits was an OverflowError from ``int(inf)``)."""
    text = integer(text)
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"{what} must look like 256MiB, 1GB or 4096 ({UNITS_SAID}), got {text!r:.60}"
            )
        number = float(m.group(1)) * _UNITS[m.group(2).lower()]  # (inf for 400 digits)
        value = int(number) if math.isfinite(number) else MAX_SIZE + 1
    if value > MAX_SIZE:
        raise ValueError(f"{what} must be below 8EiB (sizes are 64-bit), got {text!r:.60}")
    if value <= 0:
        raise ValueError(f"{what} must be > 0, got {text!r}")
    return value


_SECONDS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(text: str | float, what: str = "duration") -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"``, ``"0"`` or a number (int, float) of
    seconds → seconds (units in any case but ``M``, which may mean a month); text of a
    number but 0 without a unit is refused."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION_RE.match(str(text))
        if not m or m.group(2).lower() not in _SECONDS:
            raise ValueError(f"{what} must look like 7d, 12h, 30m, 90s or 0, got {text!r}")
        if m.group(2) == "M":  # (a month in pandas' offsets and ISO 8601: as a minute,
            raise ValueError(  # --retention 1M removed versions a minute old)
                f"{what} {text!r}: is M a month or a minute? give months as days "
                f"({m.group(1)}M: {round(float(m.group(1)) * 30)}d), minutes as {m.group(1)}m"
            )
        value = float(m.group(1)) * _SECONDS[m.group(2).lower()]
        if value and not m.group(2):  # (--retention 10: 10 seconds, where days were meant)
            raise ValueError(
                f"{what} {text!r} has no unit: give one, as in {m.group(1)}d, {m.group(1)}h, "
                f"{m.group(1)}m or {m.group(1)}s (a number without one is 0 only)"
            )
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{what} must be >= 0 and finite, got {text!r}")
    return value


def stored_seconds(value: object) -> float | None:
    """A time as a storage reports it (a datetime; seconds since the epoch; milliseconds, as
    WebHDFS gives them: any number past 1e11, so from March 1973 on) → seconds since the epoch;
    None for anything else."""
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value / 1000 if value > 1e11 else float(value)  # (1e11 s is year 5138)
    return None


def flag(value: object, what: str) -> bool:
    """An on/off option: True, False, numpy's bools (``bool_`` before numpy 2), or the
    integers 0 and 1, as a bool.
    Anything else raises ValueError: a string from a config file ("false") is truthy, and
    taking it as True would, say, shuffle where the user asked not to."""
    if isinstance(value, numbers.Integral) and value in (0, 1):  # bool, int, numpy ints
        return bool(value)
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise ValueError(f"{what} must be True or False, got {value!r}")


def integer(value: Any) -> Any:
    """A count option as Python's ``int`` when it is an integer of any kind (numpy's, from a
    config array or ``np.prod``), else unchanged for the option's own check to refuse; a bool
    is never taken as a count (``batch_size=True`` is a mistake, not 1)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def options_dict(value: object, what: str) -> dict[str, Any] | None:
    """``storage_options=``: None, or a mapping (of the filesystem's options, as fsspec takes
    them) as a dict. Anything else is an OptionError naming ``what``: a string was a
    TypeError deep in fsspec, and a falsy one (``0``, ``""``, ``[]``) passed as no options."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    raise OptionError(
        f"{what} must be a dict of the filesystem's options (as fsspec takes them, e.g. "
        f"{{'anon': True}}) or None, got {type(value).__name__} {value!r:.80}"
    )
