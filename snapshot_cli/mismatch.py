"""Why a column's type changed between records, batches or tasks, and what to yield instead
(pure): the messages of :class:`.errors.SchemaMismatchError`, from :mod:`.schema`'s kinds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from .errors import SchemaMismatchError
from .schema import describe_type, format_type, kind


def mismatch_message(name: str, before: pa.DataType, now: pa.DataType, where: str = "") -> str:
    """Explain a type change of one column, with the fix for the common ragged case."""
    shown = format_type(before), format_type(now)
    if shown[0] == shown[1]:  # one look, two Arrow types: a large_string and a string
        cast = f": array.cast(pa.{before}())" if str(before).isidentifier() else ""
        return (
            f"column {name!r} changed type: {shown[0]} (Arrow {before}) before, {shown[1]} "
            f"(Arrow {now}) now{where}; yield one of them throughout (cast the other{cast})"
        )
    msg = f"column {name!r} changed type: {shown[0]} before, {shown[1]} now{where}"
    if empty := empty_list_hint(before, now, name):  # (float64: numpy's guess for [])
        msg += empty
        if kind(before) == kind(now):
            return msg
    elif hint := convert_hint(before, now, name):
        return msg + hint
    if {kind(before), kind(now)} <= {"tensor", "ragged"}:
        msg += (
            f". If its shape varies between records, declare it ragged: decorate the "
            f"pipeline function with @snapshot_cli.ragged({name!r})"
        )
    return msg


def convert_hint(before: pa.DataType, now: pa.DataType, column: str = "") -> str:
    """How to give a column one type when its records' values differ only in dtype (an int
    in a float column), in time zone or unit, in str against bytes, or in a number against
    text; "" for others."""
    if zones := _zone_hint(before, now, column):
        return zones
    units = _time_units(before, now)
    if units:  # (pandas 3 parses "2020-01-01" to us, a time with nanoseconds to ns)
        kind, unit = units
        return (
            f"; give every record's time one unit: np.{kind}64(value, '{unit}') "
            f"(pandas: value.as_unit('{unit}'))"
        )
    b, n = describe_type(before), describe_type(now)
    if {b["kind"], n["kind"]} == {"string", "binary"}:
        return "; yield text as str throughout (bytes.decode()) or every value as bytes"
    if {b["kind"], n["kind"]} == {"scalar", "string"}:  # (an id that is at times "n/a")
        d = b["dtype"] if b["kind"] == "scalar" else n["dtype"]
        number = {"int64": "int", "float64": "float", "bool": "bool"}.get(d, f"np.{d}")
        return f"; give the column one type, e.g. str(value) in every record (or {number}(value))"
    arrays, kinds = ("tensor", "ragged"), {b["kind"], n["kind"]}
    texts = before in _TEXT_LISTS or now in _TEXT_LISTS
    if ("scalar" in kinds and kinds & set(arrays)) or (texts and kinds & {"string", "binary"}):
        return _ONE_FORM["texts" if texts else "arrays"]  # ([5] here, 5 there; ["a"] and "a")
    same_kind = b["kind"] == n["kind"] == "scalar" or (b["kind"] in arrays and n["kind"] in arrays)
    if not same_kind or b["dtype"] == n["dtype"] or "arrow" in (b["kind"], n["kind"]):
        return ""
    common = np.result_type(np.dtype(b["dtype"]), np.dtype(n["dtype"]))
    name, note = ("bool_" if common == np.bool_ else common.name), ""
    if {b["dtype"], n["dtype"]} == {"int64", "uint64"}:  # (float64, their common type,
        name, note = "uint64", _IDS  # rounds ids: 2**64-1 and 2**64-2 became one value)
    if b["kind"] == "scalar":
        plain = {"float64": "float(value) or ", "int64": "int(value) or "}.get(name, "")
        frame = f"df[{column!r}]"  # (a DataFrame's int64 column in one task, float64 in
        df = f" (of a yielded DataFrame: {frame} = {frame}.astype(np.{name}))"  # another)
        return f"; give every record's value one dtype{note}: {plain}np.{name}(value)" + (
            df if column else ""  # (records of dicts, between two of them: no DataFrame)
        )
    if b["shape"] != n["shape"] and b["kind"] == n["kind"] == "tensor":
        return ""  # the shape changed too: the ragged hint is the one to give
    return f"; give every record's array one dtype{note}, e.g. value.astype(np.{name})"


_IDS = " (int64 if some are negative; a float would round 64-bit ids together)"


_TEXT_LISTS = (pa.list_(pa.string()), pa.list_(pa.binary()))  # captions, tags
_ONE_FORM = {  # a column of arrays (or lists of text) in some records, of one value in others
    "arrays": "; a column holds an array in every record or a number in every record: make the "
    "numbers arrays (np.atleast_1d(value)), or one-value arrays numbers (value.item())",
    "texts": "; a column holds a list of texts in every record or one text in every record: "
    "make a lone text a list ([value]), or join a list into one (' '.join(values))",
}


def _zone_hint(before: pa.DataType, now: pa.DataType, column: str) -> str:
    """Where two timestamp types differ in time zone (or one has none): how to give every
    record's time one (a column keeps one zone; UTC in some tasks and Europe/Paris in others
    was refused with no way out)."""
    if not (pa.types.is_timestamp(before) and pa.types.is_timestamp(now)):
        return ""
    zones = before.tz, now.tz
    if zones[0] == zones[1]:
        return ""
    if None in zones:
        zone = zones[0] or zones[1]
        return (
            "; a column's times have a time zone in every record or in none: give the naive "
            f"ones the others' (pandas: value.tz_localize({zone!r})), or take it from the "
            "others (value.tz_convert(None), which keeps them as UTC)"
        )
    return (
        "; give every record's time one time zone, e.g. UTC (pandas: value.tz_convert('UTC'); "
        f"a DataFrame's column: df[{column or 'name'!r}].dt.tz_convert('UTC'))"
    )


def _time_units(before: pa.DataType, now: pa.DataType) -> tuple[str, str] | None:
    """("datetime" or "timedelta", the finer unit) where two times differ only in unit."""
    kinds = ((pa.types.is_timestamp, "datetime"), (pa.types.is_duration, "timedelta"))
    for is_kind, name in kinds:
        if (
            is_kind(before)
            and is_kind(now)
            and before.unit != now.unit
            and getattr(before, "tz", None) == getattr(now, "tz", None)
        ):
            return name, max(before.unit, now.unit, key=["s", "ms", "us", "ns"].index)
    return None


_EMPTY = pa.list_(pa.float64())  # what a task of nothing but empty lists stores


def empty_list_hint(before: pa.DataType, now: pa.DataType, name: str = "") -> str:
    """Where one side is a 1-D ragged float64 column and the other another list or array:
    that may be a task (or a record batch) whose values were all empty lists, stored as
    numpy makes ``[]``; what to yield so that an empty value has the column's type too."""
    if (before == _EMPTY) == (now == _EMPTY):
        return ""
    other = now if before == _EMPTY else before
    d = describe_type(other)
    numbers = d["kind"] in ("ragged", "tensor") and d["dtype"] != "float64"
    if pa.types.is_list(other) and pa.types.is_string(other.value_type):
        typed = "np.array(texts, dtype=str)"
    elif pa.types.is_list(other) and pa.types.is_binary(other.value_type):
        typed = "np.array(values, dtype=bytes)"
    elif numbers:  # (labels; or an image's boxes, where it has none: (0, 4))
        rest = ", ".join(str(n or "...") for n in d["shape"][1:])
        one = f"np.asarray({name if name.isidentifier() else 'value'}, dtype=np.{d['dtype']})"
        typed = f"np.zeros((0, {rest}), np.{d['dtype']})" if rest else one
    else:
        return ""
    return (
        ". If the float64 comes from empty lists: [] has no type, and in a task where no "
        "value gave the column one it is stored as numpy makes it, float64; give the empty "
        f"values the column's type too, e.g. {typed}"
    )


def unify_error(name: str, types: Sequence[tuple[pa.DataType, str]]) -> SchemaMismatchError:
    """Error for tasks that wrote different types for one column (``(type, where)`` pairs)."""
    (t1, w1), (t2, w2) = types[0], types[1]
    return SchemaMismatchError(mismatch_message(name, t1, t2, f" (first from {w1}, then {w2})"))
