"""What the inspection commands show, as data (pure: no I/O, no threads).

``inspect_doc`` turns a manifest into the document ``snap inspect --json`` prints (and the
terminal table is drawn from); ``summarise_value`` turns one decoded value into what
``snap head`` shows. The JSON shapes are part of the command line's contract: README lists
their keys, and keys are only ever added.
"""

from __future__ import annotations

import datetime
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import schema as schema_mod
from .manifest import Manifest

HISTOGRAM_BINS = 8
HISTOGRAM_WIDTH = 30
FIRST_VALUES = 6
TEXT_LIMIT = 60


# --- inspect ------------------------------------------------------------------------------


def spread(values: list[int]) -> dict[str, float]:
    """min / median / max / mean of ``values`` (zeros for an empty list)."""
    if not values:
        return {"min": 0, "median": 0, "max": 0, "mean": 0.0}
    ordered = sorted(values)
    n = len(ordered)
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {
        "min": ordered[0],
        "median": mid,
        "max": ordered[-1],
        "mean": round(sum(ordered) / n, 2),
    }


def histogram(values: list[int], bins: int = HISTOGRAM_BINS) -> list[dict[str, Any]]:
    """Integer bins over ``[min, max]``: ``[{"low", "high", "count"}]``, both ends inclusive.

    At most ``bins`` bins of equal integer width; one per value when the range is narrow.
    """
    if not values:
        return []
    low, high = min(values), max(values)
    width = max(1, math.ceil((high - low + 1) / bins))
    n = (high - low) // width + 1
    counts = [0] * n
    for v in values:
        counts[(v - low) // width] += 1
    return [
        {"low": low + i * width, "high": min(high, low + (i + 1) * width - 1), "count": c}
        for i, c in enumerate(counts)
    ]


def bars(hist: list[dict[str, Any]], width: int = HISTOGRAM_WIDTH) -> list[tuple[dict, str]]:
    """Each bin with a bar of ``#`` scaled so the fullest bin is ``width`` long."""
    top = max((b["count"] for b in hist), default=0)
    return [(b, "#" * (round(width * b["count"] / top) if top else 0)) for b in hist]


def inspect_doc(url: str, m: Manifest, shards: bool = False) -> dict[str, Any]:
    """The ``snap inspect --json`` document of a committed snapshot (manifest only)."""
    records = [s.records for s in m.shards]
    sizes = [s.bytes for s in m.shards]
    inputs = m.pipeline.get("inputs", {})
    doc: dict[str, Any] = {
        "path": url,
        "finished": True,
        "fingerprint": m.fingerprint,
        "fingerprint_parts": m.fingerprint_parts,
        "pipeline": m.pipeline,
        "params": m.pipeline.get("params", {}),
        "num_inputs": inputs.get("count", 0) if isinstance(inputs, dict) else 0,
        "created": m.created,
        "created_by": m.created_by,
        "run": m.run,
        "version": m.version,
        "num_records": m.num_records,
        "num_shards": m.num_shards,
        "num_record_batches": m.num_record_batches,
        "bytes": m.bytes,
        "uncompressed_bytes": m.uncompressed_bytes,
        "compression_ratio": round(m.uncompressed_bytes / m.bytes, 4) if m.bytes else 0.0,
        "compression": m.compression,
        "schema": schema_mod.describe(m.schema),
        "balance": {
            "records": spread(records),
            "bytes": spread(sizes),
            "records_histogram": histogram(records),
        },
    }
    if shards:
        doc["shards"] = [s.to_json() for s in m.shards]
    return doc


# --- head ---------------------------------------------------------------------------------


def non_finite(v: float) -> dict[str, str]:
    """A float NaN or infinity, which JSON has not, as an object a reader tells from text
    (the string "nan" may be a value): ``{"type": "float", "value": "nan"}`` (or ``"inf"``,
    ``"-inf"``; ``float(value)`` gives it back)."""
    return {"type": "float", "value": str(v)}


def _is_non_finite(v: Any) -> bool:
    return isinstance(v, dict) and v.keys() == {"type", "value"} and v["type"] == "float"


class Unquoted(str):
    """A value's text that is no text (a time, a duration, a decimal): a str in ``--json``,
    shown unquoted by :func:`format_summary` (quoted, a time looked like text)."""


def _scalar(v: Any) -> Any:
    """A value as the nearest JSON value: numpy scalars as Python's, NaN and infinities as
    :func:`non_finite` objects; what a yielded Arrow table may hold as text (dates and times
    in ISO 8601, durations and decimals as written), structs and lists field by field."""
    if isinstance(v, (np.datetime64, np.timedelta64)):  # (.item() of nanoseconds is an int)
        return Unquoted(v)
    if isinstance(v, np.floating) and v.dtype.itemsize < 8 and np.isfinite(v):
        return float(str(v))  # its own digits: a float32 0.1 was 0.10000000149011612
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return non_finite(v)
    if v is None or isinstance(v, (str, int, float)):
        return v
    if isinstance(v, (datetime.date, datetime.time)):  # (a datetime is a date)
        return Unquoted(v.isoformat())
    if isinstance(v, Mapping):
        return {str(k): summarise_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [summarise_value(x) for x in v]
    if isinstance(v, (bytes, np.ndarray)):
        return summarise_value(v)
    return Unquoted(v)  # a Decimal, a timedelta, ...


def _truncate_text(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, never between a character and
    a mark that belongs to it (an accent, a vowel sign, a zero-width joiner's emoji, a
    variation selector, a skin tone, an emoji tag) nor inside a flag's pair of letters:
    ``"e\u0301"`` showed as a bare ``e``."""
    if len(text) <= limit:
        return text
    cut = limit - 1
    while cut > 0 and (_joins(text[cut]) or text[cut - 1] == "\u200d"):
        cut -= 1
    flags = 0  # regional indicators just before the cut: an odd count splits a flag
    while flags < cut and _regional(text[cut - 1 - flags]):
        flags += 1
    cut -= flags % 2 if cut < len(text) and _regional(text[cut]) else 0
    return text[: cut or limit - 1] + "…"


def _joins(char: str) -> bool:
    """Whether ``char`` belongs to the character before it (see :func:`_truncate_text`)."""
    return (
        unicodedata.category(char)[0] == "M"
        or char == "\u200d"
        or (
            "\ufe00" <= char <= "\ufe0f"
            or "\U0001f3fb" <= char <= "\U0001f3ff"
            or "\U000e0020" <= char <= "\U000e007f"
        )
    )


def _regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def summarise_value(value: Any, utc: bool = False) -> Any:
    """One field of one record, readable: arrays summarised, long text and bytes truncated;
    ``utc``: a time of a column with a zone, replayed in UTC (numpy has none), marked ``Z``
    (bare, it read as the zone's wall time).

    Arrays become ``{"dtype", "shape", "first"}`` (``first`` holds up to six leading values),
    and arrays of numbers ``{"dtype", "shape", "min", "max", "mean", "non_finite", "first"}``
    whatever their shape or values: the statistics of the finite values (None where there
    are none: an empty or all-NaN array), and how many are not finite. Scalars stay
    themselves; strings longer than 60 characters and bytes become ``{"type", "length",
    "start"}`` (bytes start as hex).
    """
    if utc and isinstance(value, np.datetime64):
        return Unquoted(f"{value}Z")
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        out: dict[str, Any] = {"dtype": str(value.dtype), "shape": list(value.shape)}
        if value.dtype.kind in "biuf":  # (every key, empty or not: a reader may index them)
            low, high, mean, non_finite = _statistics(flat)
            out["min"] = None if low is None else _scalar(low)
            out["max"] = None if high is None else _scalar(high)
            out["mean"] = None if mean is None else _mean(mean, low, high)
            out["non_finite"] = non_finite
        # (text, bytes and arrays among them, a list of tags' or a ragged column's, each
        # summarised as a value of its own: a 5,000-character tag is cut as a str is)
        out["first"] = [_item(x) for x in flat[:FIRST_VALUES]]
        return out
    if isinstance(value, bytes):
        return {"type": "bytes", "length": len(value), "start": value[:24].hex()}
    if isinstance(value, str):
        if len(value) <= TEXT_LIMIT:
            return value
        return {"type": "str", "length": len(value), "start": _truncate_text(value)}
    return _scalar(value)


def zoned(schema: Any) -> frozenset[str]:
    """The columns of ``schema`` (Arrow) that are times with a zone."""
    return frozenset(f.name for f in schema if getattr(f.type, "tz", None))


def _mean(mean: float, low: Any, high: Any) -> float:
    """``mean`` to 10 significant digits, within [low, high] as shown (rounding can step out
    of it; a float32's shown in its own digits, 0.1, where the mean of 0.1s is 0.1000000015):
    it was rounded to 6 decimals, so 1e-09s had a mean of 0, below their minimum."""
    return min(max(float(f"{mean:.10g}"), float(_scalar(low))), float(_scalar(high)))


STATISTICS_CHUNK = 1 << 20  # values of a float array looked at at once (see _statistics)
EXACT_MEAN = 1 << 16  # a chunk of at most this many values is summed exactly (math.fsum)


def _statistics(flat: np.ndarray) -> tuple[Any, Any, float | None, int]:
    """Min, max and mean of the finite values of the numbers ``flat`` (None where there are
    none), and how many are not finite: without a float64 copy of ``flat`` (a 1.5 GB value
    took 4.9 GB to show), floats a chunk at a time."""
    if flat.dtype.kind != "f":  # (bool, integers: all finite)
        if not flat.size:
            return None, None, None, 0
        # (small: exact, as Python's ints sum; numpy's float64 sum of two int64s near
        # 2**58 and their small neighbours lost 3 in a mean of 3.3 million: Hypothesis)
        small = flat.size <= EXACT_MEAN and flat.dtype.kind in "iu"
        mean = sum(flat.tolist()) / flat.size if small else float(np.mean(flat, dtype=np.float64))
        return flat.min(), flat.max(), mean, 0
    low: Any = None
    high: Any = None
    mean, count = 0.0, 0
    for at in range(0, flat.size, STATISTICS_CHUNK):
        part = flat[at : at + STATISTICS_CHUNK]
        finite = part[np.isfinite(part)]
        if finite.size:
            lo, hi = finite.min(), finite.max()
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
            # a mean of means, each of values scaled to at most 1: a sum of large finite
            # values was inf ("mean": Infinity, no JSON; a probe's 1.7e308s)
            scale = max(abs(float(lo)), abs(float(hi))) or 1.0
            # summed exactly where it is small (np.mean of 1.8e308, 1, -1.8e308 cancelled to
            # 0, not 1/3; Hypothesis), by numpy's pairwise sum in a large value
            if finite.size <= EXACT_MEAN:
                exact = math.fsum((finite / np.float64(scale)).tolist())
                part_mean = exact / finite.size * scale
            else:
                part_mean = float(np.mean(finite / np.float64(scale), dtype=np.float64)) * scale
            count += finite.size
            mean += (part_mean - mean) * (finite.size / count)
    return low, high, (mean if count else None), flat.size - count


def _item(x: Any) -> Any:
    v = _scalar(x)  # (numpy's str as Python's; bytes and arrays summarised)
    return summarise_value(v) if isinstance(v, str) else v


def format_summary(summary: Any) -> str:
    """The terminal form of :func:`summarise_value`'s result, on one line: text quoted, a
    NaN or infinity not (``nan``, ``inf``), a struct's or list's values each so."""
    if _is_non_finite(summary):
        return str(summary["value"])
    if isinstance(summary, Unquoted):
        return str(summary)
    if isinstance(summary, dict) and {"dtype", "shape", "first"} <= summary.keys():
        shape = "[" + ",".join(str(s) for s in summary["shape"]) + "]"
        parts = [f"{summary['dtype']}{shape}"]
        if "min" in summary and math.prod(summary["shape"]):  # (an empty one: just [])
            # an integer's extremes in full (token ids, hashes: 49540, not 4.954e+04)
            low, high = ("n/a" if summary[k] is None else _format_number(summary[k])
                         for k in ("min", "max"))  # fmt: skip
            mean = "n/a" if summary["mean"] is None else f"{summary['mean']:.4g}"
            stats = f"min {low} max {high} mean {mean}"
            if summary.get("non_finite"):
                stats += f" ({summary['non_finite']} non-finite)"
            parts.append(stats)
        form = _format_number if np.dtype(summary["dtype"]).kind in "biufmM" else _format_item
        first = ", ".join(form(x) for x in summary["first"])
        more = ", …" if math.prod(summary["shape"]) > len(summary["first"]) else ""
        parts.append(f"[{first}{more}]")
        return "  ".join(parts)
    cut = isinstance(summary, dict) and summary.keys() == {"type", "length", "start"}
    if cut and summary["type"] == "bytes":
        more = "…" if summary["length"] > len(summary["start"]) // 2 else ""
        return f"bytes[{summary['length']}] {summary['start']}{more}".rstrip()  # (b"": none)
    if cut and summary["type"] == "str":
        return f"str[{summary['length']}] {summary['start']!r}"
    if isinstance(summary, dict):  # a struct's fields, each shown as a value
        return "{" + ", ".join(f"{k!r}: {format_summary(v)}" for k, v in summary.items()) + "}"
    if isinstance(summary, list):
        return "[" + ", ".join(format_summary(v) for v in summary) + "]"
    return repr(summary)


def _format_item(x: Any) -> str:
    """One of an array's first values: numbers as numbers, text quoted and escaped (a tag
    holding a line break or a terminal's escape is shown, not obeyed), summaries in short."""
    if isinstance(x, dict):
        return format_summary(x)
    return repr(x) if isinstance(x, str) else _format_number(x)  # (repr: quoted, escaped)


def _format_number(x: Any) -> str:
    if _is_non_finite(x):
        return str(x["value"])
    return f"{x:.4g}" if isinstance(x, float) else str(x)
