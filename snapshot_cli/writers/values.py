"""One record value → its class, dtype and shape, checked (pure: messages only).

A value is a numpy array or scalar, a Python ``bool``/``int``/``float``, ``str`` or
``bytes`` (or a list of them: several captions or tags), a time (:mod:`.times`), or what
converts to one (a list, another library's array: :mod:`.foreign`); anything else is a
:class:`RecordError` naming the column and what to store instead (:mod:`.advice`), as is a
value past what one Arrow array holds.
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from .. import arrays
from .. import schema as schema_mod
from ..errors import RecordError
from . import advice, foreign, times

# Value classes a record field can have.
SCALAR, ARRAY, STRING, BINARY = "scalar", "array", "string", "binary"
TEXTS, BLOBS = "texts", "blobs"  # a list of str (captions, tags) or of bytes, per record
LISTS = {TEXTS: pa.string(), BLOBS: pa.binary()}  # their elements' Arrow types


def _numpy_dims() -> int:
    """The most dimensions a numpy array has (64 since numpy 2, 32 before)."""
    for n in (64, 32):
        try:
            np.empty((0,) * n)
        except ValueError:
            continue
        return n
    return 32


MAX_NDIM = _numpy_dims()


def classify(value: Any, column: str) -> tuple[str, Any, Any]:
    """Return ``(class, dtype, shape)`` of one record value, normalised.

    Returns the normalised value as the third element for arrays (``shape`` is ``value.shape``).

    Raises:
        RecordError: the value's type is not supported.
    """
    if type(value) is TextList:  # several texts (or bytes values) per record
        return _classify_list(value, column), None, ()
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            value = value[()]
        else:
            check_dtype(value.dtype, column)
            if value.size > arrays.MAX_OFFSET:
                raise too_large(column, f"an array of {value.size:,} values (shape {value.shape})")
            if max(value.shape) > schema_mod.MAX_DIMENSION:  # an empty one: its shape's int32s
                raise RecordError(schema_mod.dimension_message(value.shape, column))
            if value.ndim >= MAX_NDIM:  # (a column of them: one dimension more)
                raise RecordError(
                    f"column {column!r} has an array of {value.ndim} dimensions (nested lists "
                    f"{value.ndim} deep?); a record's array has at most {MAX_NDIM - 1}, as "
                    f"numpy holds {MAX_NDIM} with the records' own: reshape it"
                )
            return ARRAY, value.dtype, value.shape
    if isinstance(value, (np.str_, np.bytes_)):  # np.array("cat")[()]: text
        value = plain_text(value)
    if isinstance(value, np.generic):
        if times.is_time_dtype(value.dtype):
            times.check_time(value.dtype, column, int(np.isnat(value)))
        else:
            check_dtype(value.dtype, column)
        return SCALAR, value.dtype, ()
    if isinstance(value, bool):
        return SCALAR, np.dtype(bool), ()
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise RecordError(
                f"column {column!r} has an int outside the int64 range ({shown_int(value)}); "
                + (INT_ADVICE_UINT64 if 0 < value < 2**64 else INT_ADVICE_OTHER)
            )
        return SCALAR, np.dtype(np.int64), ()
    if isinstance(value, float):
        return SCALAR, np.dtype(np.float64), ()
    if isinstance(value, str):
        if not value.isascii():
            check_utf8(value, column)
        if len(value) > arrays.MAX_OFFSET >> 2 and len(value.encode("utf-8")) > arrays.MAX_OFFSET:
            raise too_large(column, f"a str of {len(value.encode('utf-8')):,} bytes in UTF-8")
        return STRING, None, ()
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > arrays.MAX_OFFSET:
            raise too_large(column, f"{len(value):,} bytes")
        return BINARY, None, ()
    if foreign.is_missing(value):
        raise RecordError(
            f"column {column!r} is {value!r}; snap columns have no missing values "
            "(use a sentinel value or a separate mask column)"
        )
    hint = advice.store_instead(value, column)
    raise RecordError(
        f"column {column!r} has a value of type {type(value).__name__}; supported: numpy "
        f"arrays and scalars of bool/int/uint/float dtype, int, float, bool, str, bytes, "
        f"datetimes and timedeltas ({hint})"
    )


class TextList(list):
    """A record's list of str (``cls`` TEXTS) or of bytes (BLOBS), empty or not: an empty
    numpy array of text (``np.array([], dtype=str)``) is typed, an empty list is not."""

    __slots__ = ("cls",)

    def __init__(self, items: list[Any], cls: str) -> None:
        super().__init__(items)
        self.cls = cls


def _classify_list(value: TextList, column: str) -> str:
    """TEXTS or BLOBS for a list of str or of bytes (each checked as one such value is)."""
    cls = value.cls
    total = 0
    for item in value:
        if isinstance(item, str) and not item.isascii():
            check_utf8(item, column)
        total += len(item)
    if total > arrays.MAX_OFFSET >> 2:
        size = sum(len(i.encode("utf-8")) if isinstance(i, str) else len(i) for i in value)
        if size > arrays.MAX_OFFSET:
            raise too_large(column, f"a list of {len(value):,} texts of {size:,} bytes")
    return cls


def text_list(value: Any) -> TextList | None:
    """``value`` as a list of str (or of bytes) if it is a non-empty list or tuple of them
    all, a 1-D numpy array of text, empty or not, or a non-empty 1-D object array of them
    all (several captions or tags per record), else None."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "USOT":
            return None
        if value.dtype.kind == "O":  # str or bytes objects (pandas' text columns), all one
            return text_list(value.tolist()) if value.size else None
        if value.dtype.kind == "T":  # numpy's StringDType: str, as "U" (its na_object: not)
            return text_list(value.tolist()) if value.size else TextList([], TEXTS)
        return TextList(value.tolist(), TEXTS if value.dtype.kind == "U" else BLOBS)
    if not isinstance(value, (list, tuple)) or not value:
        return None
    first = value[0]  # (a list of numbers is told by it: no generator set up for each)
    if isinstance(first, str) and all(isinstance(v, str) for v in value):
        return TextList([v[:] for v in value], TEXTS)  # (np.str_ as str, whole: plain_text)
    if isinstance(first, bytes) and all(isinstance(v, bytes) for v in value):
        return TextList([bytes(v) for v in value], BLOBS)
    return None


def too_large(column: str, what: str) -> RecordError:
    """One value past Arrow's 32-bit lengths (2 GiB of text or bytes, 2**31 - 1 values)."""
    return RecordError(
        f"column {column!r} has {what}: one value holds at most {arrays.MAX_OFFSET:,} values or "
        "bytes (Arrow's 32-bit lengths); split it across records (e.g. a record per chunk of "
        "frames or of text) or store it as a file and its path"
    )


def check_utf8(value: str, column: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise RecordError(
            f"column {column!r} has a str that is not valid Unicode text ({err.reason}: "
            f"{value[err.start : err.end]!r} at position {err.start}, e.g. from decoding bytes "
            "with errors='surrogateescape'); store it as bytes, or decode it with errors='replace'"
        ) from None


def check_dtype(dtype: np.dtype, column: str) -> None:
    if not schema_mod.is_supported_dtype(dtype):
        raise RecordError(advice.unsupported_dtype_message(column, dtype))


# Python types stored as they are: (class, dtype) of a value of each
PLAIN: dict[type, tuple[str, Any]] = {
    float: (SCALAR, np.dtype(np.float64)),
    int: (SCALAR, np.dtype(np.int64)),
    bool: (SCALAR, np.dtype(bool)),
    str: (STRING, None),
    bytes: (BINARY, None),
}
# ... and what a column builder takes as quickly once its column has that class and dtype:
# numpy's scalars of the dtypes a column holds (each of one dtype, native: an item of a
# big-endian array is native too), kept as they are, and numpy's text items, as Python's
_NUMBERS = (np.bool_, np.byte, np.ubyte, np.short, np.ushort, np.intc, np.uintc, np.int_,
            np.uint, np.longlong, np.ulonglong, np.half, np.single, np.double)  # fmt: skip
FAST: dict[type, tuple[str, Any]] = {
    **PLAIN,
    **{k: (SCALAR, np.dtype(k)) for k in _NUMBERS if schema_mod.is_supported_dtype(np.dtype(k))},
    np.str_: (STRING, None),
    np.bytes_: (BINARY, None),
}


# what holds an int past int64: uint64 only a positive one below 2**64
INT_ADVICE_UINT64 = "give it as a numpy uint64 (np.uint64(n)), or as a float or text"
INT_ADVICE_OTHER = "give it as a float (which keeps 15-17 digits) or as text (str(n))"


def shown_int(value: int) -> str:
    """An int in full, or its magnitude where it is long (a 4,000-digit one)."""
    return str(value) if abs(value) < 10**24 else f"{value:.3g}"


def plain_text(value: np.str_ | np.bytes_) -> str | bytes:
    """A numpy text scalar as Python's str or bytes, whole: ``.item()`` (and ``str()``)
    drop its trailing NULs, and ``np.bytes_(b"ab\x00")`` came back as ``b"ab"``."""
    return value[:]


def normalise(value: Any, column: str) -> Any:
    if type(value) in PLAIN:
        return value
    if isinstance(value, (np.str_, np.bytes_)):  # a numpy string array's items: text
        return plain_text(value)
    if isinstance(value, (list, tuple)):
        texts = text_list(value)
        if texts is not None:
            return texts
        dicts = value and isinstance(value[0], dict)
        if dicts and all(isinstance(v, dict) for v in value):  # COCO's annotations
            raise RecordError(advice.list_of_dicts(value, column))
        try:
            array = np.asarray(value)
        except Exception as err:  # (its items' own reasons too: a tensor that needs grad...)
            tensors = any(hasattr(v, "detach") for v in value)
            raise RecordError(
                f"column {column!r} has a {type(value).__name__} numpy cannot make one array "
                f"of ({type(err).__name__}: {err}); yield a numpy array of one dtype"
                + (" (of torch tensors: torch.stack(v).detach().cpu().numpy())" * tensors)
            ) from None
        if array.dtype == object:
            _refuse_objects(list(value), column, type(value).__name__)
        if arrays.rounded_ints(value, array):
            raise RecordError(  # (numpy rounds it to a float64)
                f"column {column!r} has a {type(value).__name__} holding an int outside the "
                "int64 range, or one beside floats (or numpy uint64 beside signed ints) that a "
                "float64 does not hold exactly, which numpy would round to a float64; give "
                "the list a dtype that holds it exactly (np.array(v, dtype=np.uint64)), or "
                "keep ids apart from floats"
            )
        return array
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, np.ma.MaskedArray):
        return foreign.unmasked(value, column)
    if isinstance(value, np.ndarray) and value.dtype.kind in "USOT" and value.ndim == 1:
        return _texts_or(value, column)
    if isinstance(value, (datetime.date, datetime.timedelta)):  # (pandas' are subclasses)
        return times.as_numpy_time(value, column)
    if foreign.is_array_like(value):
        value = foreign.as_numpy(value, column)
        if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1:
            return _texts_or(value, column)  # (a pandas Series of str: several texts)
    return foreign.native(value)


def _texts_or(value: np.ndarray, column: str) -> Any:
    """A 1-D array of text as a TextList; of other objects as it is (refused later)."""
    texts = text_list(value)
    if texts is None and value.dtype.kind in "OT":
        _refuse_objects(value.tolist(), column, f"numpy array of dtype {value.dtype}")
    return value if texts is None else texts


def _refuse_objects(items: list[Any], column: str, kind: str) -> None:
    """A list or array of objects that holds a missing value or times is refused saying so
    (the message was the one for any object array: "yield a numpy array of one numeric
    dtype", and a snap.Batch of such lists, which it suggested, was refused too)."""
    for i, item in enumerate(items):
        if foreign.is_missing(item):
            raise RecordError(
                f"column {column!r} has a {kind} holding {item!r} (item {i}); snap columns "
                "have no missing values (use a sentinel value or a separate mask column)"
            )
    if items and all(isinstance(v, (datetime.date, datetime.timedelta)) for v in items):
        raise RecordError(f"column {column!r} has a {kind} of times: {advice.TIMES_HINT}")


def describe(cls: str, dtype: Any, shape: Any) -> str:
    if cls == ARRAY:
        return f"{dtype.name} array of shape {tuple(shape)}"
    if cls == SCALAR:
        return f"{dtype.name} scalar"
    if cls in LISTS:
        return "list of str" if cls == TEXTS else "list of bytes"
    return "str" if cls == STRING else "bytes"


def arrow_type(cls: str, dtype: Any) -> pa.DataType:
    """An Arrow type of the value class and dtype (any shape: for messages)."""
    if cls in (STRING, BINARY):
        return pa.string() if cls == STRING else pa.binary()
    if cls in LISTS:
        return pa.list_(LISTS[cls])
    value_type = pa.from_numpy_dtype(dtype)
    return value_type if cls == SCALAR else pa.list_(value_type)
