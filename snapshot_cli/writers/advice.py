"""What to yield or store instead of a value snap cannot write, and what to do about a few
errors of the pipeline's own (pure: messages only).

Each function names, for one kind of value a pipeline yields, the form snap takes, or
returns "" when the error's own words say enough.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import difflib
import enum
import logging
import numbers
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .. import schema as schema_mod

TIMES_HINT = (
    "a column of times holds one per record; store several as integers "
    "(value.astype('int64'), e.g. nanoseconds since 1970)"
)
TEXT_HINT = (
    "text is stored as one str or a flat list of str per record (captions, tags); this "
    "value mixes text with other values or has more than one dimension: make it a flat list "
    "of str, or give each row a record of its own"
)
# What to do instead, by numpy dtype kind, for the dtypes a column cannot hold
_DTYPE_HINTS = {
    "U": TEXT_HINT,
    "T": TEXT_HINT,  # (numpy's StringDType)
    "S": "bytes are stored as one bytes value or a flat list of bytes per record; make it a "
    "flat list of bytes, or give each row a record of its own",
    "O": "yield a numpy array of one numeric dtype, or one str or bytes value per record",
    "c": "store the real and imaginary parts as two float columns",
    "M": TIMES_HINT,
    "m": "a column of times holds one per record; store several as integers "
    "(value.astype('int64'))",
    "V": "store each field of a structured array as its own column, "
    "**{name: v[name] for name in v.dtype.names}",
}


def unsupported_dtype_message(name: str, dtype: np.dtype) -> str:
    """Why column ``name`` cannot hold ``dtype``, and what to store instead."""
    hint = _DTYPE_HINTS.get(dtype.kind, "convert it to one of these")
    if dtype.kind == "V" and not dtype.names:  # (raw bytes, np.dtype("V8"))
        hint = "store it as bytes (v.tobytes())"
    if dtype.name.startswith(schema_mod.LOW_PRECISION):  # (int4's widened: int8; uint2's: uint8)
        wide = dtype.name.partition("int")[0] + "int8" if "int" in dtype.name else "float32"
        hint = schema_mod.low_precision_hint(
            f"v.astype(np.{wide})", f"v.view(np.uint{8 * dtype.itemsize})"
        )
    return (
        f"column {name!r} has dtype {dtype}; supported dtypes are bool, int8..int64, "
        f"uint8..uint64, float16/32/64: {hint}"
    )


def list_of_dicts(value: Sequence[dict[str, Any]], column: str) -> str:
    """A list of dicts as one record's value (a detection dataset's annotations): each key
    a ragged column of its own, one value per dict, in the same order."""
    key = next((k for k in value[0] if isinstance(k, str)), "key")
    return (
        f"column {column!r} has a list of {len(value)} dicts ({_short(value[0])}, ...): a "
        f"value is an array, a number or text; give each key a column of its own, one value "
        f"per dict in order, e.g. {column}_{key}=np.array([d[{key!r}] for d in "
        f"{column}]), and declare those columns @snapshot_cli.ragged(...) if their length "
        "varies between records"
    )


def _short(d: dict[str, Any]) -> str:
    text = repr(d)
    return text if len(text) <= 60 else text[:57] + "..."


def store_instead(value: Any, column: str) -> str:
    """What to store instead of a value of an unsupported type, by its kind."""
    if isinstance(value, dict):
        return f"flatten it into columns of their own ({column}_{next(iter(value), 'key')}, ...)"
    if isinstance(value, (numbers.Rational, numbers.Real, decimal.Decimal)):  # Fraction, ...
        return "store it as a float (float(v)), or as text (str(v)) to keep every digit"
    if isinstance(value, datetime.date):  # (a datetime is a time column: see times.py)
        return "store it as a time (np.datetime64(v, 's')), a number (v.toordinal()) or text"
    if isinstance(value, datetime.time):
        return "store it as a number (seconds since midnight) or as text"
    if isinstance(value, enum.Enum):
        return "store v.value or v.name"
    if isinstance(value, (uuid.UUID, os.PathLike)):
        return "store str(v)" + (" or v.bytes" if isinstance(value, uuid.UUID) else "")
    if isinstance(value, (set, frozenset)):
        return "store sorted(v) as an array (np.asarray), or a str"
    if isinstance(value, Iterator):
        return "make it a list first (list(v)), then an array (np.asarray)"
    if type(value).__module__.split(".")[0] == "pyarrow":  # one value of a table's rows
        if callable(getattr(value, "as_py", None)):
            return "a pyarrow scalar: store v.as_py()"
        return (
            "a pyarrow array: store v.to_numpy() as one record's array, or yield the whole "
            "pyarrow Table or RecordBatch, a batch of records"
        )
    kind, module = type(value).__name__, type(value).__module__
    if module.startswith("scipy.sparse"):  # a TF-IDF row, a one-hot matrix
        return (
            "a sparse matrix: store v.toarray() (dense), or its nonzeros as two ragged "
            "columns (v.indices and v.data of a CSR row)"
        )
    if kind == "SparseTensor":  # TensorFlow's
        return (
            "a sparse tensor: store tf.sparse.to_dense(v).numpy(), or v.indices.numpy() and "
            "v.values.numpy() as two columns"
        )
    if kind == "RaggedTensor":  # TensorFlow's: rows of different lengths in one value
        return (
            "a ragged tensor: yield a record per row (row.numpy()), or store "
            "v.flat_values.numpy() and v.row_lengths().numpy() as two columns"
        )
    return "convert it to one of these; lists with np.asarray"


def columnwise_hint(record: Mapping[str, Any]) -> str:
    """For a refused record whose values are all lists of one length: it may be several
    records column by column (what a batched map returns), which is a batch."""
    lengths = {len(v) if isinstance(v, (list, tuple)) else -1 for v in record.values()}
    if len(lengths) != 1 or (n := lengths.pop()) < 2:
        return ""
    return (
        f"; if this dict holds {n} records column by column (as a batched map returns), "
        "yield snapshot_cli.Batch(**columns) instead"
    )


_said_columnwise = False


def warn_columnwise(record: Mapping[str, Any]) -> None:
    """Say (once a process) of a record holding a list of text whose values are all lists
    of one length: a batched map's output (``{"text": [...], "label": [...]}``) yielded as a
    record is stored as one record of lists, as a token classification's ``{"tokens": [...],
    "tags": [...]}`` rightly is. (A list of text was refused before it was a value, which
    told the first of these what to do.)"""
    global _said_columnwise
    hint = columnwise_hint(record)
    if hint and not _said_columnwise:
        _said_columnwise = True  # (a line on stderr, from a worker process too)
        logging.getLogger("snapshot_cli").warning(
            "a record's columns are all lists of one length, stored as one record of lists%s",
            hint,
        )


def _value_kind(value: Any) -> str:
    """A value's kind as a column's type tells it: numbers by int/float/bool (Python's or
    numpy's alike), text, bytes, else its type's name."""
    for kinds, name in _KINDS:
        if isinstance(value, kinds):
            return name
    return type(value).__name__


_KINDS = (((bool, np.bool_), "bool"), ((numbers.Integral,), "int"), ((numbers.Real,), "float"),
          ((str,), "str"), ((bytes,), "bytes"))  # fmt: skip


def mixed_frame_column(frame: Any, error: str) -> str:
    """For a DataFrame refused for a column that changed type: the message, where that
    column has dtype object and holds values of several kinds (int and str: a column read
    from a CSV with a few "n/a"), with how to give it one type; "" where it does not."""
    for name in frame.columns:
        column = frame[name]
        if column.dtype != object or f"column {name!r}" not in error:
            continue
        kinds = sorted({_value_kind(v) for v in column.array})
        if len(kinds) < 2:
            continue
        col = f"df[{name!r}]"
        if "str" in kinds and {"int", "float", "bool"} & set(kinds):
            fix = f"{col} = {col}.astype(str), or pd.to_numeric({col}) to make them numbers"
        elif set(kinds) <= {"int", "float", "bool"}:
            fix = f"{col} = {col}.astype(float)"
        elif "str" in kinds and "list" in kinds:
            fix = f"{col} = {col}.map(lambda v: [v] if isinstance(v, str) else v), a list each"
        else:
            fix = f"{col} = {col}.map(...) to one type"
        return (
            f"column {name!r} of a yielded DataFrame has dtype object and holds values of "
            f"{len(kinds)} types ({', '.join(kinds)}); a column keeps one type: convert it "
            f"before yielding, e.g. {fix}"
        )
    return ""


def unmatched_ragged(declared: Iterable[str], columns: Sequence[str]) -> list[str]:
    """The names ``@snap.ragged`` declared that are none of ``columns`` (a misspelling:
    such a name marks no column, silently)."""
    return sorted(set(declared) - set(columns))


def ragged_names_note(unmatched: Sequence[str], columns: Sequence[str]) -> str:
    """What a declared ragged name that is no column is, and the column it may have meant."""
    if not unmatched:
        return ""
    names = ", ".join(map(repr, unmatched))
    meant = []
    for name in unmatched:
        close = difflib.get_close_matches(name, columns, n=1)
        if close:
            meant.append(f"{close[0]!r} for {name!r}" if len(unmatched) > 1 else repr(close[0]))
    guess = f"; did you mean {', '.join(meant)}?" if meant else "."
    shown = ", ".join(map(repr, columns[:20])) + (", ..." if len(columns) > 20 else "")
    which = "which is no column" if len(unmatched) == 1 else "which are no columns"
    return (
        f"@snapshot_cli.ragged declares {names}, {which} the pipeline yields (its columns: "
        f"{shown}){guess} A name that is no column marks nothing: correct it in the decorator"
    )


def warn_unmatched_ragged(declared: Iterable[str], schema: pa.Schema) -> None:
    """Say (a warning) which names ``@snap.ragged`` declared that the records do not have,
    and which are columns of one value a record (a number, a text), which it marks not."""
    log = logging.getLogger("snapshot_cli")
    note = ragged_names_note(unmatched_ragged(declared, schema.names), schema.names)
    if note:
        log.warning("%s", note)
    kinds = {f.name: schema_mod.kind(f.type) for f in schema}
    for name in sorted(n for n in set(declared) if kinds.get(n) in _ONE_VALUE):
        log.warning("@snapshot_cli.ragged declares %r, a column of %s, one a record, not of "
                    "arrays: ragged marks an array column whose shape varies, and marks "
                    "nothing here; leave it out of the decorator", name,
                    _ONE_VALUE[kinds[name]])  # fmt: skip


_ONE_VALUE = {"scalar": "numbers", "string": "text", "binary": "bytes"}


def not_a_record_message(item: Any, why: str = "") -> str:
    """The error for a yielded ``item`` that is neither a record nor a batch; ``why``: what
    else was wrong, said when there is no better advice."""
    hint = not_a_record_hint(item) or (f" ({why})" if why else "")
    return (
        f"the pipeline yielded a value of type {type(item).__name__}; yield records "
        "(dict of column → value) or batches (snapshot_cli.Batch, "
        f"pyarrow.RecordBatch/Table, a pandas or polars DataFrame){hint}"
    )


def not_a_record_hint(item: Any) -> str:
    """What to yield instead of ``item``, which is neither a record nor a batch ("" if no
    better advice than the message's own)."""
    if hasattr(item, "_asdict") and isinstance(item, tuple):
        return " (a namedtuple is one record: yield record._asdict())"
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return " (a dataclass is one record: yield dataclasses.asdict(record))"
    if type(item).__name__ == "Series" and callable(getattr(item, "to_dict", None)):
        return (
            " (a pandas Series is one row, as iterrows() gives: yield row.to_dict(), or "
            "yield the whole DataFrame at once, which is faster)"
        )
    if isinstance(item, (list, tuple)):
        return " (`yield from` a list of records)"
    for method in ("collect", "compute"):  # a polars LazyFrame, a Dask DataFrame
        if callable(getattr(item, method, None)) and not isinstance(item, Iterator):
            return f" (a lazy query: yield or return what it computes, value.{method}())"
    if isinstance(item, Iterator):
        return " (it is an iterator: `yield from` it to yield its records, not it)"
    if item is None:
        return " (a bare `yield`, or `yield f(x)` where f returns nothing?)"
    if isinstance(item, np.void) and item.dtype.names:
        return (
            " (a row of a numpy structured array: yield the whole array, a batch of its "
            "fields, or the row as a record: {name: row[name] for name in row.dtype.names})"
        )
    if isinstance(item, (str, bytes, numbers.Number, np.generic)) or hasattr(item, "shape"):
        return " (a record names its columns: yield {'x': value})"
    return ""


# pickle's words for a function of __main__ it cannot find by name (3.10-3.13, then 3.14)
_MAIN_LOOKUP = re.compile(r"attribute lookup (\w+) on __main__|not found as __main__\.(\w+)")


def main_pickling_hint(err: BaseException) -> str:
    """For a pipeline of the calling script or notebook (sent to the workers by value) that
    hands one of its functions to processes of its own (a ``ProcessPoolExecutor``, a
    ``multiprocessing.Pool``): in a worker, ``__main__`` is not the script."""
    try:
        text = str(err)
    except Exception:  # (the user's __str__ failed: Python prints <exception str() failed>)
        return ""
    found = _MAIN_LOOKUP.search(text)
    if found is None:
        return ""
    name = found.group(1) or found.group(2)
    return (
        f"\n{name!r} is defined in the script or notebook that called snap.create, and the "
        "pipeline runs in snap's worker processes, where processes it starts itself cannot "
        f"find it by name: move {name!r} into a module of its own beside the script (from "
        f"helpers import {name}), or run the pipeline in this process (workers=0)"
    )


# Names IPython defines in a notebook's (or an ipython shell's) builtins alone
_IPYTHON_NAMES = ("display", "get_ipython", "display_html", "display_markdown", "HTML")


def ipython_name_hint(err: BaseException) -> str:
    """For a pipeline that uses ``display`` or ``get_ipython`` (IPython's, in the notebook's
    process only): in a worker process they are not defined (a NameError no one could
    place, a probe)."""
    name = getattr(err, "name", None) if isinstance(err, NameError) else None
    if name not in _IPYTHON_NAMES:
        return ""
    return (
        f"\n{name!r} is IPython's, defined in the notebook's own process only, and the "
        "pipeline runs in snap's worker processes: leave it out of the pipeline (print, or "
        "log), or run the pipeline in this process (workers=0)"
    )
